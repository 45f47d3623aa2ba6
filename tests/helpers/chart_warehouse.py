"""The charts' session warehouse: two standalone simulated models and three checkpoints of the SmolLM3-3B series."""

from __future__ import annotations

from pathlib import Path

import qkdb
from qkdb.ingest.capture.simulate import Ranges, simulate
from qkdb.ingest.capture.simulate_sinks import Sinks
from qkdb.ingest.sources.layout import read_metadata, write_metadata

STANDALONE = (("sim-a-1b", "FamA", 1, Ranges()), ("sim-b-2b", "FamB", 2, Ranges(alpha_k=(0.5e-3, 2e-3), slope_ratio=1.0)))
SERIES = (
    ("smollm3-3b-stage1-step-40000", Ranges(alpha_k=(2e-3, 5e-3), mu_q_a=(2.0, 5.0))),
    ("smollm3-3b-stage1-step-2400000", Ranges(alpha_k=(3e-3, 6e-3), mu_q_a=(3.0, 7.0))),
    ("smollm3-3b-lc-4k-to-32k-step-4000", Ranges(alpha_k=(0.3e-3, 0.8e-3), mu_q_a=(4.0, 9.0))),
)
LAYERS, HEAD_DIM, VECTORS = 5, 32, 400  # 400: 40 queries per decile, enough for plasticity (32)

POOLED_MODELS = [STANDALONE[0][0], STANDALONE[1][0], SERIES[-1][0]]  # standalone + latest checkpoint

# The sinks' warehouse (a warehouse of its own: its short texts would change every cross-model figure
# above): two checkpoints of a toy series, every position of 8 texts of 64 tokens captured with each
# query's normaliser, the share of planted sink heads rising in training.
SINK_SERIES = (("toy-sinks-step-1000", 0.25), ("toy-sinks-step-2000", 0.75))
SINK_TEXT, SINK_TEXTS = 64, 8

def build_chart_warehouse(root: Path) -> Path:
    """Simulate and ingest the models above into ``root/home``."""
    home = root / "home"
    for name, family, seed, ranges in STANDALONE:
        ds = simulate(root / name, layers=LAYERS, q_heads=4, kv_heads=2, head_dim=HEAD_DIM, vectors=VECTORS,
                      model=name, family=family, seed=seed, workers=1, ranges=ranges)
        qkdb.api.ingest(ds, name, family=family, gqa_ratio=2, n_layers=LAYERS, workers=1, home=home)
    for i, (name, ranges) in enumerate(SERIES):
        # Registry names: series, order, phase and step come from the registry (gqa 16/4 = 4).
        ds = simulate(root / name, layers=LAYERS, q_heads=4, kv_heads=1, head_dim=HEAD_DIM, vectors=VECTORS,
                      model=name, family="SmolLM3", seed=10 + i, workers=1, ranges=ranges, nope_layers=(3,))
        qkdb.api.ingest(ds, name, gqa_ratio=4, n_layers=LAYERS, workers=1, home=home)
    # A benchmark at the simulated lengths (1k-4k tokens), each pooled model standing for one of its models.
    scores = root / "toybench.csv"
    scores.write_text("benchmark,bench_model,mode,slice_kind,slice,score\n" + "".join(
        f"toybench,{bench},nonthinking,{kind},{sl},{score}\n"
        for bench, base in (("Toy-A", 60.0), ("Toy-B", 45.0), ("Toy-C", 30.0))
        for kind, sl, score in (("overall", "overall", base), ("token_length", "1k", base + 10), ("token_length", "2k", base + 5),
                                ("token_length", "4k", base - 5 * (base / 30)))))
    mapping = root / "toybench_models.csv"
    mapping.write_text("model,benchmark,bench_model,match_kind\n" + "".join(
        f"{model},toybench,{bench},{kind}\n"
        for model, bench, kind in zip(POOLED_MODELS, ("Toy-A", "Toy-B", "Toy-C"), ("exact", "base_vs_instruct", "other"))))
    qkdb.api.import_benchmarks([scores, mapping], home)
    return home


def build_sink_warehouse(root: Path) -> Path:
    """Simulate and ingest :data:`SINK_SERIES` into ``root/home`` (planted sinks, dense short texts)."""
    home = root / "home"
    for i, (name, fraction) in enumerate(SINK_SERIES, start=1):
        ds = simulate(root / name, layers=3, q_heads=4, kv_heads=2, head_dim=HEAD_DIM, max_position=SINK_TEXT,
                      n_examples=SINK_TEXTS, vectors=SINK_TEXT * SINK_TEXTS, positions="dense", model=name,
                      family="ToySinks", seed=20 + i, workers=1, sinks=Sinks(fraction=fraction))
        write_metadata(ds, {**read_metadata(ds), "series": "toy-sinks", "series_order": i, "phase": "stage1",
                            "step": 1000 * i})
        qkdb.api.ingest(ds, name, workers=1, home=home, plasticity=False)
    return home

"""The charts' session warehouse: two standalone simulated models and three checkpoints of the SmolLM3-3B series."""

from __future__ import annotations

from pathlib import Path

import qkdb
from qkdb.ingest.capture.simulate import Ranges, simulate

STANDALONE = (("sim-a-1b", "FamA", 1, Ranges()), ("sim-b-2b", "FamB", 2, Ranges(alpha_k=(0.5e-3, 2e-3), slope_ratio=1.0)))
SERIES = (
    ("smollm3-3b-stage1-step-40000", Ranges(alpha_k=(2e-3, 5e-3), mu_q_a=(2.0, 5.0))),
    ("smollm3-3b-stage1-step-2400000", Ranges(alpha_k=(3e-3, 6e-3), mu_q_a=(3.0, 7.0))),
    ("smollm3-3b-lc-4k-to-32k-step-4000", Ranges(alpha_k=(0.3e-3, 0.8e-3), mu_q_a=(4.0, 9.0))),
)
LAYERS, HEAD_DIM, VECTORS = 5, 32, 400  # 400: 40 queries per decile, enough for plasticity (32)

POOLED_MODELS = [STANDALONE[0][0], STANDALONE[1][0], SERIES[-1][0]]  # standalone + latest checkpoint

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

"""``qkdb simulate``: write a dataset with planted geometry in the sniffed-qk layout (SPEC §3.2)."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb.cli.app import app
from qkdb.cli.progress import Bars
from qkdb.cli.common import Dtype, note
from qkdb.errors import QkdbError


# The simulator's defaults (ingest/capture/simulate.py: Ranges), written here so that `qkdb --help`
# need not load the simulator (numpy); tests/cli/test_cli.py keeps them equal.
SLOPE_RATIO, NEGATIVE_FRACTION, SINK_LOGIT = 1.8, 0.013, 20.0


class Pairing(str, Enum):
    half = "half"
    interleaved = "interleaved"


def _parse_layers(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return sorted({int(x) for x in text.replace(";", ",").split(",") if x.strip()})
    except ValueError:
        raise QkdbError(f"--nope-layers expects comma-separated layer indices, got {text!r}") from None


@app.command("simulate")
def simulate_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset directory to write (created if missing).")],
    layers: Annotated[int, typer.Option("--layers", min=1, help="Number of layers.")] = 4,
    q_heads: Annotated[int, typer.Option("--q-heads", min=1, help="Query heads per layer.")] = 8,
    kv_heads: Annotated[
        int, typer.Option("--kv-heads", min=1, help="Key/value heads per layer (must divide --q-heads).")
    ] = 2,
    head_dim: Annotated[int, typer.Option("--head-dim", min=2, help="Head dimension d.")] = 64,
    vectors: Annotated[int, typer.Option("--vectors", min=1, help="Vectors per head file (queries and keys).")] = 2000,
    rope_theta: Annotated[
        float, typer.Option("--rope-theta", help="RoPE base θ: plane j turns θ^(-2j/d) radians per token.")
    ] = 10000.0,
    no_rope: Annotated[bool, typer.Option("--no-rope", help="No RoPE: no rotation rings at all (a control).")] = False,
    pairing: Annotated[
        Pairing,
        typer.Option("--pairing", help="RoPE coordinate pairs: half = (j, j+d/2), interleaved = (2j, 2j+1)."),
    ] = Pairing.half,
    sample_heads: Annotated[
        Optional[int],
        typer.Option(
            "--sample-heads",
            min=1,
            help="Write only a seeded sample of N query heads across all layers (plus the key heads they need).",
            show_default=False,
        ),
    ] = None,
    max_position: Annotated[
        Optional[int], typer.Option("--max-position", min=1, show_default=False,
                                    help="Text length: positions are uniform in [0, max-position). Default 4096; "
                                         "64 with --dense or --sinks (Gu et al.'s texts: every position of a "
                                         "4096-token text is 4096 queries per text to ingest).")
    ] = None,
    examples: Annotated[int, typer.Option("--examples", min=1, help="Number of texts (example ids).")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every draw: the same options give identical files.")] = 0,
    model: Annotated[str, typer.Option("--model", help="Model name recorded in qkdb_dataset.json.")] = "simulated",
    family: Annotated[str, typer.Option("--family", help="Family recorded in qkdb_dataset.json.")] = "Simulated",
    dtype: Annotated[Dtype, typer.Option("--dtype", help="Stored vector type.")] = Dtype.float32,
    nope_layers: Annotated[
        Optional[str],
        typer.Option(
            "--nope-layers",
            help="Comma-separated layers without RoPE rings (a control), e.g. 3,7.",
            show_default=False,
        ),
    ] = None,
    slope_ratio: Annotated[
        float, typer.Option("--slope-ratio", help="Median planted |alpha_k| / |alpha_q|.")
    ] = SLOPE_RATIO,
    negative_fraction: Annotated[
        float,
        typer.Option(
            "--negative-fraction", min=0.0, max=1.0, help="Share of query heads with negative mu_q_a (primacy bias)."
        ),
    ] = NEGATIVE_FRACTION,
    dense: Annotated[
        bool,
        typer.Option("--dense", help="Every position of every text (--examples texts of --max-position tokens): "
                     "--vectors becomes their number. Short texts captured whole, as sink studies need."),
    ] = False,
    sinks: Annotated[
        Optional[float],
        typer.Option("--sinks", min=0.0, max=1.0, show_default=False,
                     help="Plant an attention sink at position 0 in this share of the query heads and write each "
                     "query's softmax normaliser (lse); implies --dense (docs/attention.md)."),
    ] = None,
    content_sinks: Annotated[
        float,
        typer.Option("--content-sinks", min=0.0, max=1.0,
                     help="Of the sink heads, the share whose sink is content-driven (half the queries favour "
                     "token 0, half avoid it) rather than a bias every query shares."),
    ] = 0.0,
    sink_logit: Annotated[
        float, typer.Option("--sink-logit", min=0.0, help="The logit advantage a sink gives token 0.")
    ] = SINK_LOGIT,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write into a non-empty directory, replacing the head folders and metadata a previous "
            "simulation left there.",
        ),
    ] = False,
) -> None:
    """Write a simulated dataset with planted drift, Q/K offset, RoPE rings and noise.

    The planted parameters of every query head go to planted.json, the model facts to
    qkdb_dataset.json, so that `qkdb ingest --path DIR` needs no flags.
    """
    if out.exists() and not out.is_dir():
        raise QkdbError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise QkdbError(f"{out}: directory is not empty; pass --force to write into it")
    from qkdb.ingest import HEAD_DIR, PLANTED_FILE, Ranges, SimSpec, Sinks
    from qkdb.ingest import simulate as run_simulation

    theta = None if no_rope else rope_theta
    dense = dense or sinks is not None
    if max_position is None:
        max_position = 64 if dense else 4096
    if dense:
        vectors = max_position * examples
    spec = SimSpec(
        layers=layers, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, vectors=vectors, rope_theta=theta,
        pairing=pairing.value, sample_q_heads=sample_heads, max_position=max_position, n_examples=examples,
        seed=seed, dtype=dtype.value, model=model, family=family, nope_layers=_parse_layers(nope_layers),
        ranges=Ranges(slope_ratio=slope_ratio, negative_fraction=negative_fraction),
        positions="dense" if dense else "stratified",
        sinks=None if sinks is None else Sinks(fraction=sinks, content_fraction=content_sinks, logit=sink_logit),
    )
    started = time.perf_counter()
    with Bars() as bars:
        run_simulation(out, spec, progress=lambda done, total: bars.update(
            "simulate", f"simulate {model}", done, total, f"{done}/{total} files"))
    written = [p.name for p in out.iterdir() if p.is_dir() and HEAD_DIR.match(p.name)]
    n_q = sum(name.endswith("q") for name in written)
    rope = "no RoPE" if theta is None else f"RoPE θ={theta:g} ({pairing.value})"
    note(
        f"simulated model {model}: {n_q} query and {len(written) - n_q} key heads "
        f"({layers} layers × {q_heads}/{kv_heads} heads), d={head_dim}, {vectors} vectors per file, {rope}"
        f"{', every position' if dense else ''}{f', sinks in {sinks:.0%} of the query heads' if sinks is not None else ''}, "
        f"seed {seed} -> {out} in {time.perf_counter() - started:.1f} s (planted parameters: {out / PLANTED_FILE})"
    )

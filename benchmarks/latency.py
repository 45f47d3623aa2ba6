"""Latency of the interactive commands on a realistic warehouse, in units of a bare DuckDB start.

Run from the repository root (the first run builds the warehouses, ~3 minutes on 2 cores; later
runs reuse them and take about two minutes):

    python benchmarks/latency.py                 # 5 repetitions, medians of per-repetition ratios
    python benchmarks/latency.py --reps 9

What it does (docs/benchmarks.md, "Interactive commands", shows the figures of one run):

1. Builds, once, a warehouse of every registry model (23, the SmolLM3-3B series included)
   simulated with each model's own layers and heads, 300 query heads each (d = 32, 300 vectors
   per file), and a second one of the first 6 models, in the user cache dir.
2. Times, each command in its own process from start to exit, alternating with the yardstick
   ``u`` = ``python -c "import duckdb; duckdb.connect().sql('select 1')"``:

   * ``qkdb --help``
   * ``qkdb query "select 1"``
   * ``qkdb findings``
   * ``qkdb chart bias-strength -o fig.png``
   * ``qkdb report -o report.html`` (and its peak memory on 6 and 23 models)
   * the findings' refresh after an ingest batch (``qkdb.api.refresh_findings``: intervals, then the
     findings' rows; ``benchmarks/interval_refresh.py`` measures it at 27,600 and 140,000 heads)

   and prints every command's median wall time and the median of its per-repetition ratio to u
   against the targets of issue 20.

Needs psutil besides qkdb (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ingest import log, measure  # noqa: E402

SHAPE = dict(sample_heads=300, head_dim=32, vectors=300)
SMALL = 6
TARGETS = {"help": 1.5, "query": 2.0, "findings": 4.0, "chart": 6.0, "report": 20.0, "refresh": None}
U = [sys.executable, "-c", "import duckdb; duckdb.connect().sql('select 1')"]


def qkdb(*args: str) -> list[str]:
    return [sys.executable, "-m", "qkdb", *args]


def cache_dir() -> Path:
    from platformdirs import user_cache_path

    tag = "x".join(str(SHAPE[k]) for k in ("sample_heads", "head_dim", "vectors"))
    return user_cache_path("qkdb") / "bench" / f"latency-{tag}"


def build(root: Path) -> tuple[Path, Path]:
    """The two warehouses (all registry models; the first SMALL), built once."""
    from qkdb import api
    from qkdb.ingest import SimSpec, registry, simulate

    big, small = root / "home-all", root / f"home-{SMALL}"
    if (root / ".complete").exists():
        return big, small
    shutil.rmtree(root, ignore_errors=True)
    specs = registry.load_registry()
    log(f"building the latency warehouses in {root} (once; later runs reuse them) ...")
    for i, s in enumerate(specs):
        data = simulate(root / "data" / s.model, SimSpec(
            layers=s.n_layers, q_heads=s.n_q_heads, kv_heads=s.n_kv_heads, sample_q_heads=SHAPE["sample_heads"],
            head_dim=SHAPE["head_dim"], vectors=SHAPE["vectors"], seed=i, model=s.model, family=s.family,
            rope_theta=s.rope_theta or 1e4, nope_layers=s.nope_layers,
        ))
        api.ingest(data, s.model, home=big, points=128)
        if i < SMALL:
            api.ingest(data, s.model, home=small, points=128)
        log(f"  {i + 1}/{len(specs)} {s.model}")
    shutil.rmtree(root / "data")
    (root / ".complete").write_text("")
    return big, small


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    ap.add_argument("--json", type=Path, help="write every measurement to this file")
    args = ap.parse_args(argv)
    big, small = build(cache_dir())
    work = Path(tempfile.mkdtemp(prefix="qkdb-latency-"))
    env = {**os.environ, "QKDB_HOME": str(big)}
    steps = {
        "help": qkdb("--help"),
        "query": qkdb("query", "select 1"),
        "findings": qkdb("findings"),
        "chart": qkdb("chart", "bias-strength", "-o", str(work / "fig.png")),
        "report": qkdb("report", "-o", str(work / "report.html")),
        "refresh": [sys.executable, "-c", "from qkdb import api; api.refresh_findings()"],
    }
    walls: dict[str, list[float]] = {k: [] for k in ["u", *steps]}
    ratios: dict[str, list[float]] = {k: [] for k in steps}
    peaks: dict[str, list[float]] = {"report": [], f"report ({SMALL} models)": []}
    try:
        subprocess.run(qkdb("findings"), env=env, capture_output=True, check=True)  # warm the page cache
        for rep in range(args.reps):
            for name, cmd in steps.items():
                u = measure("u", U, env=env).wall
                run = measure(name, cmd, env=env)
                walls["u"].append(u)
                walls[name].append(run.wall)
                ratios[name].append(run.wall / u)
                if name == "report":
                    peaks["report"].append(run.rss_tree_mib)
            small_env = {**env, "QKDB_HOME": str(small)}
            peaks[f"report ({SMALL} models)"].append(measure("report", steps["report"], env=small_env).rss_tree_mib)
            log(f"  repetition {rep + 1}: " + ", ".join(f"{k} {ratios[k][-1]:.1f}u" for k in steps))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    u = statistics.median(walls["u"])
    print(f"u = {u:.3f} s (median of {len(walls['u'])}); {args.reps} repetitions; 23 models × 300 query heads")
    print(f"{'command':<34} {'wall':>7} {'× u':>6} {'target':>7}")
    labels = {"help": "--help", "query": 'query "select 1"', "findings": "findings",
              "chart": "chart bias-strength -o fig.png", "report": "report -o report.html",
              "refresh": "(findings refreshed)"}
    for name in steps:
        label = labels[name]
        r = statistics.median(ratios[name])
        target = TARGETS[name]
        verdict = "      -" if target is None else f" {target:6.1f}u  {'ok' if r <= target else 'over'}"
        print(f"qkdb {label:<29} {statistics.median(walls[name]):6.2f}s {r:6.1f}{verdict}")
    for name, values in peaks.items():
        print(f"peak memory, {name}: {statistics.median(values):.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "ratios": ratios, "peaks": peaks}, indent=1))
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    log(f"done in {time.perf_counter() - t0:.0f} s")
    sys.exit(code)

"""How long the findings' intervals take to refresh after an ingest batch, against warehouse size.

Run from the repository root (the first run builds the warehouses, a few minutes per 30,000
heads on 2 cores, cached in the user cache dir; later runs reuse them):

    python benchmarks/interval_refresh.py                       # 6,900, 27,600 and 140,000 heads
    python benchmarks/interval_refresh.py --heads 6900 27600 --reps 5
    python benchmarks/interval_refresh.py --profile --heads 27600   # where one refresh spends its time
    python benchmarks/interval_refresh.py --parts --heads 27600 140000  # its parts, and the SQL floor
    python benchmarks/interval_refresh.py --baseline fdab040        # and an earlier qkdb's, in the same run

What it does (docs/benchmarks.md, "The findings' intervals", shows the figures of one run):

1. Builds, once per size, a warehouse of registry-shaped simulated models (each registry model's
   layers, query and key heads; 300 query heads each, d = 16, 64 vectors per file; the metrics
   computed in memory by the ingest's engine and published as an ingest would), as many as make
   about N heads: the registry's 23 models first (the SmolLM3-3B series with them), then
   standalone copies of their shapes with other seeds.
2. Times ``qkdb.api.refresh_findings`` (the intervals, then the findings' rows: what follows every
   ingest batch) in its own process from start to exit, alternating with the yardstick
   u = ``python -c "import duckdb; duckdb.connect().sql('select 1')"``, and prints the median wall
   time and ratio to u per size against issue 31's goals (≤ 2 s at 27,600 heads, ≤ 10 s at 140,000).
3. With ``--parts``, times one refresh's parts in one process, one after the other: the rows of
   ``finding_inputs`` materialised (the SQL every interval and every finding rests on: the
   refresh's floor while they are recomputed over all heads), the sums per resampling unit (SQL),
   the resampling (Python), the findings' measured values (which a refresh computes meanwhile, on
   the other core) and the rest of the findings' rows; and, for scale, the same rows counted on 1
   and on 2 threads.
4. With ``--baseline COMMIT``, times that commit's qkdb (its source from ``git archive``) on a copy of
   each warehouse in the same repetitions, so that both are measured under the same load.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calibration import model_tables  # noqa: E402

SHAPE = dict(sample_heads=300, head_dim=16, vectors=64)
GOALS = {27_600: 2.0, 140_000: 10.0}  # seconds (issue 31)
U = [sys.executable, "-c", "import duckdb; duckdb.connect().sql('select 1')"]
REFRESH = [sys.executable, "-c", "from qkdb import api; notes = api.refresh_findings(); assert not notes, notes"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cache_dir(n_heads: int) -> Path:
    from platformdirs import user_cache_path

    tag = "x".join(str(SHAPE[k]) for k in ("sample_heads", "head_dim", "vectors"))
    return user_cache_path("qkdb") / "bench" / f"refresh-{tag}-{n_heads}"


def publish(home: Path, name: str, tables: dict) -> None:
    """Publish one model's tables into ``home`` as an ingest does (staged, then one atomic step)."""
    from qkdb.warehouse import store
    from qkdb.warehouse.schema import TABLES

    import datetime as dt

    import pyarrow as pa

    m = tables["models"]
    i = m.schema.get_field_index("ingested_at")
    tables = {**tables, "models": m.set_column(i, "ingested_at", pa.array(
        [dt.datetime.now(dt.timezone.utc)], m.schema.field("ingested_at").type))}
    lock = store.acquire_model(home, name)
    try:
        staging = store.Staging(home, name)
        for tname, table in tables.items():
            staging.write(TABLES[tname], table.drop_columns(["model"]))
        staging.close()
        store.publish(staging)
    finally:
        lock.release()


def build(n_heads: int) -> Path:
    """A warehouse of about ``n_heads`` heads (cached), its findings refreshed once."""
    import pyarrow as pa

    from qkdb import api
    from qkdb.ingest import SimSpec, registry
    from qkdb.warehouse.catalog import ensure_catalog

    root = cache_dir(n_heads)
    home = root / "home"
    if (root / ".complete").exists():
        return home
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    ensure_catalog(home)
    specs = registry.load_registry()
    n_models = max(1, round(n_heads / SHAPE["sample_heads"]))
    log(f"building a warehouse of {n_models} models in {home} (once) ...")
    t0 = time.perf_counter()
    for i in range(n_models):
        s = specs[i % len(specs)]
        first = i < len(specs)
        name = s.model if first else f"{s.model}-x{i // len(specs)}"
        spec = SimSpec(
            layers=s.n_layers, q_heads=s.n_q_heads, kv_heads=s.n_kv_heads,
            sample_q_heads=min(SHAPE["sample_heads"], s.n_layers * s.n_q_heads), head_dim=SHAPE["head_dim"],
            vectors=SHAPE["vectors"], seed=i, model=name, family=s.family, rope_theta=s.rope_theta or 1e4,
            nope_layers=s.nope_layers,
        )
        tables = model_tables(spec)
        if first and s.series:  # the registry's series, as the registry describes its checkpoints
            facts = dict(series=s.series, series_order=s.series_order, phase=s.phase, step=s.step)
            m = tables["models"]
            for col, value in facts.items():
                idx = m.schema.get_field_index(col)
                m = m.set_column(idx, col, pa.array([value], m.schema.field(col).type))
            tables["models"] = m
        publish(home, name, tables)
        if (i + 1) % 20 == 0:
            log(f"  {i + 1}/{n_models} models, {time.perf_counter() - t0:.0f} s")
    api.refresh_findings(home)
    (root / ".complete").write_text("")
    return home


def baseline_tree(commit: str, root: Path) -> Path:
    """``commit``'s qkdb laid out for import (``qkdb.ingest`` is ``ingest/``, as pyproject's package-dir maps it)."""
    src, lib = root / "src", root / "lib"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    import shutil

    shutil.copytree(src / "qkdb", lib / "qkdb")
    for sub in ("ingest", "warehouse", "charts", "sql"):
        (lib / "qkdb" / sub).symlink_to(src / sub, target_is_directory=True)
    return lib


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def heads_in(home: Path) -> int:
    from qkdb import api

    con = api.connect(home)
    try:
        return con.execute("select count(*) from heads").fetchall()[0][0]
    finally:
        con.close()


def profile(home: Path) -> None:
    """One refresh in this process, by part: reading the inputs, the resampling, the stored rows."""
    import cProfile
    import pstats

    from qkdb.warehouse.catalog import refresh_intervals

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.runcall(refresh_intervals, home)
    log(f"refresh in process: {time.perf_counter() - t0:.2f} s")
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)


def peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parts(home: Path) -> None:
    """One refresh's parts, timed in this process (its catalog current beforehand)."""
    import datetime as dt
    import tempfile

    import numpy as np
    import pyarrow as pa

    from qkdb.warehouse import head_index, inference, intervals, results
    from qkdb.warehouse.batches import to_batch
    from qkdb.warehouse.schema import FINDING_INTERVALS
    from qkdb.warehouse.catalog import ensure_catalog, open_catalog

    ensure_catalog(home)
    inference.t_quantile(0.025, 10.0)  # (scipy's import: not a part)
    for threads in (1, 2):
        con = open_catalog(home, read_only=True)
        try:
            con.execute(f"set threads = {threads}")
            t0 = time.perf_counter()
            n_rows = con.execute("select count(*) from (select * from finding_inputs)").fetchall()[0][0]
            log(f"  finding_inputs counted on {threads} thread(s): {time.perf_counter() - t0:.2f} s ({n_rows:,} rows)")
        finally:
            con.close()
    con = open_catalog(home, read_only=True)
    try:
        # (as refresh_intervals reads them: every head's metrics and model's row from the indexes)
        head_index.shadow_indexes(con, home)
        con.execute("set threads = 1")
        marks, peaks = [time.perf_counter()], [peak_mib()]
        intervals.snapshot_inputs(con)
        marks.append(time.perf_counter())
        peaks.append(peak_mib())
        found = intervals._read(con, None)
        marks.append(time.perf_counter())
        peaks.append(peak_mib())
        reps = intervals._Replicates()
        with np.errstate(all="ignore"):
            rows = [intervals._interval(f, reps) for f in found if f.stat != "median"]
            marks.append(time.perf_counter())
            peaks.append(peak_mib())
            rows += [intervals._interval(f, reps) for f in found if f.stat == "median"]
        marks.append(time.perf_counter())
        peaks.append(peak_mib())
        columns = {c.name: [r[c.name] for r in rows] for c in FINDING_INTERVALS.columns if c.name in intervals._ROW_COLUMNS}
        columns.update(fingerprint=intervals._fingerprint(con), computed_at=dt.datetime.now(dt.timezone.utc))
        intervals.install(con, pa.Table.from_batches([to_batch(FINDING_INTERVALS, columns)]))
        # (alone here, to be timed: a refresh computes them while the sums and the resampling run)
        with intervals.values_meanwhile(con) as values_ready:
            values_ready()
        marks.append(time.perf_counter())
        peaks.append(peak_mib())
        with tempfile.TemporaryDirectory() as tmp:  # (the stored findings left as they are)
            results.write_findings(con, Path(tmp))
        marks.append(time.perf_counter())
        peaks.append(peak_mib())
    finally:
        con.close()
    n_median = sum(f.stat == "median" for f in found)
    names = ("finding_inputs materialised (1 thread)", "sums per unit (SQL, three queries at once)",
             f"resampling ({len(rows) - n_median} intervals, no median)", f"resampling ({n_median} medians)",
             "the findings' values (finding_values)", "the findings' rows (the rest)")
    print(f"{heads_in(home):,} heads:{'':<32}wall    peak RSS so far")
    for name, a, b, rss in zip(names, marks, marks[1:], peaks[1:]):
        print(f"  {name:<42} {b - a:6.2f} s {rss:8.0f} MiB")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, nargs="+", default=[6_900, 27_600, 140_000], help="warehouse sizes")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per size (default 3)")
    ap.add_argument("--profile", action="store_true", help="profile one refresh per size instead of timing")
    ap.add_argument("--parts", action="store_true", help="time one refresh's parts per size (and its SQL floor)")
    ap.add_argument("--baseline", metavar="COMMIT", help="also time this commit's qkdb, on copies of the warehouses")
    args = ap.parse_args(argv)
    homes = {n: build(n) for n in args.heads}
    if args.profile:
        for home in homes.values():
            profile(home)
        return 0
    if args.parts:
        for home in homes.values():
            parts(home)
        return 0
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="qkdb-refresh-"))
    try:
        lib = baseline_tree(args.baseline, work / "baseline") if args.baseline else None
        rows = []
        for n, home in homes.items():
            runs = {"qkdb": {**os.environ, "QKDB_HOME": str(home)}}
            if lib is not None:
                copy = work / f"home-{n}"
                shutil.copytree(home, copy, symlinks=True)
                runs[args.baseline] = {**os.environ, "QKDB_HOME": str(copy), "PYTHONPATH": str(lib)}
            for env in runs.values():
                timed(REFRESH, env)  # warm the page cache (and build each one's catalog)
            walls = {k: [] for k in runs}
            ratios = {k: [] for k in runs}
            for _ in range(args.reps):
                for k, env in runs.items():
                    u = timed(U, env)
                    w = timed(REFRESH, env)
                    walls[k].append(w)
                    ratios[k].append(w / u)
            for k in runs:
                rows.append((k, heads_in(home), statistics.median(walls[k]), statistics.median(ratios[k]), GOALS.get(n)))
                log(f"  {k}, {n}: {rows[-1][2]:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'code':<10} {'heads':>8} {'refresh':>8} {'× u':>6} {'goal':>6}")
    for code, heads, wall, ratio, goal in rows:
        verdict = "" if goal is None else f"{goal:5.0f}s  {'ok' if wall <= goal else 'over'}"
        print(f"{code:<10} {heads:8d} {wall:7.2f}s {ratio:6.1f} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

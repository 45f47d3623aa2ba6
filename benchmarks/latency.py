"""Latency and memory of the interactive commands against the size of the warehouse, in units of a bare DuckDB start.

Run from the repository root (the first run builds the warehouses: ~3 minutes for the 23 simulated
models, then seconds per size; later runs reuse them):

    python benchmarks/latency.py                          # 7,000, 28,000 and 140,000 heads, 5 repetitions
    python benchmarks/latency.py --heads 28000 --reps 9   # one size
    python benchmarks/latency.py --only report chart      # some commands

What it does (docs/benchmarks.md, "Interactive commands", shows the figures of one run):

1. Builds, once, the 23 registry models (the SmolLM3-3B series included), each simulated with its
   own layers and query/key heads, 300 query heads per model, d = 32, 300 vectors per file
   (``--points 128``): 6,900 heads. A warehouse of about N heads is then those 23 models and as many
   registry-shaped copies as N needs (``<model>-x<k>``: their stored tables copied, as
   ``qkdb pull`` adds a model, every copy a standalone model), its findings' intervals computed
   once: a warehouse of N heads in seconds, whose queries, figures and intervals do the work of N
   heads. All cached in the user cache dir.
2. For each size, times each command in its own process from start to exit, alternating with the
   yardstick u = ``python -c "import duckdb; duckdb.connect().sql('select 1')"`` in the same
   repetition, and reports the median wall time, the median of the per-repetition ratios to u, and
   the peak RSS of the command's largest process (from the kernel's accounting of the finished
   process, ``wait4``):

   * ``qkdb --help``, ``qkdb query "select 1"``, an aggregate ``qkdb query`` over ``head_metrics``,
     ``qkdb views``, ``qkdb models``, ``qkdb info``, ``qkdb findings``;
   * ``qkdb chart bias-vs-separation -o fig.png`` and its *floor*: a Python process converting the
     same figure's spec (written by ``qkdb chart ... -o fig.json`` beforehand) with vl-convert, as
     ``qkdb chart`` does (the issue's target is the chart against this floor);
   * ``qkdb report -o report.html`` (and the PSS of its process tree: it forks a helper);
   * the findings' interval refresh that follows every ingest batch, ``qkdb.api.refresh_findings()``
     (``benchmarks/interval_refresh.py`` times the refresh alone, against an earlier commit);
   * then, after every repetition of those, the commands that change the warehouse, one cycle a
     repetition (issue 48: every command within 1 GB at 140,000 heads): ``qkdb ingest`` of the
     bundled SmolLM2 sample as one more model, the first ``qkdb report`` after it (which brings the
     report's indexes up to date), ``qkdb publish`` of that model (with its card's figures) to the test
     suite's fake Hub on loopback, ``qkdb remove`` of it, and ``qkdb pull`` of it back; it is removed
     again after each cycle, and a report at the end leaves the warehouse as it was found.

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
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from ingest import log, measure  # noqa: E402

SHAPE = dict(sample_heads=300, head_dim=32, vectors=300, points=128)
SIZES = (7_000, 28_000, 140_000)
# Targets in u, from issues 20 and 31 (the report: <= 20u at 28k heads, <= 1.2x that at 140k;
# the chart: <= 1.5x its floor on the 23 models; the refresh: seconds, not u).
TARGETS = {"help": 1.5, "query": 2.0, "aggregate": 3.0, "findings": 4.0, "report": 20.0}
CHART_FLOOR_TARGET = 1.5
REFRESH_TARGET_S = {28_000: 2.0, 140_000: 10.0}
CHART = "bias-vs-separation"
U = [sys.executable, "-c", "import duckdb; duckdb.connect().sql('select 1')"]
AGGREGATE = "select family, count(*) as heads, avg(bias_strength) as bias from head_metrics group by family order by family"


def qkdb(*args: str) -> list[str]:
    return [sys.executable, "-m", "qkdb", *args]


def cache_root() -> Path:
    from platformdirs import user_cache_path

    tag = "x".join(str(SHAPE[k]) for k in ("sample_heads", "head_dim", "vectors", "points"))
    return user_cache_path("qkdb") / "bench" / f"latency-{tag}"


# ---------------------------------------------------------------------------------------------
# The warehouses
# ---------------------------------------------------------------------------------------------


def build_base(root: Path) -> Path:
    """The 23 registry models, simulated and ingested once."""
    from qkdb import api
    from qkdb.ingest import SimSpec, registry, simulate

    home = root / "base"
    if (root / ".base-complete").exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    specs = registry.load_registry()
    log(f"building the {len(specs)} simulated registry models in {home} (once; later runs reuse them) ...")
    for i, s in enumerate(specs):
        data = simulate(root / "data" / s.model, SimSpec(
            layers=s.n_layers, q_heads=s.n_q_heads, kv_heads=s.n_kv_heads, sample_q_heads=SHAPE["sample_heads"],
            head_dim=SHAPE["head_dim"], vectors=SHAPE["vectors"], seed=i, model=s.model, family=s.family,
            rope_theta=s.rope_theta or 1e4, nope_layers=s.nope_layers,
        ))
        api.ingest(data, s.model, home=home, points=SHAPE["points"], refresh_findings=i == len(specs) - 1)
        shutil.rmtree(data)
        log(f"  {i + 1}/{len(specs)} {s.model}")
    shutil.rmtree(root / "data", ignore_errors=True)
    (root / ".base-complete").write_text("")
    return home


def _copy_model(base: Path, home: Path, source: str, name: str) -> int:
    """Publish ``source``'s stored tables from ``base`` into ``home`` as model ``name``.

    A copy under another name is a standalone model (a second checkpoint with the same place in its
    series would make the series figures draw it twice).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from qkdb.warehouse import store
    from qkdb.warehouse.schema import TABLES

    current = base / store.STORE / source / "current"
    lock = store.acquire_model(home, name)
    try:
        staging = store.Staging(home, name)
        for table in TABLES.values():
            src = current / table.name / store.DATA
            if not table.versioned or not src.exists():
                continue
            if table.name == "models" and name != source:
                t = pq.read_table(src)
                for col in ("series", "series_order", "phase", "step"):
                    i = t.schema.get_field_index(col)
                    t = t.set_column(i, t.schema.field(i), pa.nulls(len(t), t.schema.field(i).type))
                staging.write(table, t)
            else:
                staging.adopt(table, src)
        staging.close()
        store.publish(staging)
    finally:
        lock.release()
    runs = base / "ingest_runs" / f"model={source}"
    for f in sorted(runs.glob("*.parquet")):
        store.copy_file(home / "ingest_runs" / f"model={name}", f.name, f)
    return pq.read_metadata(current / "heads" / store.DATA).num_rows


def build_size(root: Path, n_heads: int) -> tuple[Path, int]:
    """A warehouse of about ``n_heads`` heads: the 23 models, then copies of them in registry order."""
    from qkdb import api
    from qkdb.warehouse import store

    home = root / f"heads-{n_heads}"
    done = home / ".bench-heads"
    if done.exists():
        return home, int(done.read_text())
    base = build_base(root)
    shutil.rmtree(home, ignore_errors=True)
    models = sorted(p.name for p in (base / store.STORE).iterdir() if (p / "current").exists())
    from qkdb.ingest import registry

    order = [s.model for s in registry.load_registry() if s.model in models]
    log(f"building a warehouse of about {n_heads:,} heads in {home} ...")
    total, k = 0, 0
    while True:
        for m in order:
            heads = _copy_model(base, home, m, m if k == 0 else f"{m}-x{k}")
            total += heads
            if total + heads / 2 >= n_heads:
                break
        else:
            k += 1
            continue
        break
    t0 = time.perf_counter()
    notes = api.refresh_findings(home)
    if notes:
        raise RuntimeError(f"refreshing the intervals failed: {notes}")
    log(f"  {total:,} heads; intervals {time.perf_counter() - t0:.1f} s")
    done.write_text(str(total))
    return home, total


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


@dataclass
class Timed:
    wall: float
    cpu: float  # user + system seconds of the process and every child it waited for
    maxrss_mib: float  # peak RSS of the largest single process of the tree (the kernel's)


def timed(cmd: list[str], env: dict) -> Timed:
    """Run ``cmd`` to its end; wall time from start to exit, and the kernel's accounting of the finished tree."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err.decode()[-2000:]}")
    return Timed(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def commands(home: Path, work: Path) -> dict[str, list[str]]:
    spec = work / "fig.json"
    floor = (
        "import json, vl_convert as v; from qkdb.charts.render import vl_version; "
        f"v.vegalite_to_png(json.load(open({str(spec)!r})), vl_version=vl_version(), scale=2.0)"
    )
    return {
        "help": qkdb("--help"),
        "query": qkdb("query", "select 1"),
        "aggregate": qkdb("query", AGGREGATE),
        "views": qkdb("views"),
        "models": qkdb("models"),
        "info": qkdb("info"),
        "findings": qkdb("findings"),
        "chart": qkdb("chart", CHART, "-o", str(work / "fig.png")),
        "chart floor": [sys.executable, "-c", floor],
        "report": qkdb("report", "-o", str(work / "report.html")),
        "refresh": [sys.executable, "-c", f"from qkdb import api; assert not api.refresh_findings({str(home)!r})"],
    }


# The commands that change the warehouse: one cycle a repetition, after the others (the model they add
# is removed again after each cycle: the warehouse stays the size it is).
EXTRA = "bench-extra"
CYCLE = ("ingest", "report after ingest", "publish", "remove", "pull")


def cycle_commands(work: Path, sample: Path, rep: int) -> dict[str, list[str]]:
    return {
        "ingest": qkdb("ingest", "--path", str(sample), "-m", EXTRA, "-q"),
        "report after ingest": qkdb("report", "-o", str(work / "report.html")),
        "publish": qkdb("publish", f"bench/extra-{rep}", "--model", EXTRA),
        "remove": qkdb("remove", "-m", EXTRA),
        "pull": qkdb("pull", f"bench/extra-{rep}"),
    }


LABELS = {
    "help": "qkdb --help", "query": 'qkdb query "select 1"', "aggregate": "qkdb query (aggregate)",
    "views": "qkdb views", "models": "qkdb models", "info": "qkdb info", "findings": "qkdb findings",
    "chart": f"qkdb chart {CHART} -o fig.png", "chart floor": "  its floor: vl-convert, same spec",
    "report": "qkdb report -o report.html", "refresh": "interval refresh (api)",
    "ingest": "qkdb ingest (one more model)", "report after ingest": "qkdb report, the first after it",
    "publish": "qkdb publish --model (it)", "remove": "qkdb remove -m (it)", "pull": "qkdb pull (it back)",
}


def _time_one(name: str, cmd: list[str], env: dict, u_env: dict, walls: dict, ratios: dict, rss: dict) -> None:
    """One run of ``cmd`` after one of the yardstick u: its wall time, its ratio to u, its peak RSS."""
    u = timed(U, u_env).wall
    run = timed(cmd, env)
    walls["u"].append(u)
    walls[name].append(run.wall)
    ratios[name].append(run.wall / u)
    rss[name].append(run.maxrss_mib)


def run_size(home: Path, heads: int, reps: int, only: list[str] | None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="qkdb-latency-"))
    env = {**os.environ, "QKDB_HOME": str(home)}
    steps = commands(home, work)
    if only:
        steps = {k: v for k, v in steps.items() if any(k.startswith(o) for o in only)}
    walls: dict[str, list[float]] = {k: [] for k in ["u", *steps]}
    ratios: dict[str, list[float]] = {k: [] for k in steps}
    rss: dict[str, list[float]] = {k: [] for k in steps}
    pss: list[float] = []
    try:
        timed(qkdb("chart", CHART, "-o", str(work / "fig.json")), env)  # the floor's spec (and a warm page cache)
        spec_bytes = (work / "fig.json").stat().st_size
        timed(qkdb("findings"), env)
        for rep in range(reps):
            for name, cmd in steps.items():
                _time_one(name, cmd, env, env, walls, ratios, rss)
            log(f"  {heads:,} heads, repetition {rep + 1}: " + ", ".join(f"{k} {ratios[k][-1]:.1f}u" for k in steps))
        if "report" in steps:  # the report forks a helper: its tree's memory, sampled (slows it: not timed)
            for _ in range(min(3, reps)):
                pss.append(measure("report", steps["report"], env=env).rss_tree_mib)
        report_bytes = (work / "report.html").stat().st_size if (work / "report.html").exists() else None
        if not only or any(c.startswith(o) for c in ("ingest", "publish", "remove", "pull") for o in only):
            _cycles(home, heads, reps, work, env, walls, ratios, rss)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"heads": heads, "walls": walls, "ratios": ratios, "rss": rss, "report_pss": pss,
            "spec_bytes": spec_bytes, "report_bytes": report_bytes}


def _cycles(home: Path, heads: int, reps: int, work: Path, env: dict, walls: dict, ratios: dict, rss: dict) -> None:
    """Ingest, report, publish, remove and pull one more model, ``reps`` times, on a fake Hub on loopback."""
    from helpers.hub_server import FakeHub
    from qkdb.ingest.capture.sniff_sample import sample_path

    for name in CYCLE:
        walls[name], ratios[name], rss[name] = [], [], []
    with FakeHub(page_size=1000) as hub, sample_path() as sample:
        hub_env = {**env, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(work / "hf-cache"), "HF_TOKEN": "hf_write_token",
                   "HF_HUB_DISABLE_XET": "1"}  # (the fake speaks LFS, not Xet)
        try:
            for rep in range(reps):
                for name, cmd in cycle_commands(work, sample, rep).items():
                    _time_one(name, cmd, hub_env, env, walls, ratios, rss)
                timed(qkdb("remove", "-m", EXTRA), env)
                log(f"  {heads:,} heads, cycle {rep + 1}: " + ", ".join(f"{k} {walls[k][-1]:.1f} s, {rss[k][-1]:.0f} MiB"
                                                                       for k in CYCLE))
        finally:
            subprocess.run(qkdb("remove", "-m", EXTRA), env=env, capture_output=True)
            subprocess.run(qkdb("report", "-o", str(work / "report.html")), env=env, capture_output=True)


def summary(results: list[dict]) -> str:
    lines = []
    sizes = [r["heads"] for r in results]
    head = f"{'command':<38}" + "".join(f"{f'{n:,} heads':>26}" for n in sizes)
    lines += [head, f"{'':<38}" + "".join(f"{'wall':>9}{'× u':>7}{'RSS MiB':>10}" for _ in sizes)]
    names = list(results[0]["ratios"])
    for name in names:
        row = f"{LABELS[name]:<38}"
        for r in results:
            w, q, m = (statistics.median(r["walls"][name]), statistics.median(r["ratios"][name]),
                       statistics.median(r["rss"][name]))
            row += f"{w:8.2f}s{q:7.1f}{m:10.0f}"
        lines.append(row)
    lines.append(f"{'u (median)':<38}" + "".join(f"{statistics.median(r['walls']['u']):8.3f}s{'':17}" for r in results))
    if "chart" in names and "chart floor" in names:
        per = [[c / f for c, f in zip(r["walls"]["chart"], r["walls"]["chart floor"])] for r in results]
        lines.append(f"{'chart / its floor (per repetition)':<38}" + "".join(
            f"{statistics.median(p):>9.2f}x{'':16}" for p in per))
        lines.append(f"{'  the spec (bytes)':<38}" + "".join(f"{r['spec_bytes']:>10,}{'':16}" for r in results))
    if "report" in names:
        lines.append(f"{'report: PSS of its tree (MiB)':<38}" + "".join(
            f"{statistics.median(r['report_pss']) if r['report_pss'] else float('nan'):>10.0f}{'':16}" for r in results))
        lines.append(f"{'report: the page (bytes)':<38}" + "".join(
            f"{r['report_bytes'] or 0:>10,}{'':16}" for r in results))
    lines.append("targets: " + ", ".join(f"{LABELS[k].strip()} <= {v:g}u" for k, v in TARGETS.items() if k in names)
                 + f" (report at the largest size <= 1.2x its figure at 28k); chart <= {CHART_FLOOR_TARGET}x its floor "
                 "on the 23 models; refresh " + ", ".join(f"<= {s:g} s at {n:,}" for n, s in REFRESH_TARGET_S.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, nargs="+", default=list(SIZES), help="warehouse sizes (default 7000 28000 140000)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    ap.add_argument("--only", nargs="+", help="only the commands whose names start so (help, query, aggregate, "
                    "views, models, info, findings, chart, report, refresh; ingest, publish, remove, pull: the "
                    "cycle that changes the warehouse)")
    ap.add_argument("--json", type=Path, help="write every measurement to this file")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    root = cache_root()
    if args.build_only:
        for n in args.heads:
            build_size(root, n)
        return 0
    if not all((root / f"heads-{n}" / ".bench-heads").exists() for n in args.heads):
        # Built in a child: Linux starts a forked child's peak RSS (wait4's ru_maxrss) at its
        # parent's, so a parent grown by the ingests and the refresh (3 GB at 140,000 heads) would
        # report that figure for every command timed after it.
        subprocess.run([sys.executable, __file__, "--build-only", "--heads", *map(str, args.heads)], check=True)
    homes = [build_size(root, n) for n in args.heads]
    results = []
    for home, heads in homes:
        results.append(run_size(home, heads, args.reps, args.only))
    load = os.getloadavg()
    print(f"{len(results)} warehouse(s) of 300-head registry-shaped models; {args.reps} repetitions; "
          f"medians; load average now {load[0]:.1f}")
    print(summary(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    log(f"done in {time.perf_counter() - t0:.0f} s")
    sys.exit(code)

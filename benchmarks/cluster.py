"""Cluster benchmark: N models ingested with the local pool against the same through Ray, and 200 checkpoints on paper.

Run from the repository root (about five minutes on 2 cores once the full-size model exists):

    python benchmarks/cluster.py                       # 4 full-size models, 3 repetitions
    python benchmarks/cluster.py --models 6 --reps 5
    python benchmarks/cluster.py --quick               # tiny models, one repetition: a smoke run
    python benchmarks/cluster.py --json results.json   # also keep every measurement

What it does (docs/benchmarks.md, "Ingesting on a Ray cluster", shows the figures of one run):

1. Reuses (or generates once) the full-size simulated model of ``benchmarks/ingest.py`` (300 query
   heads and the key heads they map to, 8,000 vectors each, head_dim 128, 1.77 GiB) and makes N
   models of it: N folders of hard links to its files, each with its own ``qkdb_dataset.json``
   naming model ``bench-cI`` (no extra disk; every model reads the same bytes).
2. Measures, alternating within each repetition, each run a fresh process from start to exit
   ingesting all N models into an empty warehouse with every table:

   * ``pool``: ``qkdb.ingest_many`` on this machine: the models one after the other, each spread
     over the local worker pool (one worker per core) — what ``qkdb ingest --path ... --path ...`` does;
   * ``ray head``: the same through a Ray head already running on this machine (``ray start --head
     --num-cpus CORES`` on loopback): one Ray task per model, one core each, tables back to this
     process through Ray's object store, published here — ``--cluster HOST:PORT``;
   * ``ray local``: ``--cluster local``: the same, with Ray started and stopped by the process.

   Ray's workers run at nice 0 here, like the pool's (``RAY_worker_niceness=0``; Ray's default 15
   would hand the cores to whatever else runs on a shared machine). It prints each run's wall, the ratio of each Ray run to the pool run of its repetition, and,
   from the Ray runs, the per-model figures a cluster run scales with: a task's time on its core,
   the bytes it read and sent back, and the driver's publish of its tables.
3. On paper, from those per-model figures and the Hub benchmark's finding that the ingest's
   computing hides under the download (docs/benchmarks.md: 1.03x the download at 100 MB/s): the
   wall of 200 such checkpoints on 1, 8 and 32 nodes of ``--node-cores`` cores at ``--node-rate``
   MB/s each (and at ``--fast-rate``), with the arithmetic printed.

Needs psutil besides qkdb (the ``bench`` extra) and Ray (the ``cluster`` extra).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from ingest import FULL, QUICK, dataset, default_data_path, describe, log, machine, measure  # noqa: E402

CHECKPOINTS = 200
NODES = (1, 8, 32)
TARGET = 1.15  # a Ray run's wall over the pool's, on one machine

# The measured process: ingest every model, then one JSON line of what the cluster's progress said.
DRIVER = """
import json, sys, qkdb
home, cluster, workers, *paths = sys.argv[1:]
per_model = []
def progress(event, **info):
    if event == "cluster" and "worker_seconds" in info:
        per_model.append({k: info[k] for k in ("model", "worker_seconds", "model_bytes_read",
                                              "model_bytes_received", "publish_seconds")})
out = qkdb.ingest_many([(p, None) for p in paths], cluster=cluster or None, home=home, force=True,
                       workers=int(workers), progress=progress)
failed = [f"{r.model}: {r.error}" for r in out if isinstance(r, qkdb.ModelFailure)]
if failed:
    sys.exit("failed: " + "; ".join(failed))
print(json.dumps({"models": sorted(r.model for r in out), "per_model": per_model}))
"""


def make_models(source: Path, root: Path, n: int) -> list[Path]:
    """``n`` models of ``source``'s files: hard links, each folder with its own model name."""
    meta = json.loads((source / "qkdb_dataset.json").read_text())
    out = []
    for i in range(1, n + 1):
        dest = root / f"bench-c{i}"
        for f in source.rglob("*"):
            if f.is_file() and f.name != "qkdb_dataset.json":
                target = dest / f.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(f, target)
                except OSError:  # another file system: a copy
                    shutil.copy2(f, target)
        (dest / "qkdb_dataset.json").write_text(json.dumps({**meta, "model": dest.name}, indent=2))
        out.append(dest)
    return out


def run_once(mode: str, paths: list[Path], work: Path, cores: int, head) -> object:
    """One measured ingest of every model: ``mode`` is 'pool', 'ray head' or 'ray local'."""
    from helpers.ray_head import LOOPBACK_ENV

    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    env = dict(os.environ)
    cluster = ""
    if mode == "ray head":
        env, cluster = dict(head.env), head.address
    elif mode == "ray local":
        ray_tmp = Path(tempfile.mkdtemp(prefix="qkbr-", dir="/tmp"))  # (short: Ray's socket paths)
        env.update(LOOPBACK_ENV, RAY_TMPDIR=str(ray_tmp))
        cluster = "local"
    try:
        return measure(mode, [sys.executable, "-c", DRIVER, str(home), cluster, str(cores), *map(str, paths)], env=env)
    finally:
        if mode == "ray local":
            shutil.rmtree(ray_tmp, ignore_errors=True)


def on_paper(per_model: dict, size: int, cores: int, rates: list[float], pool_wall: float) -> list[str]:
    """The wall of 200 checkpoints on 1, 8 and 32 nodes, with the arithmetic."""
    C = per_model["worker_seconds"]  # one model on one core (its task, planning to last head)
    P = per_model["publish_seconds"]  # the driver's publish of one model's tables (serial)
    R = per_model["model_bytes_received"]  # one model's tables, to the driver
    M = CHECKPOINTS
    lines = [
        f"on paper: {M} checkpoints of S = {size / 1e9:.2f} GB each, nodes of c = {cores} cores and B MB/s each, "
        "one Ray task (one core) per model",
        f"  measured here, per model: C = {C:.1f} s on one core, tables back R = {R / 1e6:.0f} MB, driver publish P = {P:.2f} s",
        "  a node with m models: network m*S/B, compute ceil(m/c)*C; node wall = the longer of the two (the",
        "  computing hides under the download: the Hub benchmark measured 1.03x the download at 100 MB/s)",
        "  the driver (also B MB/s) receives and publishes one model at a time: M*(R/B + P), overlapped with the nodes",
        "  wall = max(node wall, driver) + R/B + P (the last model's tables and publish)",
    ]
    for B in rates:
        S_B, R_B = size / (B * 1e6), R / (B * 1e6)
        driver = M * (R_B + P)
        lines.append(f"  B = {B:g} MB/s: S/B = {size / 1e6:,.0f} MB / {B:g} MB/s = {S_B:.1f} s; "
                     f"driver {M}*({R_B:.2f} + {P:.2f}) = {driver:.0f} s")
        for n in NODES:
            m = math.ceil(M / n)
            net, cpu = m * S_B, math.ceil(m / cores) * C
            node = max(net, cpu)
            wall = max(node, driver) + R_B + P
            bound = "driver" if driver > node else ("network" if net >= cpu else "cores")
            lines.append(
                f"    {n:>2} node{'s' if n > 1 else ' '}: m = {m:>3}; network {m}*{S_B:.1f} = {net:5.0f} s, "
                f"compute ceil({m}/{cores})*{C:.1f} = {cpu:5.0f} s; wall max({node:.0f}, {driver:.0f}) + {R_B + P:.1f} "
                f"= {wall:5.0f} s = {wall / 60:5.1f} min ({bound}-bound)"
            )
    lines.append(
        f"  for scale, this 2-core machine with the files on disk: {M} * {pool_wall:.1f} s = {M * pool_wall / 60:.0f} min"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, default=4, help="models ingested per run (default 4)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="tiny models, one repetition")
    ap.add_argument("--data", type=Path, help="where the generated model lives (default: the user cache dir)")
    ap.add_argument("--node-cores", type=int, default=8, help="cores per node, on paper (default 8)")
    ap.add_argument("--node-rate", type=float, default=100.0, help="MB/s per node from the Hub, on paper (default 100)")
    ap.add_argument("--fast-rate", type=float, default=1000.0, help="a second bandwidth, on paper (default 1000)")
    ap.add_argument("--no-local", action="store_true", help="skip --cluster local (Ray started by each run)")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    args = ap.parse_args(argv)
    from helpers.ray_head import short_tmp, start_head

    # Ray starts its workers at nice 15 (so that its own daemons stay responsive). On a node of its
    # own that changes nothing; on this shared machine other sessions' processes would take the
    # cores first and the comparison would measure that. The pool's workers run at nice 0: so do these.
    os.environ["RAY_worker_niceness"] = "0"
    shape = QUICK if args.quick else FULL
    reps = 1 if args.quick else args.reps
    cores = os.cpu_count() or 1
    source = dataset(args.data or default_data_path(shape), shape)
    info = describe(source)
    modes = ["pool", "ray head"] + ([] if args.no_local else ["ray local"])
    runs: dict[str, list] = {m: [] for m in modes}
    work = Path(tempfile.mkdtemp(prefix="qkdb-cluster-bench-"))
    try:
        paths = make_models(source, work / "data", args.models)
        with short_tmp() as ray_tmp:
            head = start_head(ray_tmp, cpus=cores, object_store_mib=1024)
            try:
                for rep in range(1, reps + 1):
                    for mode in modes if rep % 2 else modes[::-1]:  # alternate the order
                        run = run_once(mode, paths, work, cores, head)
                        runs[mode].append(run)
                        log(f"  rep {rep}: {mode:<9} {run.wall:6.1f} s  (load {run.load:.1f})")
            finally:
                head.stop()
                if head.processes():
                    log("warning: Ray processes left running")
    finally:
        _end_children()  # (interrupted: the measured run and any Ray it started)
        shutil.rmtree(work, ignore_errors=True)

    mach = machine()
    per_model_runs = [pm for mode in modes if mode != "pool" for r in runs[mode] for pm in r.extra.get("per_model", [])]
    per_model = {k: statistics.median(pm[k] for pm in per_model_runs)
                 for k in ("worker_seconds", "publish_seconds", "model_bytes_read", "model_bytes_received")}
    pool = statistics.median(r.wall for r in runs["pool"])
    out = [
        f"qkdb cluster benchmark: {args.models} models of {info['query_heads']} query + {info['key_heads']} key heads, "
        f"{info['vectors']} vectors of d={info['head_dim']} ({info['bytes'] / 2**30:.2f} GiB each), every table, "
        f"{cores} cores, {reps} repetition(s)",
        f"machine: {mach['cpu']}, {mach['cores']} cores, Python {mach['python']}; ray {_ray_version()}; "
        f"1-min load average when runs started: "
        f"{min(r.load for rs in runs.values() for r in rs):.1f}-{max(r.load for rs in runs.values() for r in rs):.1f}",
        "",
        "run                                   wall s median   min-max        per model   / pool (per repetition)",
    ]
    labels = {"pool": "local pool (ingest_many, no cluster)", "ray head": "Ray head already running (HOST:PORT)",
              "ray local": "--cluster local (Ray started here)"}
    for mode in modes:
        walls = [r.wall for r in runs[mode]]
        ratios = [r.wall / p.wall for r, p in zip(runs[mode], runs["pool"])]
        med = statistics.median(walls)
        rel = "" if mode == "pool" else f"{statistics.median(ratios):.2f}x ({' '.join(f'{x:.2f}' for x in ratios)})"
        out.append(f"{labels[mode]:<38} {med:8.1f}   {min(walls):6.1f}-{max(walls):<6.1f} {med / args.models:8.1f} s   {rel}")
    head_ratio = statistics.median(r.wall / p.wall for r, p in zip(runs["ray head"], runs["pool"]))
    out += [
        "",
        f"overhead of Ray on this machine (running head): {100 * (head_ratio - 1):+.0f}% "
        f"(target <= {100 * (TARGET - 1):.0f}%: {'met' if head_ratio <= TARGET else 'NOT met'})",
        f"per model, Ray runs (median of {len(per_model_runs)}): task on one core {per_model['worker_seconds']:.2f} s, "
        f"read {per_model['model_bytes_read'] / 2**30:.2f} GiB, tables back {per_model['model_bytes_received'] / 1e6:.1f} MB, "
        f"driver publish {per_model['publish_seconds']:.2f} s",
        "",
        *on_paper(per_model, info["bytes"], args.node_cores, [args.node_rate, args.fast_rate], pool / args.models),
    ]
    print("\n".join(out))
    if args.json:
        args.json.write_text(json.dumps({
            "machine": mach, "dataset": info, "models": args.models, "per_model": per_model,
            "runs": {m: [{"wall": r.wall, "load": r.load, **r.extra} for r in rs] for m, rs in runs.items()},
        }, indent=2, default=str))
    return 0


def _end_children() -> None:
    import psutil

    children = psutil.Process().children(recursive=True)
    for p in children:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=10)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def _ray_version() -> str:
    import ray

    return ray.__version__


if __name__ == "__main__":
    sys.exit(main())

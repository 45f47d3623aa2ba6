"""Ingest benchmark: qkdb ingest against the parquet decoding floor and a naive baseline.

Run from the repository root (the default run takes about ten minutes on 2 cores; ``--quick``
about half a minute on a tiny model):

    python benchmarks/ingest.py                      # full-size model, 3 repetitions, medians
    python benchmarks/ingest.py --quick              # smoke run
    python benchmarks/ingest.py --json results.json  # also keep every measurement

What it does (docs/benchmarks.md explains the method and shows the figures of one run):

1. Generates a full-size simulated model once with ``qkdb simulate`` (300 query heads and the
   key heads they map to, 8,000 vectors each, head_dim 128, zstd parquet) into a cache folder
   that later runs reuse.
2. Measures, each step in its own subprocess (wall time from start to exit, so interpreter start
   and imports count everywhere; CPU time and peak RSS of the process tree sampled every 20 ms),
   interleaving the steps of each repetition so that load from other jobs hits all alike:

   * ``floor``: every file read into numpy with pyarrow and nothing else, by as many processes
     as the ingest has workers;
   * ``floor_cov``: the floor plus each file's float64 moments by qkdb's ``moments`` (the products
     SPEC §4 makes every ingest compute, whatever its reader);
   * ``read_head``: the floor's reading done by qkdb's reader (vectors in float64, rows checked);
   * ``ingest core``: ``qkdb ingest --no-complement --points 0`` (tables pca, rotation, heads);
   * ``ingest full``: ``qkdb ingest`` with every table;
   * ``ingest full, no plasticity``: ``qkdb ingest --no-plasticity`` (every table but the plasticity
     and recency tables): the full ingest's cost of plasticity is the ratio of the two;
   * ``baseline``: the published style — pandas read, ``np.stack``, scikit-learn PCA and scipy
     ``pearsonr`` per file — with the same number of processes (one BLAS thread each).

3. Scaling: 1 vs N workers; time and memory against the number of heads (``--heads`` layer
   ranges) and against vectors per head (``--max-vectors``); the full ingest against the
   subsample of its complement and RoPE-plane statistics (``--fit-rows``).
4. Query latency of ``select * from head_metrics`` over 21 models of 300 heads (the ingested
   model published again under 20 other names from its staged tables).

Needs pandas, scipy and psutil besides qkdb (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

FULL = dict(layers=28, q_heads=24, kv_heads=8, head_dim=128, vectors=8000, sample_heads=300)
QUICK = dict(layers=4, q_heads=8, kv_heads=2, head_dim=64, vectors=1500, sample_heads=None)
TARGETS = {"core": 1.25, "full": 1.5, "baseline": 5.0, "rss_mib": 1024.0, "query_ms": 100.0, "plasticity": 1.3}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Steps that run inside the measured subprocesses
# --------------------------------------------------------------------------------------------


def _files(root: str) -> list[str]:
    return sorted(str(p) for p in Path(root).rglob("data.parquet"))


def _pyarrow_arrays(path: str):
    """One file's vectors as an (n, d) numpy array and its positions, read by pyarrow."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path, memory_map=True).read(columns=["position", "vector"])
    vec = table.column("vector").combine_chunks()
    X = vec.flatten().to_numpy(zero_copy_only=True).reshape(len(vec), vec.type.list_size)
    return X, table.column("position").to_numpy()


def _read_pyarrow(path: str) -> int:
    """The floor: one file's vectors and positions in numpy, nothing else."""
    X, t = _pyarrow_arrays(path)
    assert len(t) == X.shape[0]
    return X.shape[0]


def _read_pyarrow_cov(path: str) -> int:
    """The floor plus what SPEC §4 makes every ingest compute from each file: its float64 moments.

    pyarrow's vectors go to qkdb's ``moments`` (widened to float64 block by block, centred, the
    scatter matrix by BLAS ``syrk``, the covariance with position): the products no reader avoids.
    """
    from qkdb.ingest.metrics.moments import moments

    return moments(*_pyarrow_arrays(path)).n


def _read_qkdb(path: str) -> int:
    from qkdb.ingest.sources.layout import read_head

    return len(read_head(path).positions)


def _baseline_head(q_path: str, k_path: str) -> dict:
    """One query head the way the published scripts do it: pandas, np.stack, sklearn, pearsonr."""
    import numpy as np
    import pandas as pd
    from scipy.stats import pearsonr
    from sklearn.decomposition import PCA

    dq, dk = pd.read_parquet(q_path), pd.read_parquet(k_path)
    Q, K = np.stack(dq["vector"].values), np.stack(dk["vector"].values)
    pca = PCA(n_components=10).fit(np.vstack([Q, K]))
    pq_, pk = pca.transform(Q), pca.transform(K)
    r_q = [float(pearsonr(pq_[:, j], dq["position"])[0]) for j in range(pq_.shape[1])]
    r_k = [float(pearsonr(pk[:, j], dk["position"])[0]) for j in range(pk.shape[1])]
    name = Path(q_path).parent.name
    return {"layer": int(name[1:3]), "head": int(name[4:6]), "r_q": r_q, "r_k": r_k}


def _limit_blas(scipy_too: bool = True) -> None:
    """One BLAS thread in this process (for scipy's BLAS library too unless ``scipy_too`` is False)."""
    from threadpoolctl import threadpool_limits

    import numpy  # noqa: F401  (load the BLAS libraries first so that the limit reaches them)

    if scipy_too:  # (importing scipy costs ~0.1 s a process: only where the step uses it)
        import scipy.linalg  # noqa: F401

    threadpool_limits(1)


def _step_main(argv: list[str]) -> None:
    """Entry of the measured subprocesses: ``_floor|_floorcov|_readhead|_baseline ROOT WORKERS [OUT]``."""
    from concurrent.futures import ProcessPoolExecutor

    step, root, workers = argv[0], argv[1], int(argv[2])
    if step in ("_floor", "_floorcov", "_readhead"):
        fn = {"_floor": _read_pyarrow, "_floorcov": _read_pyarrow_cov, "_readhead": _read_qkdb}[step]
        files = _files(root)
        # One BLAS thread per process for the products, as the ingest's workers have.
        init = _limit_blas if step == "_floorcov" else None
        with ProcessPoolExecutor(workers, initializer=init, initargs=(False,) if init else ()) as pool:
            rows = sum(pool.map(fn, files, chunksize=4))
        print(json.dumps({"files": len(files), "rows": rows}))
        return
    if step == "_baseline":
        meta = json.loads((Path(root) / "qkdb_dataset.json").read_text())
        ratio = meta["n_q_heads"] // meta["n_kv_heads"]
        pairs = []
        for q in sorted(Path(root).glob("l*q/data.parquet")):
            layer, head = int(q.parent.name[1:3]), int(q.parent.name[4:6])
            pairs.append((str(q), str(Path(root) / f"l{layer:02d}h{head // ratio:02d}k" / "data.parquet")))
        if workers == 1:  # as the published scripts run: one loop, numpy's default BLAS threads
            out = [_baseline_head(q, k) for q, k in pairs]
        else:
            with ProcessPoolExecutor(workers, initializer=_limit_blas) as pool:
                out = list(pool.map(_baseline_head, *zip(*pairs)))
        Path(argv[3]).write_text(json.dumps(out))
        print(json.dumps({"heads": len(out)}))
        return
    raise SystemExit(f"unknown step {step}")


# --------------------------------------------------------------------------------------------
# Measuring a subprocess: wall time, CPU time and peak RSS of its whole process tree
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    step: str
    wall: float
    cpu: float  # user + system seconds of every process of the tree (sampled)
    rss_tree_mib: float  # peak of the summed PSS (Linux; elsewhere RSS) of the tree
    rss_max_mib: float  # peak RSS of its largest single process
    load: float  # 1-minute load average when the step started
    extra: dict = field(default_factory=dict)


def measure(step: str, cmd: list[str], env: dict | None = None, interval: float = 0.02,
            tree_every: float = 0.1, memory_every: float = 0.25) -> Run:
    """Run ``cmd`` and sample its process tree: CPU times every ``interval`` s (cheap: /proc/PID/stat),
    the tree's membership every ``tree_every`` s and its memory every ``memory_every`` s.

    Memory is sampled sparingly on purpose: reading a process's PSS walks its page tables and
    contends with its own memory mapping. Sampled every 20 ms, it slowed a 2-worker ingest by
    1.5–2 s on this machine (and the floor, with fewer processes, less): the ingest's memory is
    flat, so a 250 ms sample finds the same peak without distorting the times.
    """
    import psutil

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    root = psutil.Process(proc.pid)
    cpu: dict[int, float] = {}
    procs: list = [root]
    peak_tree = peak_one = 0
    use_pss = sys.platform.startswith("linux")
    next_tree = next_memory = 0.0
    while proc.poll() is None:
        now = time.perf_counter()
        if now >= next_tree:
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
            next_tree = now + tree_every
        sample_memory = now >= next_memory
        total = 0
        for p in procs:
            try:
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system  # (children are sampled themselves)
                if sample_memory:
                    rss = p.memory_info().rss
                    # PSS shares each page among the processes mapping it: forked workers and
                    # memory-mapped files are not counted twice in the tree's sum.
                    total += getattr(p.memory_full_info(), "pss", rss) if use_pss else rss
                    peak_one = max(peak_one, rss)
            except psutil.Error:
                pass
        if sample_memory:
            peak_tree = max(peak_tree, total)
            next_memory = now + memory_every
        time.sleep(interval)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{step} failed ({proc.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    run = Run(step, wall, sum(cpu.values()), peak_tree / 2**20, peak_one / 2**20, load)
    try:
        run.extra = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except (ValueError, IndexError):
        run.extra = {}
    return run


# --------------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------------


def qkdb_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "qkdb", *args]


def default_data_path(shape: dict) -> Path:
    """Where the simulated model of ``shape`` is cached between runs (the user cache dir)."""
    from platformdirs import user_cache_path

    tag = "x".join(str(shape[k]) for k in ("layers", "q_heads", "kv_heads", "head_dim", "vectors"))
    return user_cache_path("qkdb") / "bench" / f"sim-{tag}-s{shape['sample_heads'] or 'all'}"


def dataset(root: Path, shape: dict) -> Path:
    """The simulated model, generated once (into a temporary sibling, then renamed)."""
    if (root / "qkdb_dataset.json").exists() and (root / ".complete").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"generating the model into {root} (once; later runs reuse it) ...")
    args = ["simulate", "--out", str(tmp), "--layers", str(shape["layers"]), "--q-heads", str(shape["q_heads"]),
            "--kv-heads", str(shape["kv_heads"]), "--head-dim", str(shape["head_dim"]),
            "--vectors", str(shape["vectors"]), "--model", "bench"]
    if shape["sample_heads"]:
        args += ["--sample-heads", str(shape["sample_heads"])]
    subprocess.run(qkdb_cmd(*args), check=True, stdout=subprocess.DEVNULL)
    (tmp / ".complete").write_text("")
    tmp.rename(root)
    return root


def describe(root: Path) -> dict:
    files = _files(str(root))
    q = sum(1 for f in files if Path(f).parent.name.endswith("q"))
    meta = json.loads((root / "qkdb_dataset.json").read_text())
    return {
        "query_heads": q, "key_heads": len(files) - q, "files": len(files),
        "bytes": sum(os.path.getsize(f) for f in files), "head_dim": meta.get("head_dim"),
        "vectors": meta.get("capture", {}).get("vectors"), "layers": meta.get("n_layers"),
    }


def ingest_cmd(data: Path, home: Path, model: str, workers: int, core: bool, *extra: str) -> list[str]:
    args = ["ingest", "--path", str(data), "--model", model, "--home", str(home), "--force", "-q",
            "--workers", str(workers), *extra]
    if core:
        args += ["--no-complement", "--points", "0"]
    return qkdb_cmd(*args)


def median(runs: list[Run], attr: str = "wall") -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def publish_copies(home: Path, source_home: Path, source: str, n: int, compact: bool) -> None:
    """Publish the ingested model ``source`` ``n`` times into ``home`` (names m00, m01, ...).

    ``compact=False`` copies its parquet files byte for byte (the layout ``qkdb ingest`` wrote);
    ``compact=True`` rewrites each table as one row group, to show what the file layout costs.
    """
    import pyarrow.parquet as pq

    from qkdb.warehouse import store
    from qkdb.warehouse.catalog import ensure_catalog
    from qkdb.warehouse.schema import TABLES

    home.mkdir(parents=True, exist_ok=True)
    ensure_catalog(home)
    current = source_home / store.STORE / source / "current"
    tables = [t for t in TABLES.values() if t.versioned and (current / t.name / store.DATA).exists()]
    for i in range(n):
        name = f"m{i:02d}"
        lock = store.acquire_model(home, name)
        try:
            staging = store.Staging(home, name)
            if compact:
                for table in tables:
                    staging.write(table, pq.read_table(current / table.name / store.DATA))
                staging.close()
            else:
                for table in tables:  # a staged version is a folder of table files: fill it directly
                    (staging.dir / table.name).mkdir()
                    shutil.copyfile(current / table.name / store.DATA, staging.dir / table.name / store.DATA)
            store.publish(staging)
        finally:
            lock.release()


def query_latency(home: Path, reps: int, budget: float = 15.0) -> dict:
    """Latency of head_metrics queries in one connection: the first run, then the median of up to
    ``reps`` more (at least 3; fewer than ``reps`` once a query has taken ``budget`` seconds)."""
    from qkdb import api

    t0 = time.perf_counter()
    con = api.connect(home)
    out: dict = {"connect_ms": (time.perf_counter() - t0) * 1000}
    con.execute("set enable_progress_bar = false")
    queries = {
        "select * from head_metrics": "select * from head_metrics",
        "avg by model": "select model, avg(bias_strength), avg(r_q) from head_metrics group by model",
    }
    for label, sql in queries.items():
        times: list[float] = []
        while len(times) < reps + 1 and (len(times) < 4 or sum(times) < budget * 1000):
            t0 = time.perf_counter()
            table = con.sql(sql).to_arrow_table()
            times.append((time.perf_counter() - t0) * 1000)
        out[label] = {"first_ms": times[0], "median_ms": statistics.median(times[1:]), "rows": table.num_rows,
                      "runs": len(times) - 1}
    out["models"] = con.sql("select count(distinct model) from head_metrics").fetchall()[0][0]
    con.close()
    return out


def baseline_agreement(home: Path, model: str, baseline_json: Path) -> float:
    """Largest |difference| of |r_q|, |r_k| between the baseline and qkdb's pca table (PCs 0-9)."""
    import duckdb

    rows = json.loads(baseline_json.read_text())
    con = duckdb.connect()
    # Components whose eigenvalue is within 1% of a neighbour's are not determined by the data
    # (RoPE rings come in equal-variance pairs): any rotation within their plane is as valid.
    ours = {
        (l, h, pc): (rq, rk)
        for l, h, pc, rq, rk, gap in con.sql(
            f"""select layer, head, pc, r_q, r_k,
                   least(coalesce(lag(eigenvalue) over w - eigenvalue, 'inf'::double),
                         coalesce(eigenvalue - lead(eigenvalue) over w, 'inf'::double)) / eigenvalue
               from read_parquet('{home}/pca/model={model}/*.parquet')
               window w as (partition by layer, head order by pc)"""
        ).fetchall()
        if gap > 0.01
    }
    worst = 0.0
    for r in rows:
        for pc, (bq, bk) in enumerate(zip(r["r_q"], r["r_k"])):
            if (r["layer"], r["head"], pc) in ours:
                rq, rk = ours[(r["layer"], r["head"], pc)]
                worst = max(worst, abs(abs(bq) - abs(rq)), abs(abs(bk) - abs(rk)))
    return worst


def fmt_runs(label: str, runs: list[Run], heads: int | None = None) -> str:
    wall = [r.wall for r in runs]
    hps = f"{heads / median(runs):8.1f}" if heads else f"{'':>8}"
    spread = f"{min(wall):6.2f}–{max(wall):<6.2f}" if len(wall) > 1 else f"{'':>13}"
    return (f"{label:<34}{median(runs):8.2f} {spread} {median(runs, 'cpu'):7.2f} "
            f"{median(runs, 'rss_tree_mib'):9.0f} {median(runs, 'rss_max_mib'):8.0f} {hps}")


HEADER = (f"{'step':<34}{'wall s':>8} {'min–max':^13} {'CPU s':>7} {'PSS tree':>9} {'RSS max':>8} {'heads/s':>8}\n"
          f"{'':<34}{'median':>8} {'':13} {'':>7} {'MiB':>9} {'MiB':>8}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("_"):
        _step_main(argv)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="folder of the generated model (default: in the user cache dir)")
    ap.add_argument("--reps", type=int, help="repetitions of every measured run (default 3; 1 with --quick)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="ingest workers and floor/baseline processes (default: cores)")
    ap.add_argument("--quick", action="store_true", help="tiny model, one repetition: a smoke run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the pandas/sklearn baseline")
    ap.add_argument("--no-scaling", action="store_true", help="skip the scaling runs")
    ap.add_argument("--models", type=int, default=21, help="models in the query-latency warehouse (default 21)")
    ap.add_argument("--json", type=Path, help="write every measurement to this file")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark's warehouses")
    args = ap.parse_args(argv)
    shape = QUICK if args.quick else FULL
    reps = args.reps or (1 if args.quick else 3)
    n_models = min(args.models, 3) if args.quick else args.models
    W = max(1, args.workers)
    if args.data is None:
        args.data = default_data_path(shape)
    args.data.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    data = dataset(args.data, shape)
    info = describe(data)
    heads, layers, n_vec = info["query_heads"], info["layers"], info["vectors"]
    work = Path(tempfile.mkdtemp(prefix="qkdb-bench-"))
    me = [sys.executable, str(Path(__file__).resolve())]
    home, scale = work / "home", work / "scale"
    log(f"{heads} query + {info['key_heads']} key heads, {n_vec} vectors of d={info['head_dim']} "
        f"({info['bytes'] / 2**30:.2f} GiB); {W} workers; {reps} repetition(s); work dir {work}")

    # Every run of one repetition, in order; the repetitions interleave them so that load from
    # other jobs on the machine falls on all of them alike.
    jobs: list[tuple[str, str, object, list[str]]] = [  # (group, label, parameter, command)
        ("main", "floor", None, me + ["_floor", str(data), str(W)]),
        ("main", "floor_cov", None, me + ["_floorcov", str(data), str(W)]),
        ("main", "read_head", None, me + ["_readhead", str(data), str(W)]),
        ("main", "core", None, ingest_cmd(data, home, "bench-core", W, True)),
        ("main", "full", None, ingest_cmd(data, home, "bench-full", W, False)),
        ("main", "full_np", None, ingest_cmd(data, home, "bench-full-np", W, False, "--no-plasticity")),
    ]
    if not args.no_baseline:
        jobs.append(("main", "baseline", None, me + ["_baseline", str(data), "1", str(work / "baseline.json")]))
        if W > 1:
            jobs.append(("main", "baseline_par", None, me + ["_baseline", str(data), str(W), str(work / "baseline-par.json")]))
    if not args.no_scaling:
        if W != 1:
            jobs.append(("workers", "workers=1", 1, ingest_cmd(data, scale, "bench-scale", 1, True)))
        cuts = sorted({max(1, layers // 4), max(1, layers // 2)}) if not args.quick else [max(1, layers // 2)]
        for upto in cuts:
            sel = f"0-{upto - 1}"
            jobs.append(("heads", f"--heads {sel}", upto, ingest_cmd(data, scale, f"bench-h{upto}", W, True, "--heads", sel)))
        for n in ([n_vec // 8, n_vec // 4, n_vec // 2] if not args.quick else [n_vec // 2]):
            jobs.append(("vectors", f"--max-vectors {n}", n,
                         ingest_cmd(data, scale, "bench-scale", W, True, "--max-vectors", str(n))))
        # The full ingest's extra stage works on a subsample of `--fit-rows` vectors per head.
        for n in ([512, 1024] if not args.quick else [512]):
            jobs.append(("fit", f"--fit-rows {n}", n,
                         ingest_cmd(data, scale, "bench-fit", W, False, "--fit-rows", str(n), "--no-plasticity")))
    runs: dict[str, list[Run]] = {label: [] for _, label, _, _ in jobs}
    try:
        for rep in range(reps):
            log(f"repetition {rep + 1}/{reps}")
            for group, label, _, cmd in jobs:
                r = measure(label, cmd)
                runs[label].append(r)
                log(f"  {label:<22} {r.wall:7.2f} s  CPU {r.cpu:6.2f} s  PSS {r.rss_tree_mib:5.0f} MiB  load {r.load:.1f}")
        results: dict = {
            "dataset": {**info, "path": str(data)}, "workers": W, "reps": reps, "machine": machine(),
            "runs": {k: [asdict(r) for r in v] for k, v in runs.items()},
        }
        if runs.get("baseline"):
            results["baseline_max_abs_r_difference"] = baseline_agreement(home, "bench-core", work / "baseline.json")
        results["heads_in"] = {label: count_heads(scale, f"bench-h{upto}") for group, label, upto, _ in jobs if group == "heads"}
        log(f"query latency: {n_models} models published from bench-full's stored tables")
        results["query"] = {}
        for compact in (False, True):
            qhome = work / ("query-compact" if compact else "query")
            publish_copies(qhome, home, "bench-full", n_models, compact)
            results["query"]["one row group per table" if compact else "as ingested"] = query_latency(qhome, reps=20)
        results["total_seconds"] = time.perf_counter() - started
        print(report(results, runs, jobs, heads, W))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str))
            log(f"wrote {args.json}")
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def count_heads(home: Path, model: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(home / "heads" / f"model={model}" / "data.parquet").metadata.num_rows


def machine() -> dict:
    import numpy
    import pyarrow

    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(l.split(":", 1)[1].strip() for l in fh if l.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": numpy.__version__, "pyarrow": pyarrow.__version__, "platform": platform.platform()}


def per_repetition(runs: dict[str, list[Run]], step: str) -> list[float]:
    """Wall time of ``step`` over the floor's, repetition by repetition."""
    return [r.wall / f.wall for f, r in zip(runs["floor"], runs[step])]


def report(results: dict, runs: dict[str, list[Run]], jobs: list, heads: int, W: int) -> str:
    d, m = results["dataset"], results["machine"]
    loads = [r.load for v in runs.values() for r in v]
    out = [
        f"qkdb ingest benchmark: {d['query_heads']} query + {d['key_heads']} key heads, {d['vectors']} vectors "
        f"of d={d['head_dim']} ({d['bytes'] / 2**30:.2f} GiB parquet), {W} workers, medians of {results['reps']}",
        f"machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, numpy {m['numpy']}, pyarrow {m['pyarrow']}; "
        f"1-min load average when runs started: {min(loads):.1f}-{max(loads):.1f}",
        "",
        HEADER,
    ]
    labels = {"floor": "floor: pyarrow read, no compute", "floor_cov": "floor + float64 moments",
              "read_head": "qkdb read_head only",
              "core": "qkdb ingest, core tables", "full": "qkdb ingest, all tables",
              "full_np": "qkdb ingest, all but plasticity",
              "baseline": "baseline (published style, 1 proc)", "baseline_par": f"baseline, {W} processes"}
    for k, label in labels.items():
        if runs.get(k):
            out.append(fmt_runs(label, runs[k], None if k in ("floor", "floor_cov", "read_head") else heads))
    floor, cfloor = median(runs["floor"]), median(runs["floor"], "cpu")
    core, full = median(runs["core"]), median(runs["full"])
    out += [
        "",
        f"ingest/floor, wall: core {core / floor:.2f}x (target <= {TARGETS['core']}), "
        f"all tables {full / floor:.2f}x (target <= {TARGETS['full']})",
        f"ingest/floor, CPU:  core {median(runs['core'], 'cpu') / cfloor:.2f}x, all tables "
        f"{median(runs['full'], 'cpu') / cfloor:.2f}x; qkdb read_head/floor {median(runs['read_head']) / floor:.2f}x wall, "
        f"{median(runs['read_head'], 'cpu') / cfloor:.2f}x CPU",
        # On a shared machine the load drifts between repetitions; within one, the floor and the
        # ingests run back to back, so their ratio is steadier than the ratio of the medians.
        "ingest/floor, wall, per repetition: " + "; ".join(
            f"{name} " + " ".join(f"{x:.2f}" for x in ratios) + f" (median {statistics.median(ratios):.2f})"
            for name, ratios in (("core", per_repetition(runs, "core")), ("all tables", per_repetition(runs, "full")))
        ),
        # What no reader avoids: SPEC §4's float64 moments of every file, on top of decoding it.
        f"floor + float64 moments/floor: {median(runs['floor_cov']) / floor:.2f}x wall, "
        f"{median(runs['floor_cov'], 'cpu') / cfloor:.2f}x CPU (per repetition "
        + " ".join(f"{x:.2f}" for x in per_repetition(runs, "floor_cov")) + "); core ingest/(floor + moments) "
        f"{core / median(runs['floor_cov']):.2f}x",
    ]
    if runs.get("baseline"):
        b = median(runs["baseline"])
        out.append(f"baseline/ingest, wall: {b / core:.1f}x core, {b / full:.1f}x all tables (target >= {TARGETS['baseline']:g})"
                   + (f"; baseline run by {W} processes: {median(runs['baseline_par']) / core:.1f}x, "
                      f"{median(runs['baseline_par']) / full:.1f}x" if runs.get("baseline_par") else ""))
        out.append(f"the baseline's |r_q|, |r_k| of PCs 0-9 agree with qkdb's to "
                   f"{results.get('baseline_max_abs_r_difference', float('nan')):.0e} (its PCA runs in float32)")
    if runs.get("full_np"):
        np_ = median(runs["full_np"])
        out.append(f"plasticity and recency (all tables / all but plasticity), wall: {full / np_:.2f}x "
                   f"(target <= {TARGETS['plasticity']:g}); CPU {median(runs['full'], 'cpu') / median(runs['full_np'], 'cpu'):.2f}x")
    peak = max(median(runs["core"], "rss_tree_mib"), median(runs["full"], "rss_tree_mib"))
    out.append(f"peak memory of an ingest (PSS summed over its processes): {peak:.0f} MiB (target <= {TARGETS['rss_mib']:.0f})")
    if any(g != "main" for g, *_ in jobs):
        out += ["", "scaling (core tables; medians):",
                f"{'run':<34}{'heads':>6}{'wall s':>8}{'CPU s':>8}{'heads/s':>9}{'PSS MiB':>9}"]

        def row(label: str, n: int, rs: list[Run]) -> str:
            w = median(rs)
            return (f"{label:<34}{n:>6}{w:8.2f}{median(rs, 'cpu'):8.2f}{n / w:9.1f}"
                    f"{median(rs, 'rss_tree_mib'):9.0f}")

        if "workers=1" in runs:
            out.append(row("workers=1", heads, runs["workers=1"]))
            out.append(row(f"workers={W}", heads, runs["core"]))
            out.append(f"{'':<34}speed-up of {W} workers over 1: {median(runs['workers=1']) / core:.2f}x")
        for group, label, _, _ in jobs:
            if group == "heads":
                out.append(row(label, results["heads_in"][label], runs[label]))
        out.append(row("all heads", heads, runs["core"]))
        for group, label, _, _ in jobs:
            if group == "vectors":
                out.append(row(label, heads, runs[label]))
        out.append(row(f"all {d['vectors']} vectors", heads, runs["core"]))
        fit = [(label, runs[label]) for group, label, _, _ in jobs if group == "fit"]
        if fit:
            from qkdb.ingest.metrics.complement import MAX_FIT

            out += ["", "all tables but plasticity by --fit-rows (vectors per head for the complement and RoPE-plane "
                    "statistics; medians):",
                    f"{'run':<34}{'wall s':>8}{'CPU s':>8}{'/floor':>8}"]
            for label, rs in [*fit, (f"--fit-rows {MAX_FIT} (default)", runs["full_np"])]:
                out.append(f"{label:<34}{median(rs):8.2f}{median(rs, 'cpu'):8.2f}{median(rs) / floor:7.2f}x")
    for layout, q in results["query"].items():
        out += ["", f"query latency, {q['models']} models x {heads} heads, files {layout} "
                    f"(connect {q['connect_ms']:.0f} ms; median of up to 20 runs after a first one):"]
        for label, v in q.items():
            if isinstance(v, dict):
                out.append(f"  {label:<32}{v['median_ms']:8.1f} ms (first {v['first_ms']:.1f} ms), {v['rows']} rows")
    out.append(f"\ntarget for select * from head_metrics: < {TARGETS['query_ms']:.0f} ms; "
               f"total benchmark time {results['total_seconds'] / 60:.1f} min")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

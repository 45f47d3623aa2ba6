"""Hub benchmark: a full model ingested from a Hub served at a fixed bandwidth, against downloading it alone.

Run from the repository root (about five minutes at 100 MB/s on 2 cores, once the model exists):

    python benchmarks/hub.py                     # full-size model at 100 MB/s, 3 repetitions
    python benchmarks/hub.py --rate 50 --reps 1  # another bandwidth (MB/s)
    python benchmarks/hub.py --quick             # tiny model, one repetition: a smoke run

What it does (docs/benchmarks.md, "Ingesting from the Hub", shows the figures of one run):

1. Reuses (or generates once) the full-size simulated model of ``benchmarks/ingest.py``: 300 query
   heads and the key heads they map to, 8,000 vectors each, head_dim 128.
2. Serves it from the test suite's fake Hugging Face Hub (``tests/hub_server.py``, real HTTP on
   127.0.0.1, the endpoints ``huggingface_hub`` 2.x uses) with every file body paced through one
   shared link of ``--rate`` MB/s: what one node with that bandwidth sees.
3. Measures, alternating, each in its own process with an empty Hugging Face cache:

   * ``download``: ``huggingface_hub.snapshot_download`` of the model's branch — the files alone,
     which is the least any reader of them must wait;
   * ``ingest``: ``qkdb ingest --model ... --repo ... --revision ...`` with every table.

   and prints both walls, the link's own time (bytes / rate) and ``ingest / download`` per
   repetition. Below 1, the ingest's computing is hidden under the download and its own file
   requests start sooner than ``snapshot_download``'s.

Needs psutil besides qkdb (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from helpers.hub_server import FakeHub  # noqa: E402  (the test suite's fake Hub)
from ingest import FULL, QUICK, dataset, default_data_path, describe, log, measure  # noqa: E402

REPO, BRANCH, MODEL = "bench/sniffed-qk", "bench-full", "bench-hub"


def _download_cmd(endpoint: str, cache: Path) -> list[str]:
    code = (
        "from huggingface_hub import snapshot_download\n"
        f"snapshot_download({REPO!r}, repo_type='dataset', revision={BRANCH!r}, endpoint={endpoint!r}, "
        f"cache_dir={str(cache)!r})\n"
    )
    return [sys.executable, "-c", code]


def _ingest_cmd(home: Path, meta: dict, workers: int) -> list[str]:
    gqa = meta["n_q_heads"] // meta["n_kv_heads"]
    return [sys.executable, "-m", "qkdb", "ingest", "--model", MODEL, "--repo", REPO, "--revision", BRANCH,
            "--home", str(home), "--family", "Bench", "--gqa-ratio", str(gqa), "--n-layers", str(meta["n_layers"]),
            "--n-q-heads", str(meta["n_q_heads"]), "--n-kv-heads", str(meta["n_kv_heads"]),
            "--workers", str(workers), "-q"]


def main(argv: list[str] | None = None) -> int:
    import json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=100.0, help="bandwidth of the served link, MB/s (default 100)")
    ap.add_argument("--reps", type=int, help="repetitions (default 3; 1 with --quick)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="ingest workers (default: the cores)")
    ap.add_argument("--data", type=Path, help="folder of the generated model (default: benchmarks/ingest.py's cache)")
    ap.add_argument("--quick", action="store_true", help="tiny model, one repetition: a smoke run")
    args = ap.parse_args(argv)
    shape = QUICK if args.quick else FULL
    reps = args.reps or (1 if args.quick else 3)
    data = dataset(args.data or default_data_path(shape), shape)
    info = describe(data)
    meta = json.loads((data / "qkdb_dataset.json").read_text())
    rate = args.rate * 1e6
    log(f"model: {info['query_heads']} query + {info['key_heads']} key heads, {info['bytes'] / 2**30:.2f} GiB; "
        f"link {args.rate:g} MB/s (the bytes alone: {info['bytes'] / rate:.1f} s)")
    hub = FakeHub(rate=rate, page_size=1000)  # (the tests page by 7 to exercise paging)
    hub.add_repo(REPO).push_dir(BRANCH, data)
    work = Path(tempfile.mkdtemp(prefix="qkdb-hub-bench-"))
    env = {**os.environ, "HF_ENDPOINT": "", "HF_HUB_DISABLE_TELEMETRY": "1"}
    walls: dict[str, list[float]] = {"download": [], "ingest": []}
    try:
        with hub:
            env["HF_ENDPOINT"] = hub.url
            for rep in range(reps):
                for step in ("download", "ingest"):
                    cache = work / f"cache-{step}-{rep}"
                    run_env = {**env, "HF_HOME": str(work / f"hf-{step}-{rep}"), "HF_HUB_CACHE": str(cache)}
                    cmd = (_download_cmd(hub.url, cache) if step == "download"
                           else _ingest_cmd(work / f"home-{rep}", meta, args.workers))
                    run = measure(step, cmd, env=run_env)
                    walls[step].append(run.wall)
                    log(f"  rep {rep + 1}: {step:8s} {run.wall:6.1f} s  (peak {run.rss_tree_mib:.0f} MiB)")
                    shutil.rmtree(cache, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [i / d for i, d in zip(walls["ingest"], walls["download"])]
    print(f"link {args.rate:g} MB/s, {info['bytes'] / 2**30:.2f} GiB ({info['bytes'] / rate:.1f} s of bytes), "
          f"{args.workers} workers, {reps} repetition(s):")
    print(f"  download alone  {statistics.median(walls['download']):6.1f} s (median)")
    print(f"  qkdb ingest     {statistics.median(walls['ingest']):6.1f} s (median)")
    print(f"  ingest / download per repetition: {' '.join(f'{r:.2f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    log(f"done in {time.perf_counter() - t0:.0f} s")
    sys.exit(code)

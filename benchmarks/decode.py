"""Ways to decode a sniffed-qk file's vectors into numpy, compared file by file.

Issue 8 asks, if decoding is the wall, for a faster decode path (the vector column's flat values
read directly, DuckDB's parquet reader, column projection), measured, keeping the fastest that
stays correct. This script measures each on the benchmark model of ``benchmarks/ingest.py`` (the
same cached files), in one process with one thread, and checks that every path returns the same
numbers as pyarrow's reader:

    python benchmarks/decode.py                 # 64 files, 3 repetitions, medians
    python benchmarks/decode.py --files 496     # every file
    python benchmarks/decode.py --quick         # smoke run on a tiny model

Rows, per file (``FixedSizeList<float32>[128]`` × 8,000 rows, zstd):

* pyarrow ``ParquetFile.read`` of position and vector, flattened to an (n, d) array (the floor's
  step in ``benchmarks/ingest.py``), with its own threads and with one;
* the same, vector column only (column projection);
* DuckDB's ``read_parquet`` into Arrow, flattened (one DuckDB thread);
* qkdb's page reader (``ingest/sources/vector_pages.py``): pages decompressed and their values written
  straight into float64 (what ``read_head`` uses), and the same walk without the conversion — the
  cost of decompression alone, a lower bound for any reader.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np



def _ingest_benchmark():
    """The sibling script ``benchmarks/ingest.py``, for its model and cache folder."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("qkdb_bench_ingest", Path(__file__).with_name("ingest.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _pyarrow(path: str, threads: bool = True, columns=("position", "vector")) -> np.ndarray:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path, memory_map=True).read(columns=list(columns), use_threads=threads)
    vec = table.column("vector").combine_chunks()
    return vec.flatten().to_numpy(zero_copy_only=True).reshape(len(vec), vec.type.list_size)


def _duckdb(con, path: str) -> np.ndarray:
    table = con.sql("select position, vector from read_parquet($path)", params={"path": path}).to_arrow_table()
    vec = table.column("vector").combine_chunks()
    d = vec.type.list_size if hasattr(vec.type, "list_size") else len(vec[0])
    return vec.flatten().to_numpy(zero_copy_only=False).reshape(len(vec), d)


def _qkdb(path: str) -> np.ndarray:
    import pyarrow.parquet as pq

    from qkdb.ingest.sources.vector_pages import read_fixed_size_vectors

    return read_fixed_size_vectors(pq.ParquetFile(path, memory_map=True), path, "vector")


def _qkdb_decompress_only(path: str) -> None:
    from qkdb.ingest.sources import vector_pages

    convert = vector_pages._decode_values
    vector_pages._decode_values = lambda *args: None  # walk and decompress every page, write nothing
    try:
        _qkdb(path)
    finally:
        vector_pages._decode_values = convert


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="the benchmark model (default: benchmarks/ingest.py's cache folder)")
    ap.add_argument("--files", type=int, default=64, help="files measured (default 64)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3; medians)")
    ap.add_argument("--quick", action="store_true", help="benchmarks/ingest.py's tiny model, 8 files, once: a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.reps = min(args.files, 8), 1

    from threadpoolctl import threadpool_limits

    import duckdb

    from qkdb.ingest.sources.layout import read_head

    threadpool_limits(1)
    bench = _ingest_benchmark()
    shape = bench.QUICK if args.quick else bench.FULL
    data = bench.dataset(args.data or bench.default_data_path(shape), shape)
    files = sorted(str(p) for p in data.rglob("data.parquet"))[: args.files]
    con = duckdb.connect()
    con.execute("set threads = 1")

    paths = {
        "pyarrow read (position, vector), threads": lambda f: _pyarrow(f, True),
        "pyarrow read (position, vector), 1 thread": lambda f: _pyarrow(f, False),
        "pyarrow read (vector only), 1 thread": lambda f: _pyarrow(f, False, ("vector",)),
        "duckdb read_parquet -> arrow, 1 thread": lambda f: _duckdb(con, f),
        "qkdb page reader -> float64 (read_head's)": _qkdb,
        "qkdb read_head (+ positions, row checks)": lambda f: read_head(f).vectors,
        "qkdb page walk, decompression only": _qkdb_decompress_only,
    }
    # Correctness first: every path that returns values returns pyarrow's, exactly.
    for f in files[:4]:
        ref = _pyarrow(f, False).astype(np.float64)
        for name, fn in paths.items():
            got = fn(f)
            if got is not None and not np.array_equal(np.asarray(got, dtype=np.float64), ref):
                raise SystemExit(f"{name}: values differ from pyarrow's on {f}")

    results = {name: [] for name in paths}
    for _ in range(args.reps):
        for name, fn in paths.items():  # interleaved: machine noise falls on every path alike
            for f in files[:2]:
                fn(f)  # warm the page cache and the code path
            w, c = time.perf_counter(), time.process_time()
            for f in files:
                fn(f)
            results[name].append(((time.perf_counter() - w) / len(files), (time.process_time() - c) / len(files)))

    print(f"decode paths, {len(files)} files of {data.name}, one process, medians of {args.reps}")
    print(f"{'path':46s} {'wall ms':>8s} {'CPU ms':>8s} {'vs pyarrow':>11s}")
    base = statistics.median(c for _, c in results["pyarrow read (position, vector), 1 thread"])
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"{name:46s} {1e3 * wall:8.2f} {1e3 * cpu:8.2f} {cpu / base:10.2f}x")
    print("(vs pyarrow: CPU per file relative to pyarrow's reader on one thread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

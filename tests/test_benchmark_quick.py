"""The ingest benchmark's smoke mode runs end to end and prints every section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("psutil")  # the benchmark's `bench` extra (psutil, pandas)
pytest.importorskip("pandas")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ingest.py"


@pytest.mark.slow
def test_quick_benchmark_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--no-scaling", "--data", str(tmp_path / "data"), "--models", "2",
         "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for text in ("floor: pyarrow read", "qkdb ingest, core tables", "baseline/ingest", "ingest/floor, wall", "per repetition: core",
                 "floor + float64 moments",
                 "select * from head_metrics", "one row group per table"):
        assert text in out.stdout, text
    assert (tmp_path / "r.json").stat().st_size > 0
    # The floor + moments step took the moments of every vector the floor read.
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert runs["floor_cov"][0]["extra"]["rows"] == runs["floor"][0]["extra"]["rows"] > 0


@pytest.mark.slow
def test_quick_decode_comparison_runs(tmp_path):
    # Every decode path runs, and the script's own check (each returns pyarrow's values) passes.
    script = SCRIPT.with_name("decode.py")
    out = subprocess.run([sys.executable, str(script), "--quick", "--data", str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for text in ("pyarrow read (position, vector), 1 thread", "duckdb read_parquet", "qkdb page reader",
                 "qkdb read_head", "decompression only"):
        assert text in out.stdout, text

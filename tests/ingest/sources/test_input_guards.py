"""Input guards: vector values no attention head produces, and head counts that contradict each other.

Files are written with the project's own writer and damaged for real (bytes overwritten inside a
data page, the footer intact); ingests run through the CLI or the API against a real warehouse,
which must be exactly as it was after every refusal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qkdb
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES, InputError, RegistryError
from qkdb.ingest.capture.sniff_sample import sample_path
from qkdb.ingest.sources import layout
from qkdb.ingest.sources.layout import VALUE_BOUND, read_head, write_head, write_metadata
from qkdb.ingest.sources.vector_pages import read_fixed_size_vectors

from helpers.datasets import planted_head
from helpers.warehouse_state import rows as _rows, tree as _tree

FACTS = ["--family", "Toy", "--gqa-ratio", "2", "--n-layers", "2"]
API_FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2)
N, D = 800, 16


def _dataset(root: Path, *, compression: str = "none", dtype: str = "float32") -> Path:
    """2 layers, 4 query heads, 2 KV heads, uncompressed by default (damaged bytes then still decode)."""
    rng = np.random.default_rng(0)
    for layer in range(2):
        for g in range(2):
            K, tk = planted_head(rng, N, D, slope=3e-3, mean_a=-1.0, offset=-4.0)
            write_head(root, layer, g, "k", K, tk, example_id=rng.integers(0, 4, N), compression=compression, dtype=dtype)
            for h in (2 * g, 2 * g + 1):
                Q, tq = planted_head(rng, N, D, slope=1.5e-3, mean_a=4.0, offset=4.0)
                write_head(root, layer, h, "q", Q, tq, example_id=rng.integers(0, 4, N), compression=compression, dtype=dtype)
    return root


def _vector_chunk(path: Path):
    md = pq.ParquetFile(path).metadata
    rg = md.row_group(0)
    for i in range(rg.num_columns):
        if rg.column(i).path_in_schema.startswith("vector."):
            return rg.column(i)
    raise AssertionError("no vector column")


def _damage(path: Path, nbytes: int = 4096, byte: int = 0x7E) -> tuple[int, int]:
    """Overwrite ``nbytes`` of vector values inside the last data page; the footer stays intact.

    The values of a page end where the page ends, and the column chunk's last page ends where the
    chunk does: so the span just before the chunk's end (less one row, to stay off the edge) holds
    values only, 4-byte aligned. Returns (values beyond the bound, rows touched) as pyarrow decodes
    the damaged file, independently of qkdb's reader.
    """
    chunk = _vector_chunk(path)
    assert chunk.compression == "UNCOMPRESSED" and not chunk.has_dictionary_page
    end = chunk.data_page_offset + chunk.total_compressed_size - 4 * D
    raw = bytearray(path.read_bytes())
    footer = raw[end:]
    raw[end - nbytes:end] = bytes([byte]) * nbytes
    path.write_bytes(bytes(raw))
    assert path.read_bytes()[end:] == footer
    vec = pq.read_table(path, columns=["vector"]).column("vector").combine_chunks()
    X = vec.flatten().to_numpy(zero_copy_only=False).reshape(len(vec), -1).astype(np.float64)
    beyond = np.isfinite(X) & (np.abs(X) > VALUE_BOUND)
    return int(beyond.sum()), int(beyond.any(axis=1).sum())


def _cli_ingest(runner, ds, *extra):
    return runner.invoke(app, ["ingest", "--path", str(ds), "--model", "toy", *FACTS, "-q", "-j", "1", *extra])


def _one_error_line(result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
    assert result.stdout == ""
    return lines[0]


# --------------------------------------------------------------------------------------------------
# damaged bytes: 4 KB of 0x7E in a data page (finite float32 values near 8.5e37)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["pages", "pyarrow"])
def test_damaged_page_is_refused_naming_the_file_and_count_and_the_warehouse_is_kept(
    tmp_path, home, runner, monkeypatch, reader
):
    ds = _dataset(tmp_path / "ds")
    first = _cli_ingest(runner, ds)
    assert first.exit_code == 0, first.stderr
    before, rows_before = _tree(home), _rows(home)

    path = ds / "l00h01q" / "data.parquet"
    n_beyond, n_rows = _damage(path)
    assert (n_beyond, n_rows) == (1024, 64)  # 4096 bytes = 1024 float32 = 64 rows of 16
    assert np.float32(np.frombuffer(b"\x7e" * 4, "<f4")[0]) > 8e37
    calls = []
    if reader == "pages":
        assert read_fixed_size_vectors(pq.ParquetFile(path), path) is not None  # the fast reader takes it
    else:
        def decline(*args, **kwargs):
            calls.append(args)
            return None

        monkeypatch.setattr(layout, "read_fixed_size_vectors", decline)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _cli_ingest(runner, ds)
    assert result.exit_code == InputError.exit_code == EXIT_CODES["input"]
    line = _one_error_line(result)
    assert line == (
        f"error: {path}: 1024 vector values no attention head produces (1024 beyond ±65504 "
        f"(largest |value| 8.46e+37)) in 64 of {N} rows; the file looks damaged "
        "(--drop-bad-vectors drops those rows, --skip-bad-heads skips the head)"
    )
    if reader == "pyarrow":
        assert calls, "the pyarrow path was not taken"
    assert _tree(home) == before
    assert _rows(home) == rows_before


def test_damaged_page_through_the_installed_command_with_warnings_as_errors(tmp_path, home):
    # A real process tree (two workers), every Python warning an error in each of its processes.
    ds = _dataset(tmp_path / "ds")
    n_beyond, n_rows = _damage(ds / "l01h02q" / "data.parquet")
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    cmd = [sys.executable, "-W", "error", "-m", "qkdb", "ingest", "--path", str(ds), "--model", "toy", *FACTS, "-q", "-j", "2"]
    refused = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == EXIT_CODES["input"], refused.stderr
    assert refused.stdout == ""
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert lines[0].startswith(f"error: {ds / 'l01h02q' / 'data.parquet'}: {n_beyond} vector values")
    assert f"in {n_rows} of {N} rows" in lines[0]
    assert not (home / ".store" / "toy").exists()

    kept = subprocess.run(cmd + ["--drop-bad-vectors"], env=env, capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0, kept.stderr
    # (rich wraps notes at 80 columns when stderr is not a terminal: compare the words)
    said = " ".join(kept.stderr.split())
    note = (f"note: dropped {n_rows} rows whose vectors hold NaN, ±inf or values beyond ±65504 "
            f"(--drop-bad-vectors), counted in heads.n_dropped, in 1 file: l01h02q {n_rows}")
    assert said.count("note: dropped") == 1 and note in said
    con = qkdb.connect()
    try:
        got = dict(((l, h), (nq, nd)) for l, h, nq, nd in con.execute("select layer, head, n_q, n_dropped from heads").fetchall())
    finally:
        con.close()
    assert got[(1, 2)] == (N - n_rows, n_rows)
    assert all(v == (N, 0) for k, v in got.items() if k != (1, 2))


def test_damaged_key_file_refuses_its_group_or_is_dropped_once(tmp_path, home):
    ds = _dataset(tmp_path / "ds")
    key = ds / "l00h00k" / "data.parquet"
    n_beyond, n_rows = _damage(key)
    with pytest.raises(InputError, match=rf"^{key}: {n_beyond} vector values"):
        qkdb.ingest(ds, "toy", workers=1, **API_FACTS)

    # --skip-bad-heads: the two query heads that read the key are skipped, with the reason.
    res = qkdb.ingest(ds, "toy", workers=1, skip_bad_heads=True, **API_FACTS)
    assert res.heads_done == 6 and [h for h, _ in res.skipped] == ["l00h00", "l00h01"]
    assert all(f"{key}: {n_beyond} vector values" in reason for _, reason in res.skipped)
    con = qkdb.connect()
    try:
        skipped = json.loads(con.execute("select skipped from ingest_runs").fetchall()[0][0])
    finally:
        con.close()
    assert [s["head"] for s in skipped] == ["l00h00", "l00h01"]

    # --drop-bad-vectors: the key file's rows are counted in both of its query heads, reported once.
    res = qkdb.ingest(ds, "toy", workers=1, drop_bad_vectors=True, force=True, **API_FACTS)
    assert res.heads_done == 8
    assert [n for n in res.notes if "dropped" in n] == [
        f"dropped {n_rows} rows whose vectors hold NaN, ±inf or values beyond ±65504 "
        f"(--drop-bad-vectors), counted in heads.n_dropped, in 1 file: l00h00k {n_rows}"
    ]
    con = qkdb.connect()
    try:
        got = con.execute("select head, n_k, n_dropped from heads where layer = 0 order by head").fetchall()
        params = json.loads(con.execute("select parameters from ingest_runs order by finished_at desc limit 1").fetchall()[0][0])
    finally:
        con.close()
    assert got == [(0, N - n_rows, n_rows), (1, N - n_rows, n_rows), (2, N, 0), (3, N, 0)]
    assert params["drop_bad_vectors"] is True and params["skip_bad_heads"] is False


def test_subsampled_files_are_screened_in_full(tmp_path, home):
    # --max-vectors: the moments see a subsample, so they cannot vouch for the rest of the file.
    ds = _dataset(tmp_path / "ds")
    path = ds / "l01h03q" / "data.parquet"
    n_beyond, n_rows = _damage(path)
    with pytest.raises(InputError, match=rf"{n_beyond} vector values .* in {n_rows} of {N} rows"):
        qkdb.ingest(ds, "toy", workers=1, max_vectors=100, **API_FACTS)
    res = qkdb.ingest(ds, "toy", workers=1, max_vectors=100, drop_bad_vectors=True, **API_FACTS)
    assert res.heads_done == 8
    con = qkdb.connect()
    try:
        assert con.execute("select n_q, n_dropped from heads where layer = 1 and head = 3").fetchall() == [(100, n_rows)]
    finally:
        con.close()


def test_damage_in_a_compressed_page_is_a_clear_error_too(tmp_path, home, runner):
    # zstd: the same bytes no longer decode at all; whatever the outcome, one line, no traceback.
    ds = _dataset(tmp_path / "ds", compression="zstd")
    path = ds / "l00h02q" / "data.parquet"
    chunk = _vector_chunk(path)
    raw = bytearray(path.read_bytes())
    mid = chunk.data_page_offset + chunk.total_compressed_size // 2
    raw[mid - 2048:mid + 2048] = b"\x7e" * 4096
    path.write_bytes(bytes(raw))
    result = _cli_ingest(runner, ds)
    assert result.exit_code == EXIT_CODES["input"]
    assert _one_error_line(result).startswith(f"error: {path}: ")
    assert not (home / ".store" / "toy").exists()


# --------------------------------------------------------------------------------------------------
# NaN, ±inf, float16, out-of-range and float64 extremes
# --------------------------------------------------------------------------------------------------


def _rewrite(path: Path, X: np.ndarray, dtype: str = "float32") -> None:
    """Rewrite one head file with new vectors (same positions), through the project's writer."""
    data = read_head(path)
    folder = path.parent
    layer, head, kind = int(folder.name[1:3]), int(folder.name[4:6]), folder.name[6]
    write_head(folder.parent, layer, head, kind, X, data.positions, example_id=data.example_id, dtype=dtype)


def _vectors(path: Path) -> np.ndarray:
    vec = pq.read_table(path, columns=["vector"]).column("vector").combine_chunks()
    return vec.flatten().to_numpy(zero_copy_only=False).reshape(len(vec), -1).astype(np.float64)


CASES = {
    # name: (how the vectors are spoiled, file dtype, expected clause of the message)
    "nan": (lambda X: X.__setitem__((slice(0, 5), 0), np.nan), "float32", "5 vector values no attention head produces (5 NaN or infinite) in 5 of"),
    "inf": (lambda X: X.__setitem__((slice(3, 6), slice(1, 3)), -np.inf), "float32", "6 vector values no attention head produces (6 NaN or infinite) in 3 of"),
    "beyond float16": (lambda X: X.__setitem__((7, 4), 7e4), "float32", "1 vector value no attention head produces (1 beyond ±65504 (largest |value| 7e+04)) in 1 of"),
    "float64 1e300": (lambda X: X.__setitem__((slice(0, 4), 2), 1e300), "float64", "4 vector values no attention head produces (4 beyond ±65504 (largest |value| 1e+300)) in 4 of"),
    # Finite column sums (they cancel) but squares that overflow float64: only the moments see it.
    "float64 cancelling": (lambda X: X.__setitem__((slice(0, 2), 5), [1e200, -1e200]), "float64", "2 vector values no attention head produces (2 beyond ±65504 (largest |value| 1e+200)) in 2 of"),
    "nan and beyond": (lambda X: (X.__setitem__((0, 0), np.nan), X.__setitem__((1, 1), 1e6)), "float32", "2 vector values no attention head produces (1 NaN or infinite, 1 beyond ±65504 (largest |value| 1e+06)) in 2 of"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_values_are_refused_or_dropped_without_any_numpy_warning(tmp_path, home, case):
    spoil, dtype, clause = CASES[case]
    ds = _dataset(tmp_path / "ds")
    path = ds / "l01h01q" / "data.parquet"
    X = _vectors(path)
    spoil(X)
    n_bad_rows = int((~(np.abs(X) <= VALUE_BOUND)).any(axis=1).sum())
    _rewrite(path, X, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError) as err:
            qkdb.ingest(ds, "toy", workers=1, **API_FACTS)
        assert str(err.value).startswith(f"{path}: {clause} {N} rows;")
        assert not home.exists()  # a refused first ingest leaves no empty warehouse behind
        res = qkdb.ingest(ds, "toy", workers=1, drop_bad_vectors=True, **API_FACTS)
    assert res.heads_done == 8
    con = qkdb.connect()
    try:
        n_q, dropped, bias = con.execute(
            "select n_q, n_dropped, bias_strength from head_metrics where layer = 1 and head = 1"
        ).fetchall()[0]
        others = con.execute("select max(abs(bias_strength)) from head_metrics").fetchall()[0][0]
    finally:
        con.close()
    assert (n_q, dropped) == (N - n_bad_rows, n_bad_rows)
    assert np.isfinite(bias) and abs(bias) < 1e3 and others < 1e3


def test_float16_files_with_inf_are_refused_and_clean_float16_files_pass(tmp_path, home):
    # float16 captures overflow to inf above 65504: the same bound, seen as "infinite".
    ds = _dataset(tmp_path / "ds", dtype="float16")
    qkdb.ingest(ds, "toy", workers=1, **API_FACTS)  # clean float16: fine
    before = _tree(home)
    path = ds / "l00h03q" / "data.parquet"
    X = _vectors(path).astype(np.float16)
    X[10:12, 0] = np.float16(np.inf)
    X[12, 3] = -np.float16(np.inf)
    _rewrite(path, X, "float16")
    assert pq.ParquetFile(path).schema_arrow.field("vector").type.value_type == pa.float16()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match=rf"^{path}: 3 vector values no attention head produces \(3 NaN or infinite\) in 3 of {N} rows"):
            qkdb.ingest(ds, "toy", workers=1, **API_FACTS)
    assert _tree(home) == before


def test_the_bound_is_inclusive_and_far_above_the_real_sample(tmp_path, home):
    # ±65504 itself is a value float16 can hold: accepted. The bundled real capture stays far below.
    ds = _dataset(tmp_path / "ds")
    path = ds / "l00h00q" / "data.parquet"
    X = _vectors(path)
    X[0, 0], X[1, 1] = VALUE_BOUND, -VALUE_BOUND
    _rewrite(path, X)
    assert qkdb.ingest(ds, "toy", workers=1, **API_FACTS).heads_done == 8
    with sample_path() as sample:
        peak = max(float(np.abs(read_head(f).vectors).max()) for f in sorted(sample.glob("*/data.parquet")))
    assert 1 < peak < VALUE_BOUND / 1000


def test_clean_files_are_proven_clean_without_a_row_by_row_test(tmp_path, monkeypatch):
    # The cheap path: finite column sums and the moments' bound; the exact test never runs.
    from qkdb.ingest.engine import head
    from qkdb.ingest.options import IngestOptions

    ds = _dataset(tmp_path / "ds")
    path = ds / "l00h00q" / "data.parquet"
    calls = []
    real = layout.find_bad_values
    monkeypatch.setattr(layout, "find_bad_values", lambda data: calls.append(1) or real(data))
    kd = head.prepare(read_head(path), str(path), IngestOptions(), (0, 0, 0))
    assert calls == [] and kd.moments.n == N
    # A huge but finite value defeats the proof; the exact test then runs, and refuses.
    X = _vectors(path)
    X[3, 3] = 1e9
    _rewrite(path, X)
    with pytest.raises(InputError, match="1 vector value no attention head produces"):
        head.prepare(read_head(path), str(path), IngestOptions(), (0, 0, 0))
    assert calls == [1]


# --------------------------------------------------------------------------------------------------
# GQA ratio against n_q_heads / n_kv_heads, from options, the registry and qkdb_dataset.json
# --------------------------------------------------------------------------------------------------


def _with_metadata(ds: Path, **facts) -> Path:
    write_metadata(ds, {"model": "sim", "family": "Sim", "n_layers": 2, **facts})
    return ds


GQA_CASES = [
    # (qkdb_dataset.json facts, --model, CLI options, the clause the message must contain)
    pytest.param(dict(n_q_heads=4, n_kv_heads=2), None, ["--gqa-ratio", "3"],
                 "gqa_ratio=3 (--gqa-ratio) contradicts n_q_heads / n_kv_heads = 4 / 2 (qkdb_dataset.json) = 2",
                 id="json counts vs option ratio (the report)"),
    pytest.param(dict(n_q_heads=4, n_kv_heads=2, gqa_ratio=3), None, [],
                 "gqa_ratio=3 (qkdb_dataset.json) contradicts n_q_heads / n_kv_heads = 4 / 2 (qkdb_dataset.json) = 2",
                 id="json alone"),
    pytest.param(dict(n_q_heads=4, n_kv_heads=2), None, ["--n-q-heads", "6"],
                 "gqa_ratio=2 (qkdb_dataset.json) contradicts n_q_heads / n_kv_heads = 6 (--n-q-heads) / 2 (qkdb_dataset.json) = 3",
                 id="json ratio vs option count"),
    pytest.param({}, "llama3.2-1b", ["--gqa-ratio", "2"],
                 "gqa_ratio=2 (--gqa-ratio) contradicts n_q_heads / n_kv_heads = 32 / 8 (the registry) = 4",
                 id="registry counts vs option ratio"),
    pytest.param({}, "llama3.2-1b", ["--n-q-heads", "4", "--n-kv-heads", "2"],
                 "gqa_ratio=4 (the registry) contradicts n_q_heads / n_kv_heads = 4 (--n-q-heads) / 2 (--n-kv-heads) = 2",
                 id="registry ratio vs option counts"),
    pytest.param({}, "brand-new", ["--family", "X", "--n-layers", "2", "--n-q-heads", "4", "--n-kv-heads", "2", "--gqa-ratio", "3"],
                 "gqa_ratio=3 (--gqa-ratio) contradicts n_q_heads / n_kv_heads = 4 (--n-q-heads) / 2 (--n-kv-heads) = 2",
                 id="options alone"),
    pytest.param(dict(gqa_ratio=2), "llama3.2-1b", ["--n-layers", "2"],
                 "qkdb_dataset.json gives gqa_ratio=2, the registry gqa_ratio=4 (n_q_heads / n_kv_heads = 32 / 8)",
                 id="json ratio vs registry"),
]


@pytest.mark.parametrize("metadata, model, options, clause", GQA_CASES)
def test_contradicting_head_counts_are_refused_before_any_work(tmp_path, home, runner, metadata, model, options, clause):
    ds = _dataset(tmp_path / "ds")
    qkdb.ingest(ds, "toy", workers=1, **API_FACTS)  # an existing model, which must stay as it was
    before, rows_before = _tree(home), _rows(home)
    if metadata:
        _with_metadata(ds, **metadata)
    args = ["ingest", "--path", str(ds), "-q", "-j", "1", *(["--model", model] if model else []), *options]
    result = runner.invoke(app, args)
    assert result.exit_code == RegistryError.exit_code == InputError.exit_code == EXIT_CODES["input"]
    line = _one_error_line(result)
    assert line.startswith("error: model ") and clause in line
    assert _tree(home) == before and _rows(home) == rows_before


def test_contradicting_head_counts_never_create_a_warehouse(tmp_path, home, runner):
    ds = _with_metadata(_dataset(tmp_path / "ds"), n_q_heads=4, n_kv_heads=2)
    result = runner.invoke(app, ["ingest", "--path", str(ds), "--gqa-ratio", "3", "-q"])
    assert result.exit_code == EXIT_CODES["input"] and "gqa_ratio=3" in _one_error_line(result)
    assert not home.exists()


def test_a_registry_name_on_a_smaller_dataset_with_the_same_ratio_is_accepted(tmp_path, home, runner):
    # Head counts that differ from the registry's at the same ratio pair queries and keys alike
    # (llama3.2-1b: 32 / 8 = 4; this dataset: 4 / 1, every query head reads l00h00k).
    ds = tmp_path / "ds"
    rng = np.random.default_rng(1)
    for h in range(4):
        Q, tq = planted_head(rng, N, D, slope=1.5e-3, mean_a=4.0, offset=4.0)
        write_head(ds, 0, h, "q", Q, tq)
    K, tk = planted_head(rng, N, D, slope=3e-3, mean_a=-1.0, offset=-4.0)
    write_head(ds, 0, 0, "k", K, tk)
    write_metadata(ds, {"model": "llama3.2-1b", "n_q_heads": 4, "n_kv_heads": 1})
    result = runner.invoke(app, ["ingest", "--path", str(ds), "--n-layers", "2", "-q", "-j", "1"])
    assert result.exit_code == 0, result.stderr
    # Another ratio in the dataset wins over the registry's (issue 47), and here its folders say
    # otherwise: refused by the folders themselves, naming the missing one.
    write_metadata(ds, {"model": "llama3.2-1b", "n_q_heads": 4, "n_kv_heads": 2})
    result = runner.invoke(app, ["ingest", "--path", str(ds), "--n-layers", "2", "-q", "-j", "1"])
    assert result.exit_code == EXIT_CODES["input"] and "key head folder missing: l00h01k" in _one_error_line(result)
    result = runner.invoke(app, ["ingest", "--path", str(ds), "--n-layers", "2", "-q", "-j", "1",
                                 "--gqa-ratio", "4", "--n-q-heads", "4", "--n-kv-heads", "1"])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("model", ["qwen3-14b", "llama3.2-3b"])
def test_a_simulation_under_a_registry_name_with_another_ratio_is_ingested_with_a_note(tmp_path, home, runner, model):
    # issue 47: `qkdb simulate --model qwen3-14b` then `qkdb ingest --path` was refused over the GQA
    # ratio (the registry's 40 / 8 = 5, the simulation's 8 / 2 = 4): the dataset's own consistent
    # counts describe its key folders, so they win, with the usual note naming both.
    ds = tmp_path / "sim"
    result = runner.invoke(app, ["simulate", "--model", model, "--out", str(ds), "--vectors", "300", "--layers", "2"])
    assert result.exit_code == 0, result.stderr
    result = runner.invoke(app, ["ingest", "--path", str(ds), "-j", "1"])
    assert result.exit_code == 0, result.stderr
    facts = json.loads((ds / "qkdb_dataset.json").read_text())
    ratio = facts["n_q_heads"] // facts["n_kv_heads"]
    said = " ".join(result.stderr.split())
    assert f"gqa_ratio={ratio} where the registry has" in said and "the ingest uses the dataset's" in said
    con = qkdb.connect()
    try:
        got = con.execute("select n_q_heads, n_kv_heads, gqa_ratio from models where model = ?", [model]).fetchall()
    finally:
        con.close()
    assert got == [(facts["n_q_heads"], facts["n_kv_heads"], ratio)]


def test_consistent_head_counts_from_any_source_are_accepted_and_recorded(tmp_path, home, runner):
    ds = _with_metadata(_dataset(tmp_path / "ds"), n_q_heads=4, n_kv_heads=2)
    for extra in ([], ["--gqa-ratio", "2", "--force"], ["--n-q-heads", "4", "--n-kv-heads", "2", "--gqa-ratio", "2", "--force"]):
        result = runner.invoke(app, ["ingest", "--path", str(ds), "-q", "-j", "1", *extra])
        assert result.exit_code == 0, result.stderr
    con = qkdb.connect()
    try:
        assert con.execute("select n_q_heads, n_kv_heads, gqa_ratio from models where model = 'sim'").fetchall() == [(4, 2, 2)]
    finally:
        con.close()


def test_head_counts_must_be_positive_integers(tmp_path, home, runner):
    ds = _dataset(tmp_path / "ds")
    result = runner.invoke(app, ["ingest", "--path", str(ds), "--model", "toy", "--family", "T", "--n-layers", "2",
                                 "--gqa-ratio", "0", "-q"])
    assert result.exit_code == EXIT_CODES["input"] and "gqa_ratio=0 (--gqa-ratio) must be at least 1" in _one_error_line(result)
    _with_metadata(ds, n_q_heads="4", n_kv_heads=2)
    result = runner.invoke(app, ["ingest", "--path", str(ds), "-q"])
    assert result.exit_code == EXIT_CODES["input"] and "qkdb_dataset.json: n_q_heads must be an integer, got '4'" in _one_error_line(result)

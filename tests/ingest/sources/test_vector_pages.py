"""The fast vector-column reader equals pyarrow exactly, or declines (returns None) and pyarrow reads."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkdb.errors import InputError
from qkdb.ingest.sources import layout
from qkdb.ingest.sources.layout import read_head, screen_values
from qkdb.ingest.sources.vector_pages import read_fixed_size_vectors


def _table(X: np.ndarray, positions=None) -> pa.Table:
    n, d = X.shape
    vec = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), d)
    pos = pa.array(np.arange(n, dtype=np.int32) if positions is None else positions, pa.int32())
    return pa.table({"position": pos, "example_id": pa.array(np.zeros(n, np.int32)), "vector": vec})


def _pyarrow_values(path) -> np.ndarray:
    vec = pq.read_table(path, columns=["vector"]).column("vector").combine_chunks()
    return vec.flatten().to_numpy(zero_copy_only=False).astype(np.float64).reshape(len(vec), vec.type.list_size)


def _fast(path):
    return read_fixed_size_vectors(pq.ParquetFile(path), path)


CODECS = ["none", "snappy", "zstd", "gzip", "brotli"]


@pytest.mark.parametrize(
    "codec, page_version, dictionary, split, dtype",
    [
        c
        for c in itertools.product(CODECS, ["1.0", "2.0"], [False, True], [False, True], ["float32", "float64"])
        if not (c[2] and c[3])  # byte-stream-split and dictionary are exclusive
    ],
)
def test_every_page_layout_reads_exactly(tmp_path, codec, page_version, dictionary, split, dtype):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(700, 12)).astype(dtype)
    X[:200] = np.round(X[:200] * 4) / 4  # repeated values: real dictionary pages
    path = tmp_path / "data.parquet"
    pq.write_table(
        _table(X), path, compression=codec, data_page_version=page_version, use_dictionary=dictionary,
        use_byte_stream_split=["vector.list.element"] if split else False,
        row_group_size=300, data_page_size=2048,  # several row groups and pages
    )
    got = _fast(path)
    assert got is not None, "this layout should take the fast path"
    assert got.dtype == np.float64 and got.shape == X.shape
    np.testing.assert_array_equal(got, X.astype(np.float64))
    np.testing.assert_array_equal(got, _pyarrow_values(path))


@pytest.mark.parametrize("distinct", [1, 2, 3, 17, 300, 5000])
def test_dictionary_indices_of_any_bit_width(tmp_path, distinct):
    rng = np.random.default_rng(distinct)
    values = rng.normal(size=distinct).astype(np.float32)
    X = values[rng.integers(0, distinct, size=(900, 7))]
    X[100:300] = values[0]  # long runs: RLE runs between bit-packed ones
    path = tmp_path / "data.parquet"
    pq.write_table(_table(X), path, use_dictionary=True, data_page_size=1000)
    assert "RLE_DICTIONARY" in pq.ParquetFile(path).metadata.row_group(0).column(2).encodings
    got = _fast(path)
    assert got is not None
    np.testing.assert_array_equal(got, X.astype(np.float64))


def test_dictionary_falling_back_to_plain_mid_column(tmp_path):
    # pyarrow's default writer: a dictionary page, dictionary-coded pages, then PLAIN pages
    # once the dictionary outgrows its limit; all in one column chunk.
    X = np.random.default_rng(3).normal(size=(3000, 64)).astype(np.float32)
    path = tmp_path / "data.parquet"
    pq.write_table(_table(X), path, dictionary_pagesize_limit=20_000, data_page_size=10_000)
    encodings = pq.ParquetFile(path).metadata.row_group(0).column(2).encodings
    assert "PLAIN" in encodings and "RLE_DICTIONARY" in encodings
    np.testing.assert_array_equal(_fast(path), X.astype(np.float64))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda X: pa.array([None, *X[1:].tolist()], pa.list_(pa.float32(), X.shape[1])), id="null-vector"),
        pytest.param(lambda X: pa.array([[None] + X[0, 1:].tolist(), *X[1:].tolist()], pa.list_(pa.float32(), X.shape[1])), id="null-element"),
        pytest.param(lambda X: pa.array(X.tolist(), pa.list_(pa.float32())), id="plain-list"),
        pytest.param(lambda X: pa.array(X.astype(np.float16).tolist(), pa.list_(pa.float16(), X.shape[1])), id="float16"),
    ],
)
@pytest.mark.parametrize("page_version", ["1.0", "2.0"])
def test_declines_what_it_does_not_handle(tmp_path, make, page_version):
    X = np.arange(40, dtype=np.float32).reshape(10, 4) / 4
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"position": pa.array(range(10), pa.int32()), "vector": make(X)}), path,
                   data_page_version=page_version)
    assert _fast(path) is None


def test_legacy_lz4_declines_and_read_head_still_reads(tmp_path):
    X = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    path = tmp_path / "l00h00q" / "data.parquet"
    path.parent.mkdir()
    pq.write_table(_table(X), path, compression="lz4")
    if pq.ParquetFile(path).metadata.row_group(0).column(2).compression == "LZ4":
        assert _fast(path) is None
    np.testing.assert_array_equal(read_head(path).vectors, X.astype(np.float64))


def test_read_head_fast_path_keeps_null_positions_and_non_finite_rules(tmp_path, monkeypatch):
    X = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    X[2, 1] = np.nan
    X[4, 0] = np.inf
    X[5, 2] = 1e5  # beyond float16's range: no head produces it
    path = tmp_path / "l00h00q" / "data.parquet"
    path.parent.mkdir()
    pq.write_table(_table(X, positions=[0, None, 2, 3, 4, 5]), path)
    assert _fast(path) is not None
    fast = read_head(path)
    monkeypatch.setattr(layout, "read_fixed_size_vectors", lambda *a, **k: None)
    slow = read_head(path)
    # Both read paths hand the screen the same rows (only the null position's row is gone).
    for data in (fast, slow):
        assert data.n_dropped == 1 and data.vector_sum is None
        np.testing.assert_array_equal(data.vectors, X[[0, 2, 3, 4, 5]].astype(np.float64))
    messages = []
    for data in (fast, slow):
        with pytest.raises(InputError) as err:
            screen_values(data, path)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "3 vector values" in messages[0] and "in 3 of 5 rows" in messages[0]
    for data in (fast, slow):
        kept, dropped = screen_values(data, path, drop=True)
        assert dropped == 3 and kept.n_dropped == 4
        np.testing.assert_array_equal(kept.vectors, X[[0, 3]].astype(np.float64))
        np.testing.assert_array_equal(kept.positions, [0, 3])
        np.testing.assert_array_equal(kept.example_id, [0, 0])


def test_damaged_page_headers_never_give_wrong_numbers(tmp_path):
    X = np.random.default_rng(2).normal(size=(64, 8)).astype(np.float32)
    good = tmp_path / "good.parquet"
    pq.write_table(_table(X), good, compression="zstd", use_dictionary=False)
    raw = bytearray(good.read_bytes())
    chunk = pq.ParquetFile(good).metadata.row_group(0).column(2)
    start = chunk.data_page_offset
    path = tmp_path / "l00h00q" / "data.parquet"
    path.parent.mkdir()
    for offset in range(start, start + 24):  # the first page header
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(raw)
            bad[offset] ^= flip
            path.write_bytes(bytes(bad))
            try:
                data = read_head(path)
            except InputError:
                continue
            np.testing.assert_array_equal(data.vectors, X.astype(np.float64))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(0, 300),
    d=st.integers(1, 40),
    dtype=st.sampled_from(["float32", "float64"]),
    codec=st.sampled_from(CODECS),
    page_version=st.sampled_from(["1.0", "2.0"]),
    encoding=st.sampled_from(["plain", "dictionary", "split"]),
    row_group=st.integers(1, 400),
    page=st.sampled_from([64, 512, 4096, 1 << 20]),
    levels=st.integers(1, 8),
)
def test_property_fast_reader_matches_pyarrow(tmp_path, n, d, dtype, codec, page_version, encoding, row_group, page, levels):
    rng = np.random.default_rng(n * 1000 + d)
    X = (rng.integers(0, levels, size=(n, d)) + rng.normal(size=(n, d)) * (encoding != "dictionary")).astype(dtype)
    path = tmp_path / "data.parquet"
    pq.write_table(
        _table(X), path, compression=codec, data_page_version=page_version,
        use_dictionary=encoding == "dictionary",
        use_byte_stream_split=["vector.list.element"] if encoding == "split" else False,
        row_group_size=row_group, data_page_size=page,
    )
    got = _fast(path)
    assert got is not None
    np.testing.assert_array_equal(got, _pyarrow_values(path))

"""Property: on any small parquet file the reader returns correct numbers or raises InputError, and the
value screen refuses (or drops) exactly the rows holding NaN, ±inf or values beyond ±VALUE_BOUND."""

from __future__ import annotations

import re
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkdb.errors import InputError
from qkdb.ingest.sources.layout import VALUE_BOUND, read_head, screen_values

FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.just(0.5))


@st.composite
def valid_files(draw):
    n = draw(st.integers(0, 12))
    d = draw(st.integers(1, 5))
    width = draw(st.sampled_from(["float16", "float32", "float64"]))
    fixed = draw(st.booleans())
    rows = [draw(st.lists(FLOATS, min_size=d, max_size=d)) for _ in range(n)]
    null_vec = [draw(st.booleans()) and draw(st.booleans()) for _ in range(n)]
    positions = [draw(st.one_of(st.none(), st.integers(0, 10_000))) for _ in range(n)]
    vtype = pa.list_(pa.from_numpy_dtype(np.dtype(width)), d) if fixed else pa.list_(pa.from_numpy_dtype(np.dtype(width)))
    with np.errstate(over="ignore"):  # large float32 values overflow float16 to inf: a case we want
        values = [None if nv else np.asarray(r, dtype=width).tolist() for r, nv in zip(rows, null_vec)]
    table = pa.table({"position": pa.array(positions, pa.int32()), "vector": pa.array(values, vtype)})
    return table, rows, null_vec, positions, width, d, fixed


@st.composite
def invalid_files(draw):
    kind = draw(st.sampled_from(["no_vector", "no_position", "string_vector", "int_vector", "ragged", "bytes"]))
    if kind == "no_vector":
        return pa.table({"position": [1, 2]})
    if kind == "no_position":
        return pa.table({"vector": pa.array([[1.0]], pa.list_(pa.float32()))})
    if kind == "string_vector":
        return pa.table({"position": [1], "vector": ["abc"]})
    if kind == "int_vector":
        return pa.table({"position": [1], "vector": pa.array([[1, 2]], pa.list_(pa.int64()))})
    if kind == "ragged":
        return pa.table({"position": [1, 2], "vector": pa.array([[1.0, 2.0], [1.0]], pa.list_(pa.float32()))})
    return draw(st.binary(min_size=0, max_size=64))


def _expected(rows, null_vec, positions, width):
    """Rows the reader keeps (no null), each with whether the screen lets it through."""
    out = []
    for r, nv, p in zip(rows, null_vec, positions):
        vec = np.asarray(r, dtype=width).astype(np.float64)
        if not nv and p is not None:
            good = bool(np.isfinite(vec).all() and (np.abs(vec) <= VALUE_BOUND).all())
            out.append((vec, p, good))
    return out


def _write(obj, root: str) -> Path:
    path = Path(root) / "l00h00q" / "data.parquet"
    path.parent.mkdir()
    if isinstance(obj, bytes):
        path.write_bytes(obj)
    else:
        pq.write_table(obj, path)
    return path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_files())
def test_valid_files_read_correctly(case):
    table, rows, null_vec, positions, width, d, fixed = case
    with np.errstate(over="ignore"):
        expect = _expected(rows, null_vec, positions, width)
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning, whatever the values
        path = _write(table, root)
        data = read_head(path)
        # A plain list column with no non-null row does not say its dimension.
        assert data.vectors.shape == (len(expect), d if fixed or expect else 0)
        assert data.n_dropped == len(rows) - len(expect)
        for i, (vec, pos, _) in enumerate(expect):
            np.testing.assert_array_equal(data.vectors[i], vec)
            assert data.positions[i] == pos
        good = [(vec, pos) for vec, pos, ok in expect if ok]
        if len(good) < len(expect):
            with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: .* in {len(expect) - len(good)} of {len(expect)} rows"):
                screen_values(data, path)
        kept, dropped = screen_values(data, path, drop=True)
        assert dropped == len(expect) - len(good) and kept.n_dropped == len(rows) - len(good)
        for i, (vec, pos) in enumerate(good):
            np.testing.assert_array_equal(kept.vectors[i], vec)
            assert kept.positions[i] == pos


@settings(max_examples=60, deadline=None)
@given(invalid_files())
def test_invalid_files_raise_our_error(obj):
    with tempfile.TemporaryDirectory() as root:
        path = _write(obj, root)
        try:
            read_head(path)
        except InputError as exc:
            assert str(path) in str(exc)
        else:
            raise AssertionError("an invalid file was accepted")

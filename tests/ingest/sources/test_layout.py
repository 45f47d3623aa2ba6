"""Reading the sniffed-qk layout: discovery, vector encodings, bad rows, clear errors."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qkdb.errors import InputError
from qkdb.ingest.sources.plan import plan_groups
from qkdb.ingest.sources.layout import discover, read_head, screen_values, write_head
from qkdb.ingest.sources.select import HeadSelection


def _write(path, table):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_discovers_heads_below_any_prefix(tmp_path):
    rng = np.random.default_rng(0)
    base = tmp_path / "data" / "attention-plasticity"
    write_head(base, 0, 0, "q", rng.normal(size=(20, 4)), np.arange(20))
    write_head(base, 0, 0, "k", rng.normal(size=(20, 4)), np.arange(20))
    (tmp_path / "notes").mkdir()
    _write(tmp_path / "other" / "data.parquet", pa.table({"x": [1]}))
    found = discover(tmp_path)
    assert set(found.queries) == {(0, 0)} and set(found.keys) == {(0, 0)}
    assert found.ignored == ["other"]


def test_head_folders_that_are_symlinks_are_found_and_a_link_back_up_does_not_loop(tmp_path):
    from qkdb import api

    rng = np.random.default_rng(0)
    store = tmp_path / "store"
    for layer in range(2):
        for kind in "qk":
            write_head(store, layer, 0, kind, rng.normal(size=(300, 8)), rng.integers(0, 500, 300))
    linked = tmp_path / "linked"
    (linked / "sub").mkdir(parents=True)
    for folder in store.iterdir():  # every head folder a symlink, some below a prefix
        (linked / ("sub" if folder.name.startswith("l01") else "") / folder.name).symlink_to(folder)
    (linked / "sub" / "back").symlink_to(linked)  # a cycle
    found = discover(linked)
    assert set(found.queries) == {(0, 0), (1, 0)} and set(found.keys) == {(0, 0), (1, 0)}
    result = api.ingest(linked, model="linked", home=tmp_path / "home", gqa_ratio=1, n_layers=2, workers=1)
    assert result.heads_done == 2


def test_fixed_size_list_float32_is_read_exactly(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 8)).astype(np.float32)
    write_head(tmp_path, 2, 3, "q", X, np.arange(50))
    data = read_head(tmp_path / "l02h03q" / "data.parquet")
    assert data.vectors.dtype == np.float64 and data.vectors.shape == (50, 8)
    np.testing.assert_array_equal(data.vectors, X.astype(np.float64))
    np.testing.assert_array_equal(data.positions, np.arange(50))


def test_written_files_keep_statistics_for_every_column_but_the_vectors(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 8))
    path = write_head(tmp_path, 0, 1, "q", X, np.arange(40), dtype="float16", lse=rng.normal(size=40))
    group = pq.ParquetFile(path).metadata.row_group(0)
    stats = {group.column(i).path_in_schema: group.column(i).is_stats_set for i in range(group.num_columns)}
    assert stats.pop("vector.list.element") is False  # (a third of a float16 file's write; nothing prunes on them)
    assert stats and all(stats.values()), stats
    assert group.column(2).statistics.max == 39  # position
    np.testing.assert_array_equal(read_head(path).vectors, X.astype(np.float16).astype(np.float64))


@pytest.mark.parametrize("value_type", [pa.float16(), pa.float32(), pa.float64()])
def test_plain_list_vectors_of_any_float_width(tmp_path, value_type):
    X = np.arange(30, dtype=np.float64).reshape(10, 3) / 8
    vec = pa.array([row.tolist() for row in X], type=pa.list_(value_type))
    path = _write(tmp_path / "l00h00q" / "data.parquet", pa.table({"position": pa.array(range(10), pa.int32()), "vector": vec}))
    data = read_head(path)
    np.testing.assert_array_equal(data.vectors, X)  # exact in float16 for these values


def test_sliding_window_is_the_largest_value_given(tmp_path):
    X = np.arange(12, dtype=np.float32).reshape(6, 2)
    table = pa.table({
        "position": pa.array(range(6), pa.int32()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), 2),
        "sliding_window": pa.chunked_array([[None, 12, 12], [None, 16, None]], pa.int32()),
    })
    assert read_head(_write(tmp_path / "l00h00q" / "data.parquet", table)).sliding_window == 16
    write_head(tmp_path, 0, 1, "q", X, np.arange(6))  # no sliding window: a column of nulls
    assert read_head(tmp_path / "l00h01q" / "data.parquet").sliding_window is None


def test_null_rows_are_dropped_and_counted_and_non_finite_ones_are_screened(tmp_path):
    vec = pa.array([[1.0, 2.0], None, [np.nan, 1.0], [3.0, np.inf], [5.0, 6.0]], type=pa.list_(pa.float32(), 2))
    pos = pa.array([0, 1, 2, 3, None], pa.int32())
    path = _write(tmp_path / "l00h00q" / "data.parquet", pa.table({"position": pos, "vector": vec}))
    data = read_head(path)
    # The reader drops only nulls; non-finite values are the screen's to judge.
    assert data.n_dropped == 2 and data.vector_sum is None and not data.screened
    np.testing.assert_array_equal(data.vectors, [[1.0, 2.0], [np.nan, 1.0], [3.0, np.inf]])
    with pytest.raises(InputError, match=r"l00h00q/data.parquet: 2 vector values .*\(2 NaN or infinite\) in 2 of 3 rows"):
        screen_values(data, path)
    kept, dropped = screen_values(data, path, drop=True)
    assert dropped == 2 and kept.n_dropped == 4 and kept.screened
    np.testing.assert_array_equal(kept.vectors, [[1.0, 2.0]])


def test_column_sums_come_with_the_vectors_when_every_row_is_kept(tmp_path):
    # The finiteness test's column sums are handed to the moments as the mean's numerator.
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    write_head(tmp_path, 0, 0, "q", X, np.arange(40))
    data = read_head(tmp_path / "l00h00q" / "data.parquet")
    np.testing.assert_array_equal(data.vector_sum, data.vectors.sum(axis=0))


def test_no_column_sums_with_a_non_finite_value_or_when_a_sum_overflows(tmp_path):
    vec = pa.array([[1.0, 2.0], [np.nan, 1.0], [5.0, 6.0]], type=pa.list_(pa.float32(), 2))
    path = _write(tmp_path / "a" / "l00h00q" / "data.parquet", pa.table({"position": pa.array([0, 1, 2]), "vector": vec}))
    nan = read_head(path)
    assert nan.n_dropped == 0 and nan.vector_sum is None
    # Finite values whose sum overflows: every row is kept, and no infinite sum is passed on.
    big = pa.array([[1e308, 1.0], [1e308, 2.0]], type=pa.list_(pa.float64(), 2))
    path = _write(tmp_path / "b" / "l00h00q" / "data.parquet", pa.table({"position": pa.array([0, 1]), "vector": big}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = read_head(path)
    assert kept.n_dropped == 0 and kept.vector_sum is None
    np.testing.assert_array_equal(kept.vectors, [[1e308, 1.0], [1e308, 2.0]])


def test_ragged_list_vectors_are_an_error_naming_the_file(tmp_path):
    vec = pa.array([[1.0, 2.0], [1.0]], type=pa.list_(pa.float32()))
    path = _write(tmp_path / "l00h00q" / "data.parquet", pa.table({"position": [0, 1], "vector": vec}))
    with pytest.raises(InputError, match=r"l00h00q.*different lengths"):
        read_head(path)


@pytest.mark.parametrize(
    "table,message",
    [
        (pa.table({"position": [0]}), "missing column"),
        (pa.table({"position": [0], "vector": ["x"]}), "expected a list of floats"),
        (pa.table({"position": [0], "vector": pa.array([[1]], pa.list_(pa.int32()))}), "float16/float32/float64"),
    ],
)
def test_wrong_schema_is_an_error_naming_the_file(tmp_path, table, message):
    path = _write(tmp_path / "l00h00q" / "data.parquet", table)
    with pytest.raises(InputError, match=message) as info:
        read_head(path)
    assert str(path) in str(info.value)


def test_corrupt_parquet_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "l00h00q" / "data.parquet"
    path.parent.mkdir()
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(InputError, match="cannot read parquet") as info:
        read_head(path)
    assert str(path) in str(info.value)


def test_duplicate_head_folders_are_refused(tmp_path):
    rng = np.random.default_rng(2)
    for prefix in ("a", "b"):
        write_head(tmp_path / prefix, 0, 1, "q", rng.normal(size=(5, 2)), np.arange(5))
    with pytest.raises(InputError, match="l00h01q appears twice"):
        discover(tmp_path)


def test_gqa_mapping_and_missing_key_folders(tmp_path):
    rng = np.random.default_rng(3)
    for h in range(8):
        write_head(tmp_path, 0, h, "q", rng.normal(size=(5, 2)), np.arange(5))
    for g in (0, 1):
        write_head(tmp_path, 0, g, "k", rng.normal(size=(5, 2)), np.arange(5))
    found = discover(tmp_path)
    groups = plan_groups(found, gqa_ratio=4)
    assert [(g.kv_head, [q.head for q in g.queries]) for g in groups] == [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])]
    # Each missing folder first, with the query heads that read it; then the ratio that fits the
    # folders there are (a wrong ratio, not a missing file).
    with pytest.raises(InputError) as wrong:
        plan_groups(found, gqa_ratio=2)
    assert str(wrong.value) == (
        f"{tmp_path}: key head folders missing: l00h02k (read by l00h04q, l00h05q); l00h03k (read by l00h06q, "
        "l00h07q) (query head h reads key head h // 2); with --gqa-ratio 4 the query heads read exactly the key "
        "folders there are: is the GQA ratio 2 right (--gqa-ratio, the registry, the dataset's facts)?"
    )
    # a selection that needs only the present key heads plans fine
    assert len(plan_groups(found, 2, HeadSelection.parse("l00h01,l00h03"))) == 2


def test_a_key_file_missing_from_the_capture_is_named_with_its_query_heads(tmp_path):
    # qwen3-style 2 query heads per key head, one key file lost: no ratio explains it.
    rng = np.random.default_rng(4)
    for layer in (0, 1):
        for h in range(6):
            write_head(tmp_path, layer, h, "q", rng.normal(size=(5, 2)), np.arange(5))
        for g in range(3):
            if (layer, g) != (1, 2):
                write_head(tmp_path, layer, g, "k", rng.normal(size=(5, 2)), np.arange(5))
    with pytest.raises(InputError) as lost:
        plan_groups(discover(tmp_path), gqa_ratio=2)
    message = str(lost.value)
    assert message.startswith(f"{tmp_path}: key head folder missing: l01h02k (read by l01h04q, l01h05q) ")
    assert message.endswith("the dataset lacks this file: capture it, or ingest the other heads with --heads")
    assert "--gqa-ratio" not in message  # the ratio is not what is wrong
    # The other heads plan fine.
    assert len(plan_groups(discover(tmp_path), 2, HeadSelection.parse("l00h00,l00h05,l01h01"))) == 3


def test_head_selection_syntax():
    sel = HeadSelection.parse("0-2, 5, l07h03")
    assert sel.matches(1, 9) and sel.matches(5, 0) and sel.matches(7, 3)
    assert not sel.matches(3, 0) and not sel.matches(7, 4)
    assert HeadSelection.parse(None).matches(99, 99)
    with pytest.raises(InputError, match="cannot read 'x7'"):
        HeadSelection.parse("x7")


def test_numpy_view_of_arrow_values_honours_offsets_and_nulls():
    from qkdb.ingest.sources.layout import _numpy

    arr = pa.array(np.arange(10, dtype=np.int32)).slice(3, 4)  # a non-zero offset
    np.testing.assert_array_equal(_numpy(arr), [3, 4, 5, 6])
    f16 = pa.array(np.array([1.5, -2.0], dtype=np.float16))
    assert _numpy(f16).dtype == np.float16 and list(_numpy(f16)) == [1.5, -2.0]
    with_null = pa.array([1.0, None, 3.0])
    np.testing.assert_array_equal(_numpy(with_null), [1.0, np.nan, 3.0])


def test_reading_a_head_does_not_import_pandas(tmp_path):
    # pyarrow's to_numpy / pa.array import pandas when it is installed: ~0.25 s in every worker.
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    write_head(tmp_path, 0, 0, "q", rng.normal(size=(64, 8)), np.arange(64), example_id=np.arange(64) % 3)
    code = (
        "import sys; from qkdb.ingest.sources.layout import read_head; "
        f"d = read_head({str(tmp_path / 'l00h00q' / 'data.parquet')!r}); "
        "assert d.example_id is not None and len(d.positions) == 64; "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

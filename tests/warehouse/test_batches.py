"""Per-head column dicts staged in bulk give exactly the rows of one conversion per head."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from qkdb.warehouse import store
from qkdb.warehouse.batches import arrow_array, merge_columns, to_batch
from qkdb.warehouse.schema import COMPLEMENT, HEADS, MODELS, POINTS, ROTATION


def _one_by_one(table, chunks):
    return pa.Table.from_batches([to_batch(table, c) for c in chunks], schema=table.arrow_schema)


def _merged(table, chunks):
    return pa.Table.from_batches([to_batch(table, merge_columns(table, chunks))], schema=table.arrow_schema)


def test_scalar_rows_merge_like_one_batch_per_head():
    chunks = [
        {"layer": 0, "head": h, "kv_head": h // 2, "head_dim": 64, "n_q": 100 + h, "depth": 0.25 * h,
         "is_nope": h == 1, "sliding_window": None if h else 4096, "qk_accuracy_pc01": np.nan if h == 2 else 0.9}
        for h in range(4)
    ]
    got = _merged(HEADS, chunks)
    assert got.equals(_one_by_one(HEADS, chunks))
    assert got.column("qk_accuracy_pc01").null_count == 1  # NaN -> NULL survives the merge
    assert got.column("sliding_window").to_pylist() == [4096, None, None, None]


def test_array_rows_with_broadcast_scalars_strings_and_absent_columns():
    rng = np.random.default_rng(0)
    chunks = []
    for h, n in enumerate([3, 0, 5]):
        cols = {"layer": 1, "head": h, "pair": np.arange(n, dtype=np.int32), "var_frac": rng.random(n),
                "omega": np.where(rng.random(n) < 0.3, np.nan, rng.random(n)), "angle_r": [0.5, None, 0.1][:n] if h == 0 else 0.2, "active": rng.random(n) < 0.5}
        if h != 1:
            cols["ring"] = rng.random(n)  # absent from one head: NULL there
        chunks.append(cols)
    assert _merged(COMPLEMENT, chunks).equals(_one_by_one(COMPLEMENT, chunks))
    kinds = [{"layer": 0, "head": h, "kind": np.array(["q", "k"], dtype=object), "pc0": np.arange(2.0), **({"c0": np.ones(2)} if h == 1 else {})} for h in range(3)]
    assert _merged(POINTS, kinds).equals(_one_by_one(POINTS, kinds))


def test_list_valued_column_and_unknown_column():
    row = {"family": "Toy", "nope_layers": [[3, 7]], "n_heads": 8, "head_dim": 64}
    assert _merged(MODELS, [row]).column("nope_layers").to_pylist() == [[3, 7]]
    with pytest.raises(KeyError, match="not_a_column"):
        to_batch(ROTATION, {"layer": 0, "not_a_column": 1})


def test_staging_keeps_row_order_across_dicts_and_arrow_batches(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    monkeypatch.setattr(store.Staging, "ROW_GROUP_ROWS", 4)
    staging = store.Staging(tmp_path, "toy")
    with pytest.raises(KeyError, match="bogus"):
        staging.add(ROTATION, {"layer": 0, "head": 0, "bogus": 1})
    staging.add(ROTATION, {"layer": 0, "head": 0})
    staging.write(ROTATION, to_batch(ROTATION, {"layer": 0, "head": 1}))
    for h in range(2, 7):
        staging.add(ROTATION, {"layer": 0, "head": h})
    staging.close()
    f = pq.ParquetFile(staging.dir / "rotation" / store.DATA)
    assert f.read().column("head").to_pylist() == list(range(7))
    assert staging.rows["rotation"] == 7 and f.metadata.num_row_groups == 2  # 4 rows, then the rest
    staging.discard()


def test_staging_splits_a_whole_table_into_row_groups_of_about_the_size(tmp_path, monkeypatch):
    # A model computed on a cluster's worker reaches Staging as whole tables: its files get row
    # groups of about ROW_GROUP_ROWS, as a local ingest's do, not one group per table.
    import pyarrow.parquet as pq

    monkeypatch.setattr(store.Staging, "ROW_GROUP_ROWS", 1000)
    staging = store.Staging(tmp_path, "toy")
    rows = [{"layer": 0, "head": h} for h in range(5500)]
    staging.write(ROTATION, pa.Table.from_batches([to_batch(ROTATION, merge_columns(ROTATION, rows))]))
    staging.write(HEADS, to_batch(HEADS, {"layer": 0, "head": 0}))
    staging.close()
    f = pq.ParquetFile(staging.dir / "rotation" / store.DATA)
    sizes = [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)]
    assert sizes == [1100] * 5 and f.read().column("head").to_pylist() == list(range(5500))
    assert pq.ParquetFile(staging.dir / "heads" / store.DATA).metadata.num_row_groups == 1
    staging.discard()


def _points(h: int, n: int, rng) -> dict:
    cols = {"layer": 0, "head": h, "idx": np.arange(n), "kind": np.array(["q", "k"] * (n // 2) + ["q"] * (n % 2), dtype=object),
            "position": np.arange(n), "pc0": rng.random(n), "pc1": np.where(rng.random(n) < 0.2, np.nan, rng.random(n))}
    if h % 3 == 0:
        cols["c0"] = rng.random(n)  # absent from the other heads: NULL there
    return cols


# Heads of these sizes, in chunks of 1000 rows: a row group as soon as 1000 are held, the rest at close.
_SIZES, _GROUPS = [400, 0, 700, 300, 500, 900, 50], [(0, 3), (3, 6), (6, 7)]


def _reference_file(path, table, groups: list[list[dict]] | None) -> bytes:
    """What Staging must write, made independently: one zstd writer, a row group per chunk, each head converted alone."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, table.arrow_schema, compression="zstd", use_dictionary=list(table.dictionary_columns)) as w:
        for chunk in groups or []:
            data = _one_by_one(table, chunk)
            w.write_table(data, row_group_size=max(1000, data.num_rows))
    return path.read_bytes()


def test_staging_writes_one_row_group_per_chunk_byte_for_byte(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    heads = [_points(h, n, rng) for h, n in enumerate(_SIZES)]
    monkeypatch.setattr(store.Staging, "ROW_GROUP_ROWS", 1000)
    staging = store.Staging(tmp_path / "home", "toy")
    for h, cols in enumerate(heads):
        staging.add(POINTS, cols)
        if h == 2:  # Arrow rows among the dicts keep their place
            staging.write(ROTATION, to_batch(ROTATION, {"layer": 0, "head": h}))
        else:
            staging.add(ROTATION, {"layer": 0, "head": h})
    staging.close()
    f = pq.ParquetFile(staging.dir / "points" / store.DATA)
    assert [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)] == [1100, 1700, 50]
    ref = tmp_path / "ref.parquet"
    assert (staging.dir / "points" / store.DATA).read_bytes() == _reference_file(ref, POINTS, [heads[a:b] for a, b in _GROUPS])
    rotation = [[{"layer": 0, "head": h} for h in range(len(heads))]]
    assert (staging.dir / "rotation" / store.DATA).read_bytes() == _reference_file(ref, ROTATION, rotation)
    assert (staging.dir / "heads" / store.DATA).read_bytes() == _reference_file(ref, HEADS, None)  # no rows: no row group
    assert (staging.rows["points"], staging.rows["rotation"], staging.rows["heads"]) == (sum(_SIZES), len(heads), 0)
    staging.discard()


def test_arrow_rows_chunk_rows_as_staging_does(tmp_path, monkeypatch):
    # A cluster's worker holds a model's rows in ArrowRows: the same rows, chunked alike.
    import pyarrow.parquet as pq

    from qkdb.warehouse.batches import ArrowRows

    rng = np.random.default_rng(3)
    heads = [_points(h, n, rng) for h, n in enumerate(_SIZES)]
    monkeypatch.setattr(ArrowRows, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(store.Staging, "ROW_GROUP_ROWS", 1000)
    rows, staging = ArrowRows(), store.Staging(tmp_path, "toy")
    for cols in heads:
        rows.add(POINTS, cols)
        staging.add(POINTS, cols)
    with pytest.raises(KeyError, match="bogus"):
        rows.add(POINTS, {"bogus": 1})
    staging.close()
    held = rows.tables()
    assert list(held) == ["points"]
    assert [b.num_rows for b in held["points"].to_batches()] == [1100, 1700, 50]
    assert held["points"].equals(pq.read_table(staging.dir / "points" / store.DATA))
    assert held["points"].equals(_one_by_one(POINTS, heads))
    staging.discard()


_CASES = [
    (pa.float64(), [0.5, None, float("nan"), -1e300]),
    (pa.float64(), np.array([1.0, np.nan, 3.0])),
    (pa.float64(), np.arange(4, dtype=np.int32)),
    (pa.int32(), [1, None, -7]),
    (pa.int32(), np.array([4, 5], dtype=np.int64)),
    (pa.int64(), [2**40, 0]),
    (pa.int64(), np.array([None, 3], dtype=object)),
    (pa.bool_(), [True, None, False, True, True, False, False, True, True]),
    (pa.bool_(), np.array([False, True])),
    (pa.string(), ["q", None, "k", "", "é∂"]),
    (pa.string(), np.array(["eig", None], dtype=object)),
    (pa.timestamp("us", tz="UTC"), [dt.datetime(2026, 11, 21, 9, 30, 1, 250, tzinfo=dt.timezone.utc), None,
                                     dt.datetime(1999, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=-5)))]),
    (pa.list_(pa.int32()), [[3, 7], None, [], np.array([1, 2])]),
    (pa.int32(), []),
    (pa.string(), []),
]


@pytest.mark.parametrize(("type", "values"), _CASES, ids=lambda v: str(v)[:30])
def test_arrow_array_equals_pyarrow(type, values):
    # pa.array is the reference (NaN is NULL in float columns, as to_batch promises).
    ref_values = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if pa.types.is_floating(type):
        ref_values = [None if v is None or v != v else v for v in ref_values]
    if pa.types.is_list(type):
        ref_values = [None if v is None else list(v) for v in ref_values]
    got = arrow_array(values, type)
    assert got.type == type
    assert got.equals(pa.array(ref_values, type=type)), (got, ref_values)


def test_arrow_array_leaves_wrong_kinds_to_pyarrow():
    # Floats in an int column, numbers in a string column: whatever pyarrow does, not a guess.
    assert arrow_array([1.5, 2.0], pa.int32()).equals(pa.array([1.5, 2.0], pa.int32()))
    floats = np.array([0.0, 1.0, np.nan])
    assert arrow_array(floats, pa.bool_()).equals(pa.array(floats, pa.bool_()))
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        arrow_array([1, "a"], pa.string())


def test_ingest_parent_never_imports_pandas(tmp_path):
    # pyarrow imports pandas on its first pa.array (~0.2 s of CPU): the parent builds from buffers.
    import subprocess
    import sys

    from qkdb.ingest.capture.simulate import simulate

    data, home = simulate(tmp_path / "data", layers=2, q_heads=2, kv_heads=1, head_dim=16, vectors=300), tmp_path / "home"
    code = (
        "import sys\n"
        "from qkdb import api\n"
        f"api.ingest({str(data)!r}, model='toy', home={str(home)!r}, workers=1, points=16)\n"
        f"api.ingest({str(data)!r}, model='toy', home={str(home)!r}, workers=1, points=16)  # unchanged\n"
        f"api.ingest({str(data)!r}, model='toy', home={str(home)!r}, workers=1, points=0, complement=False, force=True)\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"

"""Per-head column dicts staged in bulk give exactly the rows of one conversion per head."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from qkdb.warehouse import store
from qkdb.warehouse.batches import merge_columns, to_batch
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

"""Staging.adopt: a model's table staged from a whole parquet file (what `qkdb pull` does), generic over the schema."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qkdb
from qkdb.errors import EXIT_CODES, WarehouseError
from qkdb.warehouse import TABLES, store

FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2, workers=1)


@pytest.fixture
def source(dataset, tmp_path):
    home = tmp_path / "source"
    qkdb.ingest(dataset, "toy", home=home, **FACTS)
    return home


def _stage_all(home, model, files):
    staging = store.Staging(home, model)
    try:
        for name, f in files.items():
            staging.adopt(TABLES[name], f)
        staging.close()
        store.publish(staging)
    except BaseException:
        staging.discard()
        raise


def test_a_file_with_the_schema_is_kept_byte_for_byte(source, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    files = {n: store.current_file(source, "toy", n) for n, t in TABLES.items() if t.versioned}
    _stage_all(home, "toy", files)
    for name, f in files.items():
        assert store.current_file(home, "toy", name).read_bytes() == f.read_bytes()
    con = qkdb.connect(home)
    try:
        assert con.sql("select count(*) from head_metrics").fetchall() == [(8,)]
    finally:
        con.close()


def test_a_file_of_an_older_schema_gets_the_newer_columns_as_null(source, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    old = tmp_path / "old-rotation.parquet"
    full = pq.read_table(store.current_file(source, "toy", "rotation"))
    pq.write_table(full.drop(["b_method", "drift_norm"]), old)
    _stage_all(home, "toy", {"rotation": old})
    got = pq.read_table(store.current_file(home, "toy", "rotation"))
    assert got.schema.equals(TABLES["rotation"].arrow_schema)
    assert got.column("b_method").null_count == len(got) == 8
    assert got.column("bias_strength").to_pylist() == full.column("bias_strength").to_pylist()
    # (the tables the file set did not name are empty, as an ingest's close leaves them)
    assert pq.read_table(store.current_file(home, "toy", "heads")).num_rows == 0


def test_a_column_this_qkdb_does_not_know_is_refused(source, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    newer = tmp_path / "newer-rotation.parquet"
    full = pq.read_table(store.current_file(source, "toy", "rotation"))
    pq.write_table(full.append_column("from_the_future", pa.array([1.0] * len(full))), newer)
    with pytest.raises(WarehouseError) as err:
        _stage_all(home, "toy", {"rotation": newer})
    assert err.value.exit_code == EXIT_CODES["input"] and "from_the_future" in str(err.value) and "upgrade qkdb" in str(err.value)
    assert not store.is_ingested(home, "toy") and not list((home / ".staging").iterdir())

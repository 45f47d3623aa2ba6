"""The models index: every model's ``models`` row in one file, exact through publishes, removals and rewritten files."""

from __future__ import annotations

import os
import shutil

import pyarrow.parquet as pq

import qkdb
from qkdb import api
from qkdb.warehouse import model_index, store

from helpers.datasets import make_dataset

FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2)


def _view_rows(home) -> dict[str, dict]:
    con = qkdb.connect(home)
    try:
        con.execute("set TimeZone = 'UTC'")
        cur = con.execute("select * from models order by model")
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r)) for r in cur.fetchall()}
    finally:
        con.close()


def test_the_index_holds_the_views_rows_through_publish_reingest_and_removal(tmp_path, home):
    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    assert model_index.model_rows(home) == _view_rows(home)
    first = pq.read_table(model_index.path(home)).column(model_index.VERSION).to_pylist()
    # Checked again without a change: the same file, not rewritten.
    mtime = os.stat(model_index.path(home)).st_mtime_ns
    assert model_index.model_rows(home) == _view_rows(home)
    assert os.stat(model_index.path(home)).st_mtime_ns == mtime
    # A re-ingest publishes a new version of one model: its row (and only its) is read again.
    qkdb.ingest(make_dataset(tmp_path / "ds2", seed=7), "toy-b", workers=1, family="Other", gqa_ratio=2, n_layers=2)
    rows = model_index.model_rows(home)
    assert rows == _view_rows(home) and rows["toy-b"]["family"] == "Other"
    after = pq.read_table(model_index.path(home)).column(model_index.VERSION).to_pylist()
    assert after[0] == first[0] and after[1] != first[1]
    api.remove("toy-a", home=home)
    assert list(model_index.model_rows(home)) == ["toy-b"] == list(_view_rows(home))


def test_a_models_file_rewritten_in_place_is_read_again(dataset, home):
    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    assert model_index.model_rows(home)["toy"]["family"] == "Toy"
    f = store.current_file(home, "toy", "models")
    t = pq.read_table(f)
    i = t.column_names.index("family")
    pq.write_table(t.set_column(i, t.schema.field(i), [["Edited by hand"]]), f)
    assert model_index.model_rows(home)["toy"]["family"] == "Edited by hand"
    assert model_index.model_rows(home) == _view_rows(home)


def test_without_a_writable_index_the_models_are_read_from_their_files(dataset, home, runner):
    from qkdb.cli.app import app

    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    shutil.rmtree(home / model_index.FOLDER)  # (the ingest made it, for the head_metrics index)
    (home / model_index.FOLDER).write_text("not a folder")  # the index cannot be written
    assert model_index.ensure(home) is None and model_index.model_rows(home) is None
    con = qkdb.connect(home)
    try:
        assert not model_index.snapshot_models(con, home)
    finally:
        con.close()
    rows = {r["model"]: r for r in api.models_overview_rows(home) if r["ingested"]}
    assert list(rows) == ["toy"] and rows["toy"]["family"] == "Toy" and rows["toy"]["heads"] > 0
    for command in (["models", "--ingested", "-f", "json"], ["findings"], ["info"]):
        out = runner.invoke(app, command)
        assert out.exit_code == 0, (command, out.stderr)


def test_a_restricted_connection_keeps_its_models(tmp_path, home):
    from qkdb.warehouse import restrict_models, snapshot_models

    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    con = qkdb.connect(home)
    try:
        restrict_models(con, ["toy-b"])
        assert not snapshot_models(con, home)
        assert con.execute("select model from models").fetchall() == [("toy-b",)]
    finally:
        con.close()


def test_a_new_schema_file_rebuilds_the_whole_index(dataset, home):
    # A catalog rebuilt by another qkdb writes a new schema file: rows kept from before would lack its
    # columns (or carry their old types), so every row is read again.
    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    model_index.model_rows(home)
    before = pq.read_table(model_index.path(home)).column(model_index.VERSION).to_pylist()
    schema = home / model_index._SCHEMA
    st = os.stat(schema)
    os.utime(schema, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert model_index.model_rows(home) == _view_rows(home)
    after = pq.read_table(model_index.path(home)).column(model_index.VERSION).to_pylist()
    assert after != before and after[0].rsplit("/", 1)[-1] != before[0].rsplit("/", 1)[-1]


def test_the_reports_snapshot_takes_the_models_from_the_index_and_keeps_a_restriction(tmp_path, home):
    from qkdb.warehouse import restrict_models, snapshot

    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    expected = _view_rows(home)
    con = qkdb.connect(home, read_only=True)
    try:
        con.execute("set TimeZone = 'UTC'")
        snapshot(con, home=home)
        kinds = dict(con.execute(
            "select table_name, table_type from information_schema.tables where table_catalog = 'temp'").fetchall())
        assert kinds["models"] == "LOCAL TEMPORARY" and kinds["head_metrics"] == "LOCAL TEMPORARY"
        cur = con.execute("select * from models order by model")
        names = [d[0] for d in cur.description]
        assert {r[0]: dict(zip(names, r)) for r in cur.fetchall()} == expected
        assert con.execute("select count(distinct model) from head_metrics").fetchall()[0][0] == 2
    finally:
        con.close()
    con = qkdb.connect(home, read_only=True)
    try:
        restrict_models(con, ["toy-a"])
        snapshot(con, home=home)
        assert con.execute("select model from models").fetchall() == [("toy-a",)]
        assert con.execute("select distinct model from head_metrics").fetchall() == [("toy-a",)]
    finally:
        con.close()

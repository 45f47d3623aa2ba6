"""The head_metrics index: every head's row in one file, equal to the view's through publishes, removals and rewritten files."""

from __future__ import annotations

import csv
import io
import os

import pyarrow.parquet as pq
import pytest

import qkdb
from qkdb import api
from qkdb.warehouse import head_index, store

from helpers.datasets import make_dataset

FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2)
ORDER = "order by model, layer, head"


def _rows(con, source: str) -> list[tuple]:
    return con.execute(f"select * from {source} {ORDER}").fetchall()


def _view_and_index(home) -> tuple[list[tuple], list[tuple], bool]:
    """The catalog view's rows, then the rows a shadowed connection reads, and whether it was shadowed."""
    con = qkdb.connect(home, read_only=True)
    try:
        view = _rows(con, "head_metrics")
        shadowed = head_index.shadow_head_metrics(con, home)
        cols_view = [d[0] for d in con.execute("select * from qk.main.head_metrics limit 0").description]
        cols_temp = [d[0] for d in con.execute("select * from head_metrics limit 0").description]
        assert cols_temp == cols_view
        return view, _rows(con, "head_metrics"), shadowed
    finally:
        con.close()


def _stamps(home) -> dict[str, str]:
    rows = pq.read_table(head_index.path(home), columns=["model", head_index.VERSION]).to_pylist()
    return {r["model"]: r[head_index.VERSION] for r in rows}


def test_the_index_holds_the_views_rows_through_publish_reingest_and_removal(tmp_path, home):
    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    view, index, shadowed = _view_and_index(home)
    assert shadowed and index == view and len({r[0] for r in view}) == 2
    first = _stamps(home)
    mtime = os.stat(head_index.path(home)).st_mtime_ns
    assert _view_and_index(home)[1] == view  # checked again, nothing changed: not rewritten
    assert os.stat(head_index.path(home)).st_mtime_ns == mtime
    # A re-ingest publishes a new version of one model: only its rows are computed again.
    qkdb.ingest(make_dataset(tmp_path / "ds2", seed=7), "toy-b", workers=1, family="Other", gqa_ratio=2, n_layers=2)
    view, index, shadowed = _view_and_index(home)
    assert shadowed and index == view and {r[1] for r in view if r[0] == "toy-b"} == {"Other"}
    second = _stamps(home)
    assert second["toy-a"] == first["toy-a"] and second["toy-b"] != first["toy-b"]
    api.remove("toy-a", home=home)
    view, index, shadowed = _view_and_index(home)
    assert shadowed and index == view and {r[0] for r in view} == {"toy-b"}


def test_a_table_file_rewritten_in_place_is_read_again(dataset, home):
    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    _view_and_index(home)
    f = store.current_file(home, "toy", "rotation")
    t = pq.read_table(f)
    i = t.column_names.index("bias_strength")
    pq.write_table(t.set_column(i, t.schema.field(i), [[123.0] * t.num_rows]), f)
    view, index, shadowed = _view_and_index(home)
    assert shadowed and index == view
    con = qkdb.connect(home, read_only=True)
    try:
        head_index.shadow_head_metrics(con, home)
        assert con.execute("select min(bias_strength), max(bias_strength) from head_metrics").fetchall() == [(123.0, 123.0)]
    finally:
        con.close()


def test_a_restricted_connection_reads_its_own_models(tmp_path, home):
    from qkdb.warehouse import restrict_models

    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    con = qkdb.connect(home, read_only=True)
    try:
        restrict_models(con, ["toy-b"])
        assert not head_index.shadow_head_metrics(con, home)
        assert con.execute("select distinct model from head_metrics").fetchall() == [("toy-b",)]
    finally:
        con.close()


def test_without_a_writable_index_the_view_serves(dataset, home, runner):
    from qkdb.cli.app import app

    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    assert head_index.path(home).is_file()  # (the ingest's refresh of the findings made it)
    head_index.path(home).unlink()
    head_index.path(home).mkdir()  # a folder where the file would go: it cannot be written
    con = qkdb.connect(home, read_only=True)
    try:
        assert not head_index.shadow_head_metrics(con, home)
        assert con.execute("select count(*) from head_metrics").fetchall()[0][0] > 0
    finally:
        con.close()
    out = runner.invoke(app, ["query", "select count(*) as n from taxonomy", "-f", "csv"])
    assert out.exit_code == 0, out.stderr
    assert int(out.stdout.splitlines()[1]) > 0


def test_qkdb_query_reads_a_finding_view_through_the_index(tmp_path, home, runner):
    from qkdb.cli.app import app

    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    sql = "select model, count(*) as n, sum(bias_strength) as s from head_metrics group by model order by model"
    con = qkdb.connect(home, read_only=True)
    try:
        expected = con.execute(sql).fetchall()
    finally:
        con.close()
    if head_index.path(home).exists():
        head_index.path(home).unlink()
    out = runner.invoke(app, ["query", sql, "-f", "csv"])
    assert out.exit_code == 0, out.stderr
    assert head_index.path(home).is_file()  # the query made it
    got = list(csv.reader(io.StringIO(out.stdout)))[1:]
    assert [(m, int(n)) for m, n, _ in got] == [(m, n) for m, n, _ in expected]
    assert [float(s) for *_, s in got] == pytest.approx([s for *_, s in expected], rel=1e-12)


def test_only_a_query_naming_a_finding_view_uses_the_index(dataset, home):
    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    con = qkdb.connect(home, read_only=True)
    try:
        assert head_index.reads_head_metrics(con, "select * from TAXONOMY")
        assert head_index.reads_head_metrics(con, "from head_metrics limit 1")
        assert not head_index.reads_head_metrics(con, "select 1")
        assert not head_index.reads_head_metrics(con, "select * from heads join pca using (model, layer, head)")
    finally:
        con.close()


def _pca_view_and_index(home) -> tuple[list[tuple], list[tuple], bool]:
    con = qkdb.connect(home, read_only=True)
    try:
        view = con.execute("select * from pca order by model, layer, head, pc").fetchall()
        shadowed = head_index.shadow_pca(con, home)
        assert [d[0] for d in con.execute("select * from pca limit 0").description] == \
            [d[0] for d in con.execute("select * from qk.main.pca limit 0").description]
        return view, con.execute("select * from pca order by model, layer, head, pc").fetchall(), shadowed
    finally:
        con.close()


def test_the_pca_index_holds_the_tables_rows_through_publish_reingest_and_removal(tmp_path, home):
    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    view, index, shadowed = _pca_view_and_index(home)
    assert shadowed and index == view and len(view) > 0
    stamps = lambda: {r["model"]: r[head_index.VERSION] for r in pq.read_table(  # noqa: E731
        head_index.path(home, head_index.PCA), columns=["model", head_index.VERSION]).to_pylist()}
    first = stamps()
    assert set(first) == {"toy-a", "toy-b"}
    qkdb.ingest(make_dataset(tmp_path / "ds2", seed=7), "toy-b", workers=1, **FACTS)
    view, index, shadowed = _pca_view_and_index(home)
    assert shadowed and index == view
    second = stamps()
    assert second["toy-a"] == first["toy-a"] and second["toy-b"] != first["toy-b"]
    api.remove("toy-a", home=home)
    view, index, shadowed = _pca_view_and_index(home)
    assert shadowed and index == view and set(stamps()) == {"toy-b"}


def test_the_reports_snapshot_reads_pca_from_its_index_and_a_restricted_one_its_own(tmp_path, home):
    from qkdb import warehouse

    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, workers=1, **FACTS)
    plain = qkdb.connect(home, read_only=True)
    try:
        plain.execute("set threads = 1")  # (as the snapshot's queries: sums in one order)
        expected = plain.execute("select * from explained_variance").fetchall()
    finally:
        plain.close()
    con = qkdb.connect(home, read_only=True)
    try:
        warehouse.snapshot(con, home=home)
        view_sql = con.execute("select sql from duckdb_views() where temporary and view_name = 'pca'").fetchall()
        assert view_sql and head_index.PCA.data in view_sql[0][0]
        assert con.execute("select * from explained_variance").fetchall() == expected
    finally:
        con.close()
    con = qkdb.connect(home, read_only=True)
    try:
        warehouse.restrict_models(con, ["toy-b"])
        warehouse.snapshot(con, home=home)
        assert con.execute("select distinct model from pca").fetchall() == [("toy-b",)]
    finally:
        con.close()


@pytest.fixture(scope="module")
def two_samples(tmp_path_factory):
    """The bundled SmolLM2 sample ingested under two names (every per-head table has rows: it is a
    capture with RoPE planes and each query's softmax normaliser)."""
    from qkdb.ingest.capture.sniff_sample import sample_path

    home = tmp_path_factory.mktemp("samples") / "home"
    with sample_path() as root:
        for name in ("smol-a", "smol-b"):
            qkdb.ingest(root, name, home=home, workers=2, points=0)
    return home, root


@pytest.mark.parametrize("which", head_index.TABLES + head_index.REPORT_TABLES, ids=lambda t: t.view)
def test_each_per_head_tables_index_holds_the_tables_rows(two_samples, which):
    # (how an index follows publishes, re-ingests and removals is ensure()'s, tested above for two of them)
    home, _ = two_samples

    def both():
        con = qkdb.connect(home, read_only=True)
        try:
            order = f"order by {which.order}"
            view = con.execute(f"select * from {which.view} {order}").fetchall()
            shadowed = head_index.shadow_tables(con, home, (which,))
            index = con.execute(f"select * from {which.view} {order}").fetchall()
            sql = con.execute("select sql from duckdb_views() where temporary and view_name = ?", [which.view]).fetchall()
            return view, index, which.view in shadowed and bool(sql) and which.data in sql[0][0]
        finally:
            con.close()

    view, index, shadowed = both()
    assert shadowed and index == view and len(view) > 0 and {r[0] for r in view} == {"smol-a", "smol-b"}


def test_the_refresh_and_the_report_read_the_per_head_tables_from_their_indexes(two_samples, tmp_path):
    from qkdb import warehouse

    home, _ = two_samples
    api.refresh_findings(home)
    for which in head_index.TABLES:  # (the refresh brought each up to date)
        assert head_index.path(home, which).is_file(), which.view
    con = qkdb.connect(home, read_only=True)
    try:
        plain = con.execute("select * from rotation_planes order by model, layer, head").fetchall()
        warehouse.snapshot(con, home=home)
        shadowed = {r[0] for r in con.execute("select view_name from duckdb_views() where temporary").fetchall()}
        assert {t.view for t in head_index.TABLES + head_index.REPORT_TABLES} <= shadowed
        assert con.execute("select * from rotation_planes order by model, layer, head").fetchall() == plain
    finally:
        con.close()


def test_an_index_of_a_table_without_rows_is_current_and_not_rewritten(dataset, home):
    # A capture without the softmax normaliser has no attention_mass rows: its stamp is kept in the
    # index file's metadata, so a second check finds the index current (it was rebuilt every time).
    which = next(t for t in head_index.TABLES if t.view == "attention_mass")
    qkdb.ingest(dataset, "toy", workers=1, **FACTS)  # (its refresh brings the index up to date)
    target = head_index.path(home, which)
    mtime = os.stat(target).st_mtime_ns
    con = qkdb.connect(home, read_only=True)
    try:
        assert head_index.ensure(home, con, which) == target
        assert con.execute(f"select count(*) from read_parquet('{target}')").fetchall()[0][0] == 0
    finally:
        con.close()
    assert os.stat(target).st_mtime_ns == mtime


def test_an_index_sorted_within_a_small_memory_cap_is_the_same_file_order_and_the_settings_come_back(
        two_samples, monkeypatch):
    """Issue 48: an index is sorted within INDEX_MEMORY (at 140,100 heads the plasticity profiles'
    sort took 2.46 GB); spilled or not, its rows come in the same order, and the database's own
    memory limit is its own again afterwards."""
    from qkdb.warehouse import model_index

    home, _ = two_samples
    which = head_index.REPORT_TABLES[0]
    target = head_index.path(home, which)

    def written(cap: str | None) -> tuple[list[tuple], str, str]:
        monkeypatch.setattr(model_index, "INDEX_MEMORY", cap)
        target.unlink(missing_ok=True)
        con = qkdb.connect(home, read_only=True)
        try:
            con.execute("set memory_limit = '2GiB'")
            seen = []
            execute = con.execute

            class Watching:  # (the limit DuckDB has while the index is written)
                def __getattr__(self, name):
                    return getattr(con, name)

                def execute(self, sql, *args):
                    if sql.startswith("copy ("):
                        seen.append(execute("select current_setting('memory_limit')").fetchall()[0][0])
                    return execute(sql, *args)

            assert head_index.ensure(home, Watching(), which) == target
            after = execute("select current_setting('memory_limit')").fetchall()[0][0]
            rows = execute(f"select * from read_parquet('{target}')").fetchall()  # (the file's own order)
            return rows, seen[0], after
        finally:
            con.close()

    free, during_free, after_free = written(None)
    capped, during_capped, after_capped = written("16MB")
    assert capped == free and len(free) > 1_000
    assert during_free == after_free == after_capped == "2.0 GiB"
    assert during_capped == "15.2 MiB"  # (16 MB as DuckDB shows it)

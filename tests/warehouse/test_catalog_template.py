"""A new home's catalog is a copy of one built catalog, made the home's own: equal to one built from nothing."""

from __future__ import annotations

import re

import duckdb
import pytest

import qkdb
from qkdb.warehouse import catalog, catalog_template
from qkdb.warehouse.home import catalog_path

FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A user cache dir of this test's own (the template is built in it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "qkdb" / "catalog"


def _sql(text: str) -> str:
    """A view's SQL as DuckDB stores it, with each EXCLUDE list sorted: DuckDB keeps those as a set,
    printed in no fixed order (two builds from nothing differ there too)."""
    return re.sub(r"EXCLUDE \(([^()]*)\)",
                  lambda m: "EXCLUDE (" + ", ".join(sorted(x.strip() for x in m.group(1).split(","))) + ")", text)


def _facts(path) -> dict:
    """Everything a catalog holds: views with their SQL and comments, columns' comments, macros, tables, meta."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        db = con.execute("select current_database()").fetchall()[0][0]
        return {
            "views": [(v, _sql(sql), c) for v, sql, c in con.execute(
                "select view_name, sql, comment from duckdb_views() where database_name = ? order by view_name", [db]).fetchall()],
            "columns": con.execute("select table_name, column_name, column_index, data_type, comment from duckdb_columns() "
                                   "where database_name = ? order by table_name, column_index", [db]).fetchall(),
            "macros": con.execute("select function_name, macro_definition, parameters from duckdb_functions() "
                                  "where database_name = ? and not internal order by all", [db]).fetchall(),
            "tables": con.execute("select table_name from duckdb_tables() where database_name = ? order by 1", [db]).fetchall(),
            "meta": con.execute("select key, value from qkdb_meta order by key").fetchall(),
        }
    finally:
        con.close()


def test_a_new_homes_catalog_from_the_template_equals_one_built_from_nothing(cache, home, dataset, monkeypatch):
    qkdb.ingest(dataset, "toy", workers=1, points=0, **FACTS)
    assert len(list(cache.glob("*.duckdb"))) == 1  # (the template, built by the first new home)
    copied = _facts(catalog_path(home))
    assert dict(copied["meta"])["home"] == str(home) and catalog_template.META_KEY not in dict(copied["meta"])
    # The same home's catalog built in full.
    catalog_path(home).unlink()
    monkeypatch.setattr(catalog_template, "copy_to", lambda path: None)
    assert catalog.ensure_catalog(home)
    built = _facts(catalog_path(home))
    for part in built:
        assert copied[part] == built[part], part
    assert len(built["views"]) > 50 and str(home) in dict((v, s) for v, s, _ in built["views"])["heads"]
    # And it reads the home's data: the findings of the model ingested.
    con = qkdb.connect()
    try:
        assert con.execute("select count(*) from head_metrics where model = 'toy'").fetchall()[0][0] > 0
    finally:
        con.close()


def test_a_second_home_copies_the_template_and_reads_only_its_own_files(cache, tmp_path, dataset):
    a, b = tmp_path / "a", tmp_path / "b"
    qkdb.ingest(dataset, "toy-a", home=a, workers=1, points=0, **FACTS)
    qkdb.ingest(dataset, "toy-b", home=b, workers=1, points=0, **FACTS)
    for h, other in ((a, "toy-b"), (b, "toy-a")):
        con = qkdb.connect(h)
        try:
            models = {r[0] for r in con.execute("select distinct model from heads").fetchall()}
        finally:
            con.close()
        assert other not in models and len(models) == 1


def test_a_damaged_template_is_dropped_and_the_catalog_built_in_full(cache, home, dataset):
    key = catalog_template.key()
    assert catalog_template.ensure() is not None
    (cache / f"{key}.duckdb").write_bytes(b"not a database" * 100)
    qkdb.ingest(dataset, "toy", workers=1, points=0, **FACTS)
    assert not (cache / f"{key}.duckdb").exists()  # (dropped: the next new home builds it again)
    con = qkdb.connect()
    try:
        assert con.execute("select count(*) from findings").fetchall()[0][0] > 0
    finally:
        con.close()


def test_without_a_writable_cache_the_catalog_is_built_in_full(tmp_path, home, dataset, monkeypatch):
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert catalog_template.ensure() is None
    qkdb.ingest(dataset, "toy", workers=1, points=0, **FACTS)
    assert dict(_facts(catalog_path(home))["meta"])["fingerprint"] == catalog.fingerprint(home)


def _files(folder) -> dict:
    return {f.relative_to(folder).as_posix(): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def test_a_new_homes_schema_files_are_the_templates_and_equal_those_written_in_full(cache, home, dataset, tmp_path):
    qkdb.ingest(dataset, "toy", workers=1, points=0, **FACTS)
    written = tmp_path / "written"
    catalog._write_schema_files(written)
    copied = _files(home / catalog.SCHEMA_DIR)
    assert copied == _files(written / catalog.SCHEMA_DIR)
    assert any(name.endswith("bundled.parquet") for name in copied) and len(copied) > 20
    kept = cache / f"{catalog_template.key()}{catalog_template.SCHEMA_SUFFIX}"
    assert (kept / catalog_template.MANIFEST).is_file()


def test_a_damaged_schema_file_in_the_cache_is_dropped_and_the_files_written_in_full(cache, home, dataset, tmp_path):
    assert catalog_template.ensure() is not None
    kept = cache / f"{catalog_template.key()}{catalog_template.SCHEMA_SUFFIX}"
    victim = next(f for f in sorted(kept.rglob("*.parquet")))
    victim.write_bytes(b"not parquet")
    qkdb.ingest(dataset, "toy", workers=1, points=0, **FACTS)
    # (dropped, and kept again whole by the same ingest's catalog)
    assert victim.read_bytes() != b"not parquet" and victim.read_bytes()[:4] == b"PAR1"
    written = tmp_path / "written"
    catalog._write_schema_files(written)
    assert _files(home / catalog.SCHEMA_DIR) == _files(written / catalog.SCHEMA_DIR)
    con = qkdb.connect()
    try:
        assert con.execute("select count(*) from findings").fetchall()[0][0] > 0
    finally:
        con.close()

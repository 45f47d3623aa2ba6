"""A copied or moved home never reads another home's files: plain DuckDB fails loudly until `qkdb info` re-points it.

The catalog's views name their parquet files absolutely (DuckDB resolves a relative path against the
reader's working directory, never against the database file). These tests open copies with plain
DuckDB in a separate process, from a working directory of its own, with the original still in place:
exactly what a user of the `duckdb` CLI or Python does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import qkdb

FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2)

COUNT = (
    "import duckdb, sys\n"
    "con = duckdb.connect(sys.argv[1], read_only=True)\n"
    "for sql in sys.argv[2:]:\n"
    "    try:\n"
    "        print(con.sql(sql).fetchall()[0][0])\n"
    "    except duckdb.Error as exc:\n"
    "        print('ERROR', exc)\n"
)


def _plain_duckdb(catalog, *sql, cwd):
    """Each statement's first value (or its error) from a plain-DuckDB process started in ``cwd``."""
    done = subprocess.run([sys.executable, "-c", COUNT, str(catalog), *sql], cwd=cwd, capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": ""})
    return done.stdout.splitlines()


def _qkdb(*args, cwd):
    return subprocess.run([sys.executable, "-m", "qkdb", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def original(dataset, tmp_path):
    home = tmp_path / "original"
    qkdb.ingest(dataset, "toy", workers=1, home=home, **FACTS)
    return home


@pytest.fixture
def elsewhere(tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    return cwd


def test_a_copy_fails_loudly_with_the_original_in_place_until_qkdb_info_repoints_it(original, tmp_path, elsewhere):
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, symlinks=True)
    queries = ("select count(*) from rotation", "select count(*) from head_metrics", "select count(*) from models",
               "select count(*) from finding_intervals")
    for line in _plain_duckdb(copy / "qk.duckdb", *queries, cwd=elsewhere):
        assert line.startswith("ERROR") and "has been copied or moved" in line, line
        assert f"built for the warehouse at {original}" in line and f"`qkdb info --home {copy}`" in line
    # The original itself is untouched by the guard.
    assert _plain_duckdb(original / "qk.duckdb", queries[0], cwd=elsewhere) == ["8"]
    # What docs/sharing.md tells the user to run, then the same plain DuckDB line reads the copy.
    done = _qkdb("info", "--home", str(copy), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    qkdb.remove("toy", home=original)  # (so that reading the original would show: it has no rows now)
    assert _plain_duckdb(original / "qk.duckdb", queries[0], cwd=elsewhere) == ["0"]
    assert _plain_duckdb(copy / "qk.duckdb", *queries[:3], cwd=elsewhere) == ["8", "8", "1"]


def test_a_moved_home_fails_loudly_instead_of_reading_nothing(original, tmp_path, elsewhere):
    moved = tmp_path / "moved"
    os.rename(original, moved)
    (line,) = _plain_duckdb(moved / "qk.duckdb", "select count(*) from rotation", cwd=elsewhere)
    assert line.startswith("ERROR") and "has been copied or moved" in line


def test_the_catalog_opens_through_a_symbolic_link_and_attached_under_another_name(original, tmp_path, elsewhere):
    link = tmp_path / "link"
    link.symlink_to(original)
    assert _plain_duckdb(link / "qk.duckdb", "select count(*) from rotation", cwd=elsewhere) == ["8"]
    attach = (
        "import duckdb, sys\n"
        "con = duckdb.connect()\n"
        "con.execute(f\"attach '{sys.argv[1]}' as w (read_only)\")\n"
        "print(con.sql('select count(*) from w.head_metrics').fetchall()[0][0])\n"
    )
    done = subprocess.run([sys.executable, "-c", attach, str(link / "qk.duckdb")], cwd=elsewhere,
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["8"]


def test_qkdb_itself_reads_a_copy_as_its_own(original, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, symlinks=True)
    qkdb.remove("toy", home=original)
    con = qkdb.connect(copy)
    try:
        assert con.sql("select count(*) from rotation").fetchall()[0][0] == 8
    finally:
        con.close()

"""Every model's ``models`` row in one file, so that the commands that read them all do not open one file per model.

``qkdb models``, ``qkdb info`` and ``qkdb findings`` read every ingested model's ``models`` row (its
facts, its publish time for the findings' stamps, its RoPE facts for the staleness check). Through
the catalog's view that is one parquet file per model: ~0.2–0.5 s on 467 models (140,000 heads),
paid by each query that reads the view. The index, ``<home>/.index/models.parquet``, holds those
rows with the stamp of the file each was read from (``_version``: the version ``.store/<model>/current``
links to, and the file's time and size). A published version is never rewritten (a publish makes a
new one, a removal drops the link), so a row is exact for as long as its model's stamp is unchanged:
:func:`ensure` compares the stamps (a directory listing and a stat a model, milliseconds) with the
index and reads only the models whose stamp differs, from that version's own folder (never through
``current``, which a publish may switch meanwhile), then writes the index again. Nothing else writes it: publishes and removals
need not know about it, and a home this process cannot write is read without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from qkdb.warehouse.home import STORE

if TYPE_CHECKING:
    import duckdb

FOLDER = ".index"
DATA = "models.parquet"
VERSION = "_version"
_TABLE = "models"
_FILE = "data.parquet"
# The schema file the catalog writes (catalog.SCHEMA_DIR): it types every column of the table, so
# that the index has the view's columns even where no model's file has all of them.
_SCHEMA = Path(".schema") / _TABLE / "model=_" / "schema.parquet"


def path(home: Path) -> Path:
    return home / FOLDER / DATA


def version_files(home: Path, tables: tuple[str, ...]) -> dict[str, tuple[str, list[str | None]]]:
    """Model -> (the version ``.store/<model>/current`` links to, ``<mtime ns>.<bytes>`` of each table's file, None where missing).

    A listing and a stat a table and model. Models without that link (not a model's folder, or one
    being removed) are left out: the catalog's views do not show them either.
    """
    store = str(home / STORE)
    out: dict[str, tuple[str, list[str | None]]] = {}
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(store):
            try:
                version = os.readlink(os.path.join(entry.path, "current"))
            except OSError:
                continue
            files: list[str | None] = []
            for table in tables:
                try:
                    st = os.stat(os.path.join(store, entry.name, version, table, _FILE))
                    files.append(f"{st.st_mtime_ns}.{st.st_size}")
                except OSError:
                    files.append(None)
            out[entry.name] = (version, files)
    return out


def current_versions(home: Path) -> dict[str, str]:
    """Model -> the stamp of its current ``models`` file: ``<version>/<mtime ns>.<bytes>/<schema file's stamp>``.

    A published version is never rewritten by qkdb; the file's time and size catch one rewritten
    anyway (restored from a backup, edited by hand), so that the index never outlives the file it copied.
    """
    # The catalog's schema file types the index's columns: a new one (a catalog rebuilt by another
    # qkdb) makes every row's stamp differ, so that the index is rebuilt with the columns it types.
    try:
        st = os.stat(home / _SCHEMA)
    except OSError:
        return {}
    schema = f"{st.st_mtime_ns}.{st.st_size}"
    return {m: f"{version}/{files[0]}/{schema}" for m, (version, files) in version_files(home, (_TABLE,)).items()
            if files[0] is not None}


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


# The key, in an index file's parquet key-value metadata, of every model's stamp (JSON): a model
# without rows in a table (no sinks in a capture without the normaliser) has its stamp there too.
_STAMPS_KEY = "qkdb_stamps"


def indexed_stamps(con: duckdb.DuckDBPyConnection, target: Path) -> dict[str, str]:
    """Model -> the stamp its rows in the index ``target`` were read with ({} without a readable index)."""
    import duckdb

    if not target.is_file():
        return {}
    try:
        kv = con.execute(f"select value from parquet_kv_metadata({_quote(str(target))}) where key = ?",
                         [_STAMPS_KEY.encode()]).fetchall()
        if kv:
            return json.loads(kv[0][0].decode())
        return dict(con.execute(f"select distinct model, {VERSION} from read_parquet({_quote(str(target))})").fetchall())
    except (duckdb.Error, ValueError):  # unreadable (another layout, a torn copy): rebuilt whole
        return {}


# What DuckDB may hold while it sorts an index's rows. An index is written again whole whenever a
# model changes, and its sort holds every row: at 140,100 heads (benchmarks/latency.py) the rotation
# planes' 2.1 s took 1.39 GB and the plasticity profiles' 3.3 s 2.46 GB; within 500 MB they take 3.5 s
# and 6.1 s and ~0.5-0.7 GB (issue 48: every command within 1 GB at study scale).
INDEX_MEMORY = "500MB"


def write_index(con: duckdb.DuckDBPyConnection, select: str, target: Path, stamps: dict[str, str] | None = None) -> Path | None:
    """Replace the index ``target`` with the rows of ``select``, atomically; None when it cannot be written.

    ``stamps`` (model -> stamp, every model the index stands for) go into the file's metadata, so that
    a model without rows is known to be current as well. The rows are sorted within
    :data:`INDEX_MEMORY` (spilling to the database's temporary folder past it).
    """
    import duckdb

    from qkdb.warehouse.duckdb_settings import spills_to_disk, temporarily

    tmp = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    kv = f", kv_metadata {{{_STAMPS_KEY}: {_quote(json.dumps(stamps, sort_keys=True))}}}" if stamps is not None else ""
    try:
        target.parent.mkdir(exist_ok=True)
        with temporarily(con, memory_limit=INDEX_MEMORY if spills_to_disk(con) else None):
            con.execute(f"copy ({select}) to {_quote(str(tmp))} (format parquet{kv})")
        os.replace(tmp, target)
    except (OSError, duckdb.Error):
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return None
    return target


def ensure(home: Path, con: duckdb.DuckDBPyConnection | None = None) -> Path | None:
    """The index of ``home``, brought up to date with the published models; None when it cannot be.

    None when the catalog's schema file is missing (no catalog yet), when a version's file cannot be
    read (a publish or removal under way) or when the index cannot be written (a home this process
    may only read): the callers then read the models' own files. ``con`` is any DuckDB connection
    (default: a new in-memory one); nothing is read through its catalog.
    """
    import duckdb

    versions = current_versions(home)
    target, schema = path(home), home / _SCHEMA
    if not versions or not schema.is_file():
        return None
    own = con is None
    if own:
        con = duckdb.connect()
    try:
        have = indexed_stamps(con, target)
        if have == versions:
            return target
        kept = [m for m, v in versions.items() if have.get(m) == v]
        new = {m: v for m, v in sorted(versions.items()) if have.get(m) != v}
        # Each file by its version's own path (a publish may switch `current` meanwhile), the model
        # and stamp joined on by that path.
        paths = {m: str(home / STORE / m / v.split("/")[0] / _TABLE / _FILE) for m, v in new.items()}
        files = ", ".join(_quote(f) for f in [str(schema), *paths.values()])
        # (The schema file's zero rows type the columns; a removal alone reads it with no model.)
        stamps = ", ".join(f"({_quote(paths[m])}, {_quote(m)}, {_quote(v)})" for m, v in new.items()) or "(null, null, null)"
        fresh = (
            f"select f.* exclude (filename), s.model, s.{VERSION} "
            f"from read_parquet([{files}], union_by_name = true, filename = true, hive_partitioning = false) f "
            f"join (values {stamps}) s(path, model, {VERSION}) on f.filename = s.path"
        )
        if kept:
            keep = ", ".join(_quote(m) for m in kept)
            old = f"select * from read_parquet({_quote(str(target))}) where model in ({keep})"
            fresh = f"{old} union all by name {fresh}"
        return write_index(con, f"{fresh} order by model", target, versions)
    finally:
        if own:
            con.close()


def model_rows(home: Path) -> dict[str, dict] | None:
    """Model -> its ``models`` row (column -> value), for every published model; None when the index cannot be used.

    Read with DuckDB, timestamps in UTC (as pyarrow gives them; its conversion of zoned timestamps
    to Python would import pandas, ~0.3 s).
    """
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("set TimeZone = 'UTC'")
        index = ensure(home, con)
        if index is None:
            return None
        cur = con.execute(f"select * exclude ({VERSION}) from read_parquet({_quote(str(index))}) order by model")
        names = [d[0] for d in cur.description]
        return {r["model"]: r for r in (dict(zip(names, row)) for row in cur.fetchall())}
    except duckdb.Error:
        return None
    finally:
        con.close()


def shadowed(con: duckdb.DuckDBPyConnection, names: tuple[str, ...]) -> bool:
    """Whether ``con`` has a temporary view or table of one of these names (its own version of it)."""
    listed = ", ".join(_quote(n) for n in names)
    return bool(con.execute(
        f"select count(*) from duckdb_views() where database_name = 'temp' and view_name in ({listed})"
    ).fetchall()[0][0] or con.execute(
        f"select count(*) from duckdb_tables() where database_name = 'temp' and table_name in ({listed})"
    ).fetchall()[0][0])


def shadow_with(con: duckdb.DuckDBPyConnection, name: str, index: Path, kind: str, order: str = "") -> bool:
    """Shadow the catalog's ``name`` on ``con`` with a temporary ``kind`` ('table' or 'view') over ``index``.

    It has the catalog's columns, in their order; False (nothing made) when the catalog has no such
    view or the index lacks one of its columns (a catalog newer than the index).
    """
    import duckdb

    db = con.execute("select current_database()").fetchall()[0][0]
    cols = [r[0] for r in con.execute(
        "select column_name from duckdb_columns() where database_name = ? and schema_name = 'main' "
        "and table_name = ? order by column_index", [db, name],
    ).fetchall()]
    if not cols:
        return False
    select = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
    try:
        con.execute(f"create temp {kind} {name} as select {select} from read_parquet({_quote(str(index))}) {order}")
    except duckdb.Error:
        return False
    return True


def snapshot_models(con: duckdb.DuckDBPyConnection, home: Path) -> bool:
    """Let ``con`` read the ``models`` rows from the index: a temporary table that shadows the catalog's view.

    The table has the view's columns, in its order, and the rows it would give now. Does nothing
    (False) when the index cannot be brought up to date, or when ``models`` is already shadowed on
    this connection (:func:`~qkdb.warehouse.views.restrict_models`). Like the report's snapshot, the
    connection then reads the models as they were when it was called.
    """
    if shadowed(con, (_TABLE,)):
        return False
    index = ensure(home, con)
    return index is not None and shadow_with(con, _TABLE, index, "table", "order by model")


def published_model_rows(home: Path) -> dict[str, dict]:
    """Model -> its ``models`` row, for every published model: from the index (one file) when it can be
    brought up to date, else from each model's own file."""
    from qkdb.warehouse import store

    models = store.ingested_models(home)
    if not models:
        return {}
    indexed = model_rows(home)
    if indexed is not None:
        return {m: indexed[m] for m in models if m in indexed}
    import pyarrow.parquet as pq

    ingested: dict[str, dict] = {}
    for model in models:
        f = store.current_file(home, model, "models")
        rows = pq.ParquetFile(f).read().to_pylist() if f.exists() else []
        if rows:
            ingested[model] = rows[0]
    return ingested

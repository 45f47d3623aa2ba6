"""The DuckDB catalog ``qk.duckdb``: a view per table over its parquet files, plus the finding views.

Views hold absolute paths (DuckDB resolves relative ones against the reader's working directory,
never against the database file), so the catalog opens from anywhere with plain ``duckdb``. Absolute
paths would make a copied or moved catalog read the *original* home's files, silently; so every table
view also checks that the catalog it belongs to is the file at its recorded place (DuckDB reports a
database's path with symbolic links resolved, as :func:`~qkdb.warehouse.home.resolve_home` does), and
fails with one line saying what to run otherwise (:func:`location_guard`). The catalog is written only when its
fingerprint (format, home, table schemas, view SQL) changes; new models appear without a write
because the globs pick up new partition folders. That keeps ingests from needing DuckDB's
single-writer lock while readers have the catalog open.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import threading
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from qkdb.errors import WarehouseError
from qkdb.warehouse.home import catalog_path, ensure_writable, ingested_models

if TYPE_CHECKING:  # (at run time, imported where used: opening a current catalog needs none of them)
    import duckdb

    from qkdb.warehouse.schema import Table

LOCKS = ".locks"  # (store.LOCKS: the same folder)
CATALOG_FORMAT = 1  # bump when the on-disk layout changes incompatibly
SCHEMA_DIR = ".schema"


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def location_guard(home: Path) -> str:
    """A SQL condition that holds when the catalog of ``home`` is opened at its own place, and fails loudly otherwise.

    DuckDB cannot resolve a view's paths against the database file (a table function takes literals
    only; relative paths follow the reader's working directory), so the views name ``home``'s files
    absolutely. In a copy of the home those names still point at the original: this condition,
    evaluated once per query (an uncorrelated subquery, also when the files match nothing), makes
    such a query fail with one line naming the command to run, instead of reading another home's
    files. ``duckdb_databases()`` lists every attached database with its path (symbolic links
    resolved, as :func:`~qkdb.warehouse.home.resolve_home` does); the catalog passes when the file at
    its recorded place is among them. (The error's text depends on the row, or DuckDB would fold the
    constant ``error()`` call at planning time and fail every query.)
    """
    recorded = _sql_str(str(catalog_path(home)))
    folder = "string_agg(distinct regexp_replace(path, '/[^/]*$', ''), ', ')"
    message = (
        f"{_sql_str(f'qkdb: this catalog was built for the warehouse at {home} and has been copied or moved to ')} "
        f"|| {folder} || {_sql_str(f': its views would read the files of {home}, not its own; run `qkdb info --home ')} "
        f"|| {folder} || {_sql_str('` once (it rebuilds the catalog there), then query again')}"
    )
    return (
        f"(select case when bool_or(path = {recorded}) then true else error({message}) end "
        "from duckdb_databases())"
    )


@functools.lru_cache(maxsize=1)
def _scratch() -> duckdb.DuckDBPyConnection:
    # One in-memory connection to read types with: opening one costs ~25 ms, a table's types none.
    import duckdb

    return duckdb.connect()


@functools.lru_cache(maxsize=None)  # (a connection's worth of work: a figure asks per query)
def _typed_nulls(table: Table) -> str:
    """A zero-row select of the table's columns with their DuckDB types (binds without any file)."""
    from qkdb.warehouse.batches import empty_table

    rel = _scratch().from_arrow(empty_table(table))
    types = {name: str(t) for name, t in zip(rel.columns, rel.dtypes)}
    types.setdefault("model", "VARCHAR")  # (the partition column, not in the files)
    cols = ", ".join(f'cast(null as {types[c.name]}) as "{c.name}"' for c in table.columns)
    return f"(select {cols} limit 0)"


def _view_sql(table: Table, source: str, home: Path) -> str:
    # The zero-row typed select keeps the view bindable when not even the schema file is where the
    # view looks (a moved home): the location guard then says what to run, where DuckDB would have
    # said only that a column is missing.
    cols = ", ".join(f'"{c.name}"' for c in table.columns)
    return f"select {cols} from (select * from {source} union all by name {_typed_nulls(table)}) where {location_guard(home)}"


# In the catalog's qkdb_meta, under ``model_source.<table>``: the SQL of one model's rows of a
# table partitioned by model, with this placeholder for the model's name (the charts read it with
# SQL alone, as they read everything of the warehouse).
MODEL_PLACEHOLDER = "{model}"


def table_view_sql(home: Path, table: Table, model: str | None = None) -> str:
    """The view of a table partitioned by model: every model's file, or with ``model`` that model's only.

    One model's view reads one file where the full view binds every model's (DuckDB reads each
    file's footer to bind ``union_by_name``: ~0.1 s a query at 467 models); its rows are the full
    view's rows of that model. ``model`` must be a valid model name (:func:`store.check_model_name`),
    or :data:`MODEL_PLACEHOLDER` for the template the catalog keeps.
    """
    # The zero-row schema file keeps the view typed when no model is ingested yet, and
    # union_by_name fills columns that older partitions lack with NULL.
    from qkdb.warehouse.store import check_model_name

    if model is None:
        part = "*"
    else:
        part = f"model={model if model == MODEL_PLACEHOLDER else check_model_name(model)}"
    globs = [str(home / SCHEMA_DIR / table.name / "*" / "*.parquet"), str(home / table.name / part / "*.parquet")]
    source = (
        f"read_parquet([{', '.join(_sql_str(g) for g in globs)}], "
        "hive_partitioning = true, union_by_name = true, allow_empty = true, "
        "hive_types = {'model': 'VARCHAR'})"
    )
    return _view_sql(table, source, home)


def derived_view_sql(home: Path, table: Table) -> str:
    # One file for the whole warehouse (not partitioned by model); the schema file types the view
    # before the first publish writes it.
    globs = [str(home / SCHEMA_DIR / table.name / "*.parquet"), str(home / table.name / "*.parquet")]
    source = (
        f"read_parquet([{', '.join(_sql_str(g) for g in globs)}], "
        "hive_partitioning = false, union_by_name = true, allow_empty = true)"
    )
    return _view_sql(table, source, home)


def imported_view_sql(home: Path, table: Table) -> str:
    from qkdb.warehouse import benchmarks

    return f"select * from ({benchmarks.view_sql(home, table, _sql_str)}) where {location_guard(home)}"


def _views_sql(home: Path) -> list[tuple[Table, str]]:
    from qkdb.warehouse.schema import DERIVED, IMPORTED, TABLES

    return ([(t, table_view_sql(home, t)) for t in TABLES.values()]
            + [(t, derived_view_sql(home, t)) for t in DERIVED.values()]
            + [(t, imported_view_sql(home, t)) for t in IMPORTED.values()])


# What the catalog is built from: the table schemas and their documentation, this module's view
# SQL, the finding views, and the code that computes the findings' intervals (a new version of any
# of them rebuilds the catalog and recomputes the intervals).
_DEFINITIONS = ("schema.py", "catalog.py", "intervals.py", "inference.py", "benchmarks.py", "benchmark_files.py")


def fingerprint(home: Path) -> str:
    """Identifies what a current catalog of ``home`` holds; computed from the definitions' source text.

    Reading a few files costs a millisecond, where building the schemas would import pyarrow:
    opening a current catalog stays as cheap as opening the DuckDB file.
    """
    h = hashlib.sha256(f"{CATALOG_FORMAT}\n{home}\n".encode())
    here = Path(__file__).resolve().parent
    for name in _DEFINITIONS:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    for entry in sorted(resources.files("qkdb.sql").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            h.update(entry.name.encode() + b"\0" + entry.read_bytes())
    # The benchmark files qkdb ships (written into the home with the catalog): by name, size and
    # time, which an upgrade changes, where hashing their 0.4 MB would cost every open ~1 ms.
    for entry in sorted(Path(str(resources.files("qkdb.warehouse").joinpath("reference"))).iterdir()):
        st = entry.stat()
        h.update(f"{entry.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _write_schema_files(home: Path) -> None:
    import pyarrow.parquet as pq

    from qkdb.warehouse.batches import empty_table
    from qkdb.warehouse.schema import DERIVED, TABLES

    for table in (*TABLES.values(), *DERIVED.values()):
        folder = home / SCHEMA_DIR / table.name
        if table.name in TABLES:
            folder = folder / "model=_"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".schema.{uuid.uuid4().hex[:8]}.tmp"
        pq.write_table(empty_table(table), tmp)
        os.replace(tmp, folder / "schema.parquet")
    from qkdb.warehouse.benchmarks import write_bundled

    write_bundled(home)


def _read_meta(path: Path) -> dict[str, str]:
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.IOException:
        return {"busy": "1"}
    try:
        rows = con.execute("select key, value from qkdb_meta").fetchall()
        return dict(rows)
    except duckdb.Error:
        return {}
    finally:
        con.close()


def _build(con: duckdb.DuckDBPyConnection, home: Path, fp: str) -> None:
    from qkdb.warehouse.views import create_views

    con.execute("begin")
    bases = _views_sql(home)
    _create_table_views(con, bases)
    # DuckDB binds a view when it is created, and binding a base view globs and reads parquet
    # footers: the finding views, which read the base views ~100 times over, took ~2 s to create.
    # They are created over empty temp tables of the base views' exact types instead (a temp
    # object shadows main's while it exists), which are dropped after: a view keeps its SQL text,
    # bound again at each query, so it then reads the base views. (A type that differed would fail
    # every query with DuckDB's "contents of view were altered", which the tests would see.)
    for table, _ in bases:
        con.execute(f'create temp table "{table.name}" as select * from main."{table.name}" limit 0')
    create_views(con)  # (on an error the connection is closed, its temp tables with it)
    for table, _ in bases:
        con.execute(f'drop table temp.main."{table.name}"')
    _write_meta(con, home, fp)
    con.execute("commit")


def _rebase(con: duckdb.DuckDBPyConnection, home: Path, fp: str) -> None:
    """Make a copy of the template catalog (:mod:`~qkdb.warehouse.catalog_template`) the catalog of ``home``.

    Only the table views name the home's files, and ``qkdb_meta`` records it; the finding views read
    the table views by name, bound again at each query, so they stay as the template has them.
    """
    con.execute("begin")
    _create_table_views(con, _views_sql(home))
    _write_meta(con, home, fp)
    con.execute("commit")


def _create_table_views(con: duckdb.DuckDBPyConnection, bases: list[tuple[Table, str]]) -> None:
    statements = []
    for table, sql in bases:
        statements.append(f'create or replace view "{table.name}" as {sql}')
        statements.append(f'comment on view "{table.name}" is {_sql_str(table.doc)}')
        statements += [f'comment on column "{table.name}"."{c.name}" is {_sql_str(c.doc)}' for c in table.columns]
    # (one string: ~375 statements, of which a call each cost a new home ~0.1 s more)
    con.execute(";\n".join(statements))


def _write_meta(con: duckdb.DuckDBPyConnection, home: Path, fp: str) -> None:
    from qkdb.warehouse.schema import TABLES

    con.execute("create or replace table qkdb_meta (key varchar, value varchar)")
    con.executemany(
        "insert into qkdb_meta values (?, ?)",
        [("format", str(CATALOG_FORMAT)), ("fingerprint", fp), ("home", str(home))]
        + [(f"model_source.{t.name}", table_view_sql(home, t, MODEL_PLACEHOLDER)) for t in TABLES.values()],
    )


def check_format(meta: dict[str, str], path: Path) -> None:
    fmt = meta.get("format")
    if fmt is not None and int(fmt) > CATALOG_FORMAT:
        raise WarehouseError(
            f"{path} was written by a newer qkdb (catalog format {fmt}, this qkdb reads {CATALOG_FORMAT}); "
            "upgrade qkdb", kind="input"
        )


def refresh_intervals(home: Path, wait: float = 60.0) -> None:
    """Recompute and store ``finding_intervals``, then the findings' rows, for the warehouse as it is now.

    Called after every publish and removal (and when the catalog is rebuilt): the findings view
    uses an interval only while it matches the data, so an interval left from before reads as
    out of date, never as current. One process at a time (a lock); each reads the warehouse once it
    holds the lock, so the last writer writes for the latest state.
    """
    (home / LOCKS).mkdir(parents=True, exist_ok=True)
    from qkdb.warehouse import inference

    # A catalog to rebuild refreshes the findings itself: before this refresh holds their lock
    # (inside it, the rebuild's refresh waited for the lock its own caller held, a minute).
    ensure_catalog(home, wait=wait)
    with FileLock(str(home / LOCKS / "findings.lock"), timeout=wait):
        con = open_catalog(home, read_only=True, wait=wait)
        # A large warehouse's snapshot goes to a file, so that DuckDB holds only what its cap allows
        # (under the lock: a file left there is a killed refresh's).
        folder = home / SNAPSHOT_DIR
        shutil.rmtree(folder, ignore_errors=True)
        try:
            # Every head's metrics and model's row from the indexes (one file each, kept exact by
            # stamps): at 467 models that is ~1 s of reading four files a model saved.
            from qkdb.warehouse import head_index

            head_index.shadow_indexes(con, home, tables=True)
            # scipy's t quantiles are needed after the SQL; their import (~0.15 s) runs on the
            # other core meanwhile (DuckDB leaves the GIL while it runs a query).
            threading.Thread(target=inference.warm_up, daemon=True).start()
            import duckdb

            from qkdb.warehouse import intervals

            large = con.execute("select count(*) from head_metrics").fetchall()[0][0] >= SNAPSHOT_ON_DISK_HEADS
            snapshot_in = folder if large else None
            try:
                try:
                    with _refresh_settings(con, REFRESH_MEMORY_ON_DISK if large else REFRESH_MEMORY):
                        _refresh(con, home, snapshot_in)
                except duckdb.OutOfMemoryException:
                    # A query that cannot spill needed more than the cap: once more without it
                    # (slower to fail than to refuse, but never a refresh lost to the cap).
                    with _refresh_settings(con, None):
                        _refresh(con, home, snapshot_in)
            finally:
                # (the snapshot's database is the process's: detached, not left to other connections)
                with contextlib.suppress(duckdb.Error):
                    intervals.release_snapshot(con)
        finally:
            con.close()
            shutil.rmtree(folder, ignore_errors=True)


def _refresh(con: duckdb.DuckDBPyConnection, home: Path, folder: Path | None) -> None:
    from qkdb.warehouse import intervals, results

    # finding_inputs once, for both: its rows shadow the view on this connection only.
    intervals.snapshot_inputs(con, folder)
    # So do the few small views both read besides it (read once each either way): planned inside
    # the findings view they were 0.15 of its 0.22 s on a small warehouse, at every ingest.
    for view in _FROZEN:
        # (dropped first: a refresh past its memory cap runs again on the same connection)
        con.execute(f'drop table if exists temp.main."{view}"')
        con.execute(f'create temp table "{view}" as select * from "{view}"')
    # The findings' measured values are computed meanwhile, on the other core; with the snapshot
    # in a file (a large warehouse), afterwards: the two at once are a refresh's peak memory.
    with intervals.values_meanwhile(con, at_once=folder is None) as values_ready:
        table = intervals.compute(con)
        intervals.write(home, table)
        # Then the findings' rows with exactly those intervals.
        intervals.install(con, table)
        values_ready()
        results.write_findings(con, home)


# Views of a few rows that the intervals (their stamp) and the findings' rows read, kept as they
# are when the refresh starts, like its snapshot of finding_inputs (the benchmark fit's two inputs,
# the stamp's state, the models ingested in some of their layers, the params).
_FROZEN = ("params", "finding_state", "ingested_layers", "plasticity_benchmark", "plasticity_length")


# What DuckDB may hold during a refresh (its default: 80% of the machine's memory). The refresh
# holds every head's finding_inputs rows (~30 a head) and queries them on several cursors at once;
# past this, DuckDB spills to its temporary folder, so that a refresh's memory stays bounded whatever
# the warehouse's size (benchmarks/latency.py's 140,100 heads: 2.2-2.35 GB at its peak in 8.3-9.1 s,
# against 3.4-3.6 GB in 7.5-8.3 s unbounded; 27,900 heads stay below it).
REFRESH_MEMORY = "2GB"
# From this many heads the snapshot of finding_inputs is a file (SNAPSHOT_DIR in the home, removed
# after), where DuckDB keeps only what REFRESH_MEMORY_ON_DISK allows: an in-memory snapshot holds every
# row (~13 kB a head). benchmarks/latency.py's warehouses, this 2-core machine, 2026-11-29: at 27,900
# heads in memory 3.5-4.0 s and 0.99 GB peak, as a file 4.1-5.6 s and 0.60-0.71 GB; at 140,100 heads in
# memory ~14 s and 2.7 GB, as a file within 600 MB 16.7-17.1 s and 1.24-1.34 GB. With the resampling's
# weights no longer kept (intervals._Replicates) the rest is DuckDB's: its results handed to Python
# and the sums queries running at once, beyond its cap; within 400 MB 19-20 s and 0.75-0.89 GB, within
# 600 MB 0.92-1.10 GB. Below SNAPSHOT_ON_DISK_HEADS the memory is small and writing the file would cost
# ~30% of the refresh (docs/benchmarks.md, "Memory at study scale").
SNAPSHOT_ON_DISK_HEADS = 25_000
REFRESH_MEMORY_ON_DISK = "400MB"
SNAPSHOT_DIR = ".snapshot"


def _refresh_settings(con: duckdb.DuckDBPyConnection, memory: str | None):
    """One thread and ``memory`` at most (None: DuckDB's default); the database's own settings back afterwards.

    One thread: every query's rows keep one order, so every sum over them is the same to the last
    bit from refresh to refresh (the same warehouse gives the same bytes). Past ``memory`` DuckDB
    spills to its temporary folder (``qk.duckdb.tmp`` in the home, removed when done). The settings
    are the database's, shared by every connection this process has to it (DuckDB keeps one
    instance a file): restored when the refresh ends.
    """
    from qkdb.warehouse.duckdb_settings import temporarily

    return temporarily(con, threads=1, memory_limit=memory)


def ensure_catalog(home: Path, wait: float = 10.0) -> bool:
    """Bring the catalog up to date; True when it is current afterwards.

    When another process keeps the catalog open and it already exists, the data is still
    readable (the views' globs see new models); only a layout change waits for the next chance.
    """
    import duckdb

    path = catalog_path(home)
    fp = fingerprint(home)
    meta = _read_meta(path) if path.exists() else {}
    check_format(meta, path)
    if meta.get("fingerprint") == fp:
        return True
    ensure_writable(home)
    (home / LOCKS).mkdir(exist_ok=True)
    deadline = time.monotonic() + wait
    try:
        with FileLock(str(home / LOCKS / "catalog.lock"), timeout=wait):
            from qkdb.warehouse import catalog_template

            if not catalog_template.copy_schema_files(home):
                _write_schema_files(home)

            # A new home's catalog: a copy of the one built for these definitions, given this home's paths.
            template = catalog_template.copy_to(path) if not path.exists() else None
            while True:
                try:
                    con = duckdb.connect(str(path))
                    break
                except duckdb.IOException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            try:
                meta = dict(con.execute("select key, value from qkdb_meta").fetchall()) if _has_meta(con) else {}
                check_format(meta, path)
                rebuilt = meta.get("fingerprint") != fp
                if rebuilt and template is not None and meta.get(catalog_template.META_KEY) == template:
                    _rebase(con, home, fp)
                elif rebuilt:
                    _build(con, home, fp)
            finally:
                con.close()
        if rebuilt and ingested_models(home):
            # New view definitions may measure differently: the stored intervals must follow. (A
            # home without a model has none to follow; its first publish refreshes them, and a
            # reading command asks for a model first: the findings of nothing were ~2 s of every
            # new home's first ingest.)
            refresh_intervals(home, wait=wait)
        return True
    except (Timeout, duckdb.IOException):
        if path.exists():
            return False
        raise WarehouseError(f"{path}: cannot create the catalog, another process holds it open", kind="busy") from None


def _has_meta(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(
        con.execute(
            "select count(*) from duckdb_tables() where table_name = 'qkdb_meta' and database_name = current_database()"
        ).fetchall()[0][0]
    )


def open_catalog(home: Path, read_only: bool = True, wait: float = 10.0) -> duckdb.DuckDBPyConnection:
    """A connection to the catalog with every view ready (built or rebuilt first when it is not current)."""
    import duckdb

    path = catalog_path(home)
    if path.exists():
        # The common case in one connection: the catalog is current, hand it over.
        con = _connect(path, read_only, wait)
        try:
            meta = dict(con.execute("select key, value from qkdb_meta").fetchall()) if _has_meta(con) else {}
        except duckdb.Error:
            meta = {}
        check_format(meta, path)
        if meta.get("fingerprint") == fingerprint(home):
            return con
        con.close()
    elif read_only:
        # A reader never creates a warehouse: without a catalog, only stored models justify one.
        if home.exists() and not home.is_dir():
            raise WarehouseError(f"{home} is a file, not a warehouse home", kind="input")
        if not ingested_models(home):
            raise WarehouseError(f"no warehouse at {home} (nothing was ingested there)", kind="not_found")
        ensure_writable(home)
    ensure_catalog(home, wait=wait)
    return _connect(path, read_only, wait)


def _connect(path: Path, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
    import duckdb

    deadline = time.monotonic() + wait
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if time.monotonic() > deadline:
                raise WarehouseError(f"{path}: locked by another process ({exc})", kind="busy") from None
            time.sleep(0.2)
            continue
        # No DuckDB progress bar (a connection's own setting): it draws on stdout, which carries a
        # command's data; qkdb reports its own progress on stderr. (In Jupyter DuckDB refuses to
        # change the setting without ipywidgets; there its bar is not drawn on stdout anyway.)
        with contextlib.suppress(duckdb.Error):
            con.execute("set enable_progress_bar = false")
        return con

"""Finding views from ``sql/*.sql``: parsed, ordered by dependency, created idempotently, self-describing.

Each file is one plain DuckDB SELECT and the view's name is the file's stem. Its header (the
comment lines before the first SQL line) carries the documentation::

    -- <one-line description>                 (the first comment line)
    -- Seed: <the seed's value>
    -- Depends: a, b                          (views it reads, for ordering; base tables need not be listed)
    -- Column <name>: <description>
    -- any other comment: a note for readers (why the SQL is written the way it is)

:func:`create_views` attaches the description and every column's description with DuckDB's
``COMMENT ON``. A column without its own ``Column`` line inherits the description of the same
column in a view it depends on, else in the base tables (``warehouse/schema.py``), so that every
column of every view carries one description drawn from a single source.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING


from qkdb.errors import QueryError
from qkdb.warehouse.schema import FINDING_INTERVALS, STORED, TABLES

if TYPE_CHECKING:  # (at run time, imported where used: an ingest need not wait ~0.1 s for it)
    from pathlib import Path

    import duckdb

_COLUMN = re.compile(r"^column\s+([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$", re.IGNORECASE)
_KEY = re.compile(r"^(seed|depends)\s*:\s*(.*)$", re.IGNORECASE)

# A table of this name (made by a user to keep changed thresholds) is never replaced by the view.
PARAMS = "params"


@dataclass(frozen=True)
class ViewFile:
    """One ``sql/<name>.sql`` file and what its header says."""

    name: str
    sql: str
    description: str
    depends: tuple[str, ...]
    seed: str = ""
    columns: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def body(self) -> str:
        """The SELECT statement: the file without its header comments and trailing semicolon."""
        lines = self.sql.strip().splitlines()
        while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
            lines.pop(0)
        return "\n".join(lines).strip().rstrip(";").strip()


def parse_view(name: str, text: str) -> ViewFile:
    """Read the header comments of one view file (see the module docstring for the format)."""
    header: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            break
        header.append(stripped[2:].strip())
    if not header or not header[0]:
        raise ValueError(f"sql/{name}.sql: the first line must be a '-- <one-line description>' comment")
    description, seed, depends, columns, notes = header[0], "", (), {}, []
    for line in header[1:]:
        if m := _COLUMN.match(line):
            columns[m.group(1)] = m.group(2).strip()
        elif m := _KEY.match(line):
            if m.group(1).lower() == "seed":
                seed = m.group(2).strip()
            else:
                depends = tuple(d.strip() for d in m.group(2).split(",") if d.strip())
        elif line:
            notes.append(line)
    return ViewFile(name, text, description, depends, seed, columns, tuple(notes))


MACRO_SUFFIX = ".macro.sql"
_PARAMETERS = re.compile(r"^--\s*parameters\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)


def _read_files() -> dict[str, ViewFile]:
    views = {}
    for entry in resources.files("qkdb.sql").iterdir():
        if entry.name.endswith(".sql") and not entry.name.endswith(MACRO_SUFFIX):
            name = entry.name[:-4]
            views[name] = parse_view(name, entry.read_text(encoding="utf-8"))
    return views


@dataclass(frozen=True)
class MacroFile:
    """One ``sql/<name>.macro.sql`` file: a DuckDB table macro, its parameters from a ``-- Parameters:`` line.

    A macro is SQL that several views share with a different filter applied first, where DuckDB
    would not push the filter down a view's CTEs. Macros are created before every view (a table
    macro is bound where it is called, so the views it reads need not exist yet).
    """

    name: str
    parameters: tuple[str, ...]
    view: ViewFile

    @property
    def depends(self) -> tuple[str, ...]:
        return self.view.depends

    @property
    def create(self) -> str:
        return f"create or replace macro {_ident(self.name)}({', '.join(self.parameters)}) as table\n{self.view.body}"


def load_macro_files() -> list[MacroFile]:
    """Every shipped table macro (``sql/*.macro.sql``), by name."""
    macros = []
    for entry in sorted(resources.files("qkdb.sql").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(MACRO_SUFFIX):
            name = entry.name[: -len(MACRO_SUFFIX)]
            text = entry.read_text(encoding="utf-8")
            found = _PARAMETERS.search(text)
            if found is None:
                raise ValueError(f"sql/{entry.name}: a table macro needs a '-- Parameters: a, b' line")
            params = tuple(p.strip() for p in found.group(1).split(",") if p.strip())
            macros.append(MacroFile(name, params, parse_view(name, text)))
    return macros


def load_view_files() -> list[ViewFile]:
    """Every shipped view, each after the views it depends on (ties broken by name)."""
    return [v for v in _in_order() if not isinstance(v, MacroFile)]


def _in_order() -> list[ViewFile | MacroFile]:
    """Every view and table macro, each after what it depends on (a table macro is bound when created)."""
    nodes: dict[str, ViewFile | MacroFile] = {**_read_files(), **{m.name: m for m in load_macro_files()}}
    for node in nodes.values():
        for dep in node.depends:
            if dep not in nodes and dep not in STORED:
                raise ValueError(f"sql/{node.name}.sql depends on {dep!r}, which is neither a view nor a table")
    ordered: list[ViewFile | MacroFile] = []
    done: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in done or name not in nodes:
            return
        if name in stack:
            raise ValueError(f"circular view dependency: {' -> '.join(stack + (name,))}")
        for dep in nodes[name].depends:
            visit(dep, stack + (name,))
        done.add(name)
        ordered.append(nodes[name])

    for name in sorted(nodes):
        visit(name, ())
    return ordered


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _object_type(con: duckdb.DuckDBPyConnection, name: str) -> str | None:
    """'view', 'table' or None for an object of the current database's main schema."""
    rows = con.execute(
        "select table_type from information_schema.tables "
        "where table_catalog = current_database() and table_schema = 'main' and table_name = ?",
        [name],
    ).fetchall()
    if not rows:
        return None
    return "view" if rows[0][0] == "VIEW" else "table"


def _columns(con: duckdb.DuckDBPyConnection, name: str) -> list[str]:
    rows = con.execute(
        "select column_name from duckdb_columns() "
        "where database_name = current_database() and schema_name = 'main' and table_name = ? "
        "order by column_index",
        [name],
    ).fetchall()
    return [r[0] for r in rows]


def resolve_column_docs(view: ViewFile, columns: Iterable[str], known: dict[str, dict[str, str]]) -> dict[str, str]:
    """Description of each column: the view's own, else a dependency's, else a base table's."""
    sources = [view.columns] + [known[d] for d in view.depends if d in known]
    sources += [{c.name: c.doc for c in t.columns} for t in STORED.values()]
    docs = {}
    for col in columns:
        for src in sources:
            if col in src:
                docs[col] = src[col]
                break
    return docs


def create_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Create or replace every finding view, in dependency order, with its descriptions.

    Idempotent: running it again gives the same catalog. Needs a writable connection on which
    the base-table views already exist. A *table* named ``params`` (a user's kept thresholds)
    is left in place. Returns the names of the views, in creation order.
    """
    names: list[str] = []
    known: dict[str, dict[str, str]] = {}
    if _object_type(con, FINDING_INTERVALS.name) is None:
        # Where no catalog view reads the stored intervals (an in-memory database): an empty one,
        # so that `findings` binds; intervals.install() fills a connection's own copy.
        con.execute(f"create view {_ident(FINDING_INTERVALS.name)} as {empty_select(FINDING_INTERVALS)}")
        con.execute(f"comment on view {_ident(FINDING_INTERVALS.name)} is {_quote(FINDING_INTERVALS.doc)}")
        for c in FINDING_INTERVALS.columns:
            con.execute(f"comment on column {_ident(FINDING_INTERVALS.name)}.{_ident(c.name)} is {_quote(c.doc)}")
    for view in _in_order():
        if isinstance(view, MacroFile):
            con.execute(view.create)
            continue
        if not (view.name == PARAMS and _object_type(con, PARAMS) == "table"):
            con.execute(f"create or replace view {_ident(view.name)} as\n{view.body}")
            con.execute(f"comment on view {_ident(view.name)} is {_quote(view.description)}")
        docs = resolve_column_docs(view, _columns(con, view.name), known)
        if _object_type(con, view.name) == "view":
            for col, doc in docs.items():
                con.execute(f"comment on column {_ident(view.name)}.{_ident(col)} is {_quote(doc)}")
        known[view.name] = docs
        names.append(view.name)
    return names


def _duckdb_type(t) -> str:
    import pyarrow as pa

    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    raise TypeError(f"no DuckDB type for {t}")


def empty_select(table) -> str:
    """A SELECT of no rows with ``table``'s columns, typed as DuckDB reads them from parquet."""
    cols = ", ".join(f"null::{_duckdb_type(c.type)} as {_ident(c.name)}" for c in table.columns)
    return f"select {cols} where false"


def restrict_models(con: duckdb.DuckDBPyConnection, models: Sequence[str]) -> None:
    """Make every view of this connection see only ``models`` (works on read-only connections).

    A temporary view per base table, filtered to the models, shadows the catalog's view of the
    same name; the finding views are re-bound on every query and so read the filtered tables.
    The findings' intervals are recomputed for those models (a temporary ``finding_intervals``).
    The effect ends with the connection.
    """
    db = con.execute("select current_database()").fetchall()[0][0]
    keep = ", ".join(_quote(m) for m in models) or "null"
    for table in TABLES:
        own = _models_source(con, db, table, models)
        con.execute(
            f"create or replace temp view {_ident(table)} as "
            + (own if own is not None else f"select * from {_ident(db)}.main.{_ident(table)} where model in ({keep})")
        )
    from qkdb.warehouse import intervals

    intervals.install(con)


# (a SQL literal: a quote inside it is doubled, as a home's path may hold one)
_MODEL_GLOB = re.compile(r"'((?:[^']|'')*)model=\{model\}((?:[^']|'')*)'")


def _models_source(con: duckdb.DuckDBPyConnection, db: str, table: str, models: Sequence[str]) -> str | None:
    """The rows of ``models`` of ``table`` read from their own files only; None where the catalog cannot say how.

    The catalog's view binds every model's file (``union_by_name`` reads each footer, at every
    reference: a publish of one model from 467 took 6 s and 1.35 GB for its findings, nearly all
    of it binding). The catalog keeps the SQL of one model's rows (``qkdb_meta``,
    ``model_source.<table>``); its one model's files become these models' files, in the order the
    full view's glob lists them (by name), so the rows come in the full view's order too.
    """
    import duckdb

    from qkdb.warehouse.store import is_model_name

    names = sorted(set(models))
    if not names or not all(is_model_name(m) for m in names):
        return None
    try:
        got = con.execute(f"select value from {_ident(db)}.main.qkdb_meta where key = ?",
                          [f"model_source.{table}"]).fetchall()
    except duckdb.CatalogException:  # (not a catalog: a test's tables)
        return None
    found = _MODEL_GLOB.search(got[0][0]) if got else None
    if found is None:
        return None
    globs = ", ".join(f"'{found.group(1)}model={m}{found.group(2)}'" for m in names)
    return got[0][0][:found.start()] + globs + got[0][0][found.end():]


# What nearly every figure reads, in dependency order (each may read the ones before it): kept in
# memory as tables. ``models`` is a table of one row per model, but its files are read per query:
# ~0.6 ms a model, a third of a second per query on 450 models.
SNAPSHOT_VIEWS = ("models", "model_pool", "head_metrics", "taxonomy")
# Views re-bound over those tables instead of materialised: ``scoped_heads`` repeats every pooled head
# three times (its scopes), 60 % of the snapshot's memory, and from memory it costs the figures no
# more to derive it per query than to read it (measured on 140,000 heads: faster, 200 MB less).
SNAPSHOT_DERIVED = ("scoped_heads",)


def snapshot(con: duckdb.DuckDBPyConnection, names: Sequence[str] = SNAPSHOT_VIEWS,
             derived: Sequence[str] = SNAPSHOT_DERIVED, home: Path | None = None) -> None:
    """Compute the base views once for this connection: a temporary table per view shadows it.

    The report's ~80 figure queries each re-derived these views from the parquet files (~70 ms
    apiece on 7,000 heads, ~1 s on 140,000); from memory they take milliseconds. The tables hold
    per-model facts and per-head metrics only (no vectors, no per-PC rows); the ``derived`` views
    are temporary views over them. Every later query of the connection reads the warehouse as it
    was now, which is what one report should show anyway; the effect ends with the connection.
    Call it after :func:`restrict_models`, whose filtered tables it then snapshots. With ``home``
    (the warehouse ``con`` reads), the models and head_metrics come from its indexes
    (:mod:`~qkdb.warehouse.model_index`, :mod:`~qkdb.warehouse.head_index`), and ``pca`` is read
    from its index.
    """
    from qkdb.warehouse import head_index
    from qkdb.warehouse.model_index import snapshot_models

    db, threads = con.execute("select current_database(), current_setting('threads')").fetchall()[0]
    bodies = {v.name: v.body for v in load_view_files() if v.name in set(derived)}
    # Every head's and model's row from the indexes of ``home`` (one file each, not four files and
    # one file a model: 0.3 s and ~1 s at 467 models); a restricted connection keeps its own. The
    # heads first: the index of head_metrics stands aside once a table it reads is shadowed.
    if home is not None:
        if "head_metrics" in names:
            head_index.shadow_head_metrics(con, home)
        if "models" in names:
            snapshot_models(con, home)
    # On one thread: the rows keep one order, so sums over them (the figures') do not vary in the
    # last bits from run to run.
    con.execute("set threads = 1")
    # The tables' views bind over every model's files (union_by_name reads each footer): kept,
    # later queries of the same table (a collage's, the head explorer's) skip that.
    con.execute("set parquet_metadata_cache = true")
    try:
        for name in names:
            kind = _temp_type(con, name)
            if kind == "LOCAL TEMPORARY":  # (the models from the index)
                continue
            if kind == "VIEW":  # a base table restricted to some models (restrict_models)
                con.execute(f"create temp table {_ident('_qkdb_' + name)} as select * from temp.main.{_ident(name)}")
                con.execute(f"drop view temp.main.{_ident(name)}")
                con.execute(f"alter table temp.main.{_ident('_qkdb_' + name)} rename to {_ident(name)}")
                continue
            # From the catalog's view by its full name: the temp table of the same name does not exist
            # yet, but the ones made before it do, so each view reads its predecessors from memory.
            con.execute(f"create or replace temp table {_ident(name)} as select * from {_ident(db)}.main.{_ident(name)}")
        for name in derived:
            con.execute(f"create or replace temp view {_ident(name)} as\n{bodies[name]}")
    finally:
        con.execute(f"set threads = {int(threads)}")
    # The components' figures aggregate every head's rows of `pca`: from its index, one file
    # (after head_metrics, whose index stands aside once a table it reads is shadowed). An index
    # to write again is sorted on every thread: its rows' order is its sort's (a unique key), not
    # the threads'; on one, the plasticity profiles' took 12 s at 140,100 heads instead of 6.
    if home is not None:
        head_index.shadow_pca(con, home)
        # (plasticity, the recency term, the planes, the sinks; plasticity along the context)
        head_index.shadow_tables(con, home, head_index.TABLES + head_index.REPORT_TABLES)


def _temp_type(con: duckdb.DuckDBPyConnection, name: str) -> str | None:
    """'VIEW' or 'LOCAL TEMPORARY' for a temporary object of this name, else None."""
    got = con.execute(
        "select table_type from information_schema.tables where table_catalog = 'temp' and table_name = ?", [name]
    ).fetchall()
    return got[0][0] if got else None


@dataclass(frozen=True)
class Description:
    """What ``qkdb describe`` prints for one table or view."""

    name: str
    kind: str  # 'table' (a warehouse table) or 'view' (a finding view)
    description: str
    columns: list[tuple[str, str, str]]  # (name, type, description)
    seed: str = ""
    depends: tuple[str, ...] = ()


def describe(con: duckdb.DuckDBPyConnection, name: str) -> Description:
    """Columns, types and descriptions of a warehouse table or finding view.

    Descriptions come from the catalog's comments; where a catalog predates them, from the
    same sources :func:`create_views` reads (the SQL headers and ``warehouse/schema.py``).
    """
    files = {v.name: v for v in load_view_files()}
    rows = con.execute(
        "select column_name, data_type, comment from duckdb_columns() "
        "where table_name = ? and schema_name = 'main' and not internal "
        "order by database_name = current_database() desc, column_index",
        [name],
    ).fetchall()
    if not rows:
        known = sorted(set(files) | set(STORED))
        close = [k for k in known if name.lower() in k or k in name.lower()]
        hint = f" Did you mean {', '.join(close)}?" if close else " Run `qkdb views` for the list."
        raise QueryError(f"no table or view named {name!r} in the warehouse.{hint}", kind="not_found")
    # duckdb_columns() lists every attached database; keep the first (current) one's columns.
    seen: set[str] = set()
    cols = []
    for col, typ, comment in rows:
        if col in seen:
            continue
        seen.add(col)
        cols.append((col, typ, comment))
    if name in STORED:
        table = STORED[name]
        docs = {c.name: c.doc for c in table.columns}
        return Description(
            name, "table", table.doc, [(c, t, cm or docs.get(c, "")) for c, t, cm in cols]
        )
    view = files.get(name)
    if view is None:
        return Description(name, "view", "", [(c, t, cm or "") for c, t, cm in cols])
    fallback = resolve_column_docs(view, [c for c, _, _ in cols], _all_docs(files))
    return Description(
        name, "view", view.description, [(c, t, cm or fallback.get(c, "")) for c, t, cm in cols],
        seed=view.seed, depends=view.depends,
    )


def _all_docs(files: dict[str, ViewFile]) -> dict[str, dict[str, str]]:
    # Without a database the inherited docs are approximated by the dependencies' own lines.
    return {name: dict(v.columns) for name, v in files.items()}


def select_models(
    con: duckdb.DuckDBPyConnection,
    models: Sequence[str] = (),
    families: Sequence[str] = (),
    series: Sequence[str] = (),
) -> list[str]:
    """Ingested models that pass every given filter (names, families, series; case-insensitive).

    Raises :class:`QueryError` naming any name, family or series that is not ingested, or when
    the filters together leave no model.
    """
    rows = con.execute("select model, family, series from models order by model").fetchall()
    checks = (("model", 0, models), ("family", 1, families), ("series", 2, series))
    keep = list(rows)
    for what, i, wanted in checks:
        if not wanted:
            continue
        have = {str(r[i]).lower() for r in rows if r[i] is not None}
        missing = [w for w in wanted if w.lower() not in have]
        if missing:
            known = sorted({r[i] for r in rows if r[i] is not None})
            listing = ", ".join(known) if known else "none"
            raise QueryError(
                f"{what} {', '.join(repr(m) for m in missing)} not in the warehouse (ingested {what}s: {listing})",
                kind="not_found",
            )
        lowered = {w.lower() for w in wanted}
        keep = [r for r in keep if r[i] is not None and str(r[i]).lower() in lowered]
    if not keep:
        raise QueryError("no ingested model matches all of the given --model/--family/--series filters", kind="not_found")
    return [r[0] for r in keep]

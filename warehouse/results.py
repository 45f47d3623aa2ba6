"""What is computed when models are published, and whether a connection may still use it.

Two things follow every publish, removal and catalog rebuild (:func:`qkdb.warehouse.catalog.refresh_intervals`):
the findings' intervals (:mod:`qkdb.warehouse.intervals`) and then the findings view's rows, stored
as ``<home>/finding_results/data.parquet``. Planning and running the findings view takes ~0.3 s on
a few thousand heads; ``qkdb findings`` and the report read the stored rows instead, but only
while they belong to what the connection sees: the same ``finding_state`` fingerprint (models with
their publish times, params) and the same catalog definitions. Anything else (models restricted
in a session, params shadowed, a publish whose refresh was interrupted, another qkdb version's
views) falls back to the view, which stays the definition.

This module needs DuckDB only: checking costs a few milliseconds and imports neither numpy nor
pyarrow.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

FOLDER = "finding_results"
DATA = "data.parquet"
# Stamps stored with every row (dropped when read): the finding_state fingerprint and the catalog's.
STATE, DEFINITIONS = "_qkdb_state", "_qkdb_definitions"

_STATE_SQL = "(select fingerprint from finding_state)"
_DEFINITIONS_SQL = "(select value from qkdb_meta where key = 'fingerprint')"


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def path(home: Path) -> Path:
    return home / FOLDER / DATA


def intervals_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the intervals ``con`` reads were computed for what it sees now."""
    n, matching = con.execute(
        f"select count(*), count(*) filter (where fingerprint = {_STATE_SQL}) from finding_intervals"
    ).fetchall()[0]
    return n > 0 and n == matching


def _home(con: duckdb.DuckDBPyConnection) -> Path | None:
    """The warehouse ``con``'s catalog belongs to (None: not a catalog, e.g. a test's in-memory tables)."""
    import duckdb

    try:
        rows = con.execute("select value from qkdb_meta where key = 'home'").fetchall()
    except duckdb.CatalogException:
        return None
    return Path(rows[0][0]) if rows else None


def findings_source(con: duckdb.DuckDBPyConnection) -> str:
    """What to select the findings from on ``con``: the stored rows while current, else the view.

    Returns SQL usable after ``from`` (a parenthesised subquery or ``findings``); its columns are
    the view's, in the view's order.
    """
    home = _home(con)
    if home is None or not path(home).is_file():
        return "findings"
    import duckdb

    stored = f"read_parquet({_quote(str(path(home)))})"
    try:
        n, matching = con.execute(
            f"select count(*), count(*) filter (where {STATE} = {_STATE_SQL} and {DEFINITIONS} = {_DEFINITIONS_SQL}) "
            f"from {stored}"
        ).fetchall()[0]
    except duckdb.Error:  # unreadable or of another layout: the view answers
        return "findings"
    if n == 0 or n != matching:
        return "findings"
    return f"(select * exclude ({STATE}, {DEFINITIONS}) from {stored})"


def write_findings(con: duckdb.DuckDBPyConnection, home: Path) -> Path:
    """Store the findings view's rows as ``con`` sees them, stamped; atomically (readers see old or new)."""
    from qkdb.warehouse.store import write_file

    table = con.sql(
        f"select *, {_STATE_SQL} as {STATE}, {_DEFINITIONS_SQL} as {DEFINITIONS} from findings"
    ).to_arrow_table()
    return write_file(home / FOLDER, DATA, table)

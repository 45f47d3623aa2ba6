"""Read-only SQL on the warehouse: statement checks and streaming results."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from qkdb.api import connect
from qkdb.errors import QueryError

if TYPE_CHECKING:  # (at run time, imported where used: an ingest need not wait ~0.1 s for it)
    import duckdb

# Statement types that cannot change anything (the connection is read-only as well).
READ_ONLY = {"SELECT", "EXPLAIN", "PRAGMA"}
BATCH_ROWS = 65_536


def check_read_only(sql: str) -> list[str]:
    """The statements of ``sql``; a :class:`QueryError` if any of them would write."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(str(exc).strip()) from None
    if not statements:
        raise QueryError("no SQL statement given")
    for st in statements:
        kind = st.type.name
        if kind not in READ_ONLY:
            raise QueryError(
                f"refused: {kind} statements would change the warehouse; queries are read-only "
                "(tables are rebuilt by `qkdb ingest`)"
            )
    return [st.query for st in statements]


@contextlib.contextmanager
def run_query(
    sql: str, home: str | os.PathLike | None = None, con: duckdb.DuckDBPyConnection | None = None
) -> Iterator[pa.RecordBatchReader]:
    """Run read-only ``sql`` and yield a batch reader over the last statement's result."""
    import duckdb

    queries = check_read_only(sql)
    own = con is None
    con = con or connect(home, read_only=True)
    try:
        try:
            for q in queries[:-1]:
                con.execute(q).fetchall()
            rel = con.sql(queries[-1])
            if rel is None:  # a statement without a result (e.g. a PRAGMA that sets something)
                rel = con.sql("select 'ok' as result")
            reader = rel.to_arrow_reader(BATCH_ROWS)
        except duckdb.Error as exc:
            raise QueryError(str(exc).strip()) from None
        yield reader
    finally:
        if own:
            con.close()

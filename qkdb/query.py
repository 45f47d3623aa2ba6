"""Read-only SQL on the warehouse: statement checks and streaming results, one per statement."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qkdb.errors import QueryError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

# Statement types that cannot change anything (the connection is read-only as well).
READ_ONLY = {"SELECT", "EXPLAIN", "PRAGMA"}
BATCH_ROWS = 65_536


def sql_error(exc: Exception) -> str:
    """DuckDB's message on one line: its lines joined, without the caret drawing under the statement."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    kept = []
    for line in lines:
        if line.startswith("LINE ") or (line and set(line) <= {"^", " "}):
            break  # the statement quoted back with a caret: the terminal's job, not a one-line error
        if line:
            kept.append(line)
    return " ".join(kept)


def check_read_only(sql: str) -> list[str]:
    """The statements of ``sql``; a :class:`QueryError` if any of them would write."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(sql_error(exc)) from None
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


@dataclass
class Result:
    """One statement's result, streamed: as rows (no pyarrow needed) or as Arrow record batches.

    Read it once, one way, before the next statement runs (a half-read DuckDB result holds the
    connection).
    """

    con: duckdb.DuckDBPyConnection
    query: str

    def rows(self) -> tuple[list[str], Iterator[list[tuple]]]:
        """Column names and the rows, in batches of :data:`BATCH_ROWS`."""
        import duckdb

        try:
            cur = self.con.execute(self.query)
        except duckdb.Error as exc:
            raise QueryError(sql_error(exc)) from None
        names = [d[0] for d in cur.description] if cur.description else ["result"]

        def batches() -> Iterator[list[tuple]]:
            try:
                while batch := cur.fetchmany(BATCH_ROWS):
                    yield batch
            except duckdb.Error as exc:
                raise QueryError(sql_error(exc)) from None

        return names, batches()

    def reader(self) -> pa.RecordBatchReader:
        """The result as an Arrow stream (for the columnar formats)."""
        import duckdb

        try:
            rel = self.con.sql(self.query)
            if rel is None:  # a statement without a result (e.g. a PRAGMA that sets something)
                rel = self.con.sql("select 'ok' as result")
            return rel.to_arrow_reader(BATCH_ROWS)
        except duckdb.Error as exc:
            raise QueryError(sql_error(exc)) from None


@contextlib.contextmanager
def run_query(
    sql: str, home: str | os.PathLike | None = None, con: duckdb.DuckDBPyConnection | None = None
) -> Iterator[list[Result]]:
    """Check ``sql`` (read-only, one or more statements) and yield one :class:`Result` per statement.

    Every statement is refused before any runs if one of them would write. Each result runs when
    it is read, in order.
    """
    queries = check_read_only(sql)
    own = con is None
    if own:
        from qkdb.api import connect

        con = connect(home, read_only=True)
    try:
        yield [Result(con, q) for q in queries]
    finally:
        if own:
            con.close()

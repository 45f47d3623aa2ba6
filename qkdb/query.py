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


def check_read_only(sql: str) -> list[duckdb.Statement]:
    """The statements of ``sql``, parsed; a :class:`QueryError` if it is malformed or any of them would write.

    Give what it returns to :func:`run_query`: each statement then runs as parsed here, without
    DuckDB parsing its text again.
    """
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(sql_error(exc)) from None
    if not statements:
        raise QueryError("no SQL statement given")
    _refuse_writes(statements)
    return statements


def _refuse_writes(statements: list[duckdb.Statement]) -> None:
    for st in statements:
        kind = st.type.name
        if kind not in READ_ONLY:
            raise QueryError(
                f"refused: {kind} statements would change the warehouse; queries are read-only "
                "(tables are rebuilt by `qkdb ingest`)"
            )


@dataclass
class Result:
    """One statement's result, streamed: as rows (no pyarrow needed) or as Arrow record batches.

    Read it once, one way, before the next statement runs (a half-read DuckDB result holds the
    connection).

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The connection it runs on.
    statement : duckdb.Statement or str
        A parsed statement (run as it is) or SQL text (parsed when it runs).
    one_line : bool
        DuckDB's errors as a one-line :class:`QueryError` (a command's error); False lets DuckDB's
        own exception through, its caret drawing under the statement intact (the shell shows it).
    """

    con: duckdb.DuckDBPyConnection
    statement: duckdb.Statement | str
    one_line: bool = True

    @property
    def query(self) -> str:
        """The statement's SQL text."""
        return self.statement if isinstance(self.statement, str) else self.statement.query

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        import duckdb

        try:
            yield
        except duckdb.Error as exc:
            if not self.one_line:
                raise
            raise QueryError(sql_error(exc)) from None

    def rows(self) -> tuple[list[str], Iterator[list[tuple]]]:
        """Column names and the rows, in batches of :data:`BATCH_ROWS`."""
        with self._errors():
            cur = self.con.execute(self.statement)
        names = [d[0] for d in cur.description] if cur.description else ["result"]

        def batches() -> Iterator[list[tuple]]:
            with self._errors():
                while batch := cur.fetchmany(BATCH_ROWS):
                    yield batch

        return names, batches()

    def reader(self) -> pa.RecordBatchReader:
        """The result as an Arrow stream (for the columnar formats)."""
        with self._errors():
            rel = self.con.sql(self.statement)
            if rel is None:  # a statement without a result (e.g. a PRAGMA that sets something)
                rel = self.con.sql("select 'ok' as result")
            return rel.to_arrow_reader(BATCH_ROWS)


@contextlib.contextmanager
def run_query(
    sql: str | list[duckdb.Statement],
    home: str | os.PathLike | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> Iterator[list[Result]]:
    """Check ``sql`` (read-only, one or more statements) and yield one :class:`Result` per statement.

    ``sql`` is SQL text or the statements :func:`check_read_only` returned for it, which are not
    parsed again. Every statement is refused before any runs if one of them would write. Each
    result runs when it is read, in order.
    """
    if isinstance(sql, str):
        statements = check_read_only(sql)
    else:
        if not sql:
            raise QueryError("no SQL statement given")
        _refuse_writes(sql)  # (their types: no parsing)
        statements = list(sql)
    own = con is None
    if own:
        from qkdb.api import connect

        con = connect(home, read_only=True)
    try:
        yield [Result(con, st) for st in statements]
    finally:
        if own:
            con.close()

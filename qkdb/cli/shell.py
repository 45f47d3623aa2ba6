"""`qkdb shell`: an interactive SQL prompt on a read-only connection to the warehouse."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Callable, TextIO
from typing import TYPE_CHECKING

import typer

from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, err, note, open_warehouse
from qkdb.cli.output import Format, TableResult, write_result
from qkdb.query import Result
from qkdb.errors import QkdbError, QueryError, WarehouseError
from qkdb.warehouse import catalog_path, resolve_home

if TYPE_CHECKING:  # (at run time, imported where used: an ingest need not wait ~0.1 s for it)
    import duckdb

HISTORY_FILE = ".qkdb_shell_history"
HISTORY_LENGTH = 2000
PROMPT, CONTINUE = "qkdb> ", "  ...> "

# Statements that would leave the read-only catalog: write files, open other databases, fetch code.
REFUSED = {"COPY", "COPY_DATABASE", "EXPORT", "ATTACH", "DETACH", "LOAD", "EXTENSION"}

HELP = """\
Type SQL ending with ';' (it may span lines). The warehouse is read-only here; temporary
views are allowed, e.g. to change a threshold for this session:
  create temp view params as select * replace (0.8 as taxonomy_high) from qk.main.params;
Commands:
  .views              finding views with their descriptions
  .tables             warehouse tables
  .describe NAME      columns of a table or view, with types and descriptions
  .format FMT         output format: table, csv, json, jsonl, markdown
  .help               this text
  .quit               leave (or Ctrl-D)
Try:  from findings;   from taxonomy_fractions where scope = 'family';"""


class Shell:
    """The prompt's state and its commands; reads statements from any line source."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fmt: Format = Format.table):
        self.con = con
        self.fmt = fmt
        self.errors = 0

    # -- statements ---------------------------------------------------------------------------
    def run_sql(self, sql: str) -> None:
        """Run every statement of ``sql``; print each result; report (not raise) errors."""
        import duckdb

        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            self._error(str(exc).strip())
            return
        for st in statements:
            kind = st.type.name
            if kind in REFUSED:
                self._error(f"refused: {kind} statements are not available in the read-only shell")
                continue
            try:
                if _reads_intervals(st.query):
                    self._refresh_intervals()
                if kind == "SELECT":  # streamed: a big result is printed as its first rows
                    write_result(Result(self.con, st.query), self.fmt)
                    continue
                rel = self.con.sql(st.query)  # (other statements run here, at once)
                if rel is not None:
                    write_result(TableResult(rel.to_arrow_table()), self.fmt)
            except duckdb.Error as exc:
                msg = str(exc).strip()
                if "read-only" in msg.lower() or "read only" in msg.lower():
                    msg = f"refused: the warehouse is read-only in the shell (temporary views are fine). {msg}"
                self._error(msg)

    def _refresh_intervals(self) -> None:
        # A temp params view of this session changes what the findings measure: their intervals
        # follow (for this session only), as `qkdb findings` does.
        from qkdb.api import ensure_intervals

        if ensure_intervals(self.con):
            err.print("(the findings' intervals were recomputed for this session's data and params)", markup=False)

    def _error(self, message: str) -> None:
        self.errors += 1
        err.print(f"error: {message}", markup=False)

    # -- dot commands -------------------------------------------------------------------------
    def command(self, line: str) -> bool:
        """Run a dot command; False when the shell should stop."""
        word, _, arg = line.strip().partition(" ")
        arg = arg.strip().rstrip(";").strip()
        word = word.lower()
        if word in (".quit", ".exit", ".q"):
            return False
        if word in (".help", ".h"):
            note(HELP)
        elif word == ".views":
            from qkdb.warehouse import load_view_files

            self._list([(v.name, v.description) for v in sorted(load_view_files(), key=lambda v: v.name)])
        elif word == ".tables":
            from qkdb.warehouse import TABLES

            self._list([(t.name, t.doc) for t in TABLES.values()])
        elif word in (".describe", ".d"):
            if not arg:
                self._error(".describe needs a table or view name")
            else:
                try:
                    from qkdb.warehouse import describe as describe_object

                    d = describe_object(self.con, arg)
                except QkdbError as exc:
                    self._error(str(exc))
                else:
                    note(f"{d.name} ({d.kind}): {d.description}")
                    self._table(["column", "type", "description"], d.columns)
        elif word == ".format":
            try:
                self.fmt = Format(arg)
            except ValueError:
                self._error(f"unknown format {arg!r}: use table, csv, json, jsonl or markdown")
            else:
                if self.fmt is Format.parquet:
                    self.fmt = Format.table
                    self._error("parquet is binary; use `qkdb query -f parquet -o FILE` for it")
        else:
            self._error(f"unknown command {word}; .help lists them")
        return True

    def _list(self, rows: list[tuple[str, str]]) -> None:
        self._table(["name", "description"], rows)

    def _table(self, names: list[str], rows) -> None:
        import pyarrow as pa

        cols = list(zip(*rows)) if rows else [[] for _ in names]
        table = pa.table({n: pa.array([str(v) for v in c], pa.string()) for n, c in zip(names, cols)})
        write_result(TableResult(table), self.fmt)

    # -- the loop -----------------------------------------------------------------------------
    def loop(self, read: Callable[[str], str]) -> None:
        """Read statements with ``read(prompt)`` (EOFError ends) until .quit."""
        buffer: list[str] = []
        while True:
            try:
                line = read(CONTINUE if buffer else PROMPT)
            except EOFError:
                break
            except KeyboardInterrupt:
                buffer.clear()
                err.print("")
                continue
            if not buffer and line.strip().startswith("."):
                if not self.command(line):
                    return
                continue
            if not buffer and not line.strip():
                continue
            buffer.append(line)
            if _complete("\n".join(buffer)):
                self.run_sql("\n".join(buffer))
                buffer.clear()
        if buffer and "\n".join(buffer).strip():
            self.run_sql("\n".join(buffer))  # the last statement may lack its ';'


def _reads_intervals(query: str) -> bool:
    """Whether a statement reads the findings' intervals (a cheap textual test; a wrong guess costs one check)."""
    q = query.lower()
    return "findings" in q or "finding_intervals" in q or "bias_separation" in q


def _complete(text: str) -> bool:
    """A statement is complete when its last character outside quotes and comments is ';'."""
    quote = ""  # the open quote character, if any
    last = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = ""  # '' inside a string closes and reopens: the state ends right
            last = "x"
        elif ch in "'\"":
            quote, last = ch, "x"
        elif text.startswith("--", i):
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
            continue
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                return False
            i = close + 2
            continue
        elif not ch.isspace():
            last = ch
        i += 1
    return not quote and last == ";"


def _stream_lines(stream: TextIO) -> Callable[[str], str]:
    lines: Iterator[str] = iter(stream)

    def read(_prompt: str) -> str:
        try:
            return next(lines).rstrip("\n")
        except StopIteration:
            raise EOFError from None

    return read


def _with_history(home: Path) -> Callable[[], None]:
    """Load readline history from the warehouse home; returns the function that saves it."""
    try:
        import readline
    except ImportError:  # pragma: no cover - Windows without pyreadline
        return lambda: None
    path = home / HISTORY_FILE
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(HISTORY_LENGTH)

    def save() -> None:
        try:
            readline.write_history_file(path)
        except OSError:
            pass  # a read-only home keeps no history

    return save


def duckdb_cli_command(catalog: Path) -> list[str]:
    """The argv that opens ``catalog`` read-only in the duckdb CLI; an error if that cannot work."""
    exe = shutil.which("duckdb")
    if exe is None:
        raise WarehouseError("no `duckdb` binary on PATH; use `qkdb shell` without --duckdb")
    try:
        probe = subprocess.run(
            [exe, "-readonly", str(catalog), "-c", "select count(*) from duckdb_views()"],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WarehouseError(f"{exe} could not be run: {exc}") from None
    if probe.returncode != 0:
        detail = (probe.stderr or probe.stdout).strip().splitlines()
        raise WarehouseError(
            f"{exe} cannot read {catalog} (its DuckDB version cannot read this storage format?): "
            f"{detail[-1] if detail else 'exit code ' + str(probe.returncode)}; use `qkdb shell` without --duckdb"
        )
    return [exe, "-readonly", str(catalog)]


@app.command()
def shell(
    duckdb_cli: Annotated[bool, typer.Option("--duckdb", help="Open the catalog in the `duckdb` CLI instead (read-only).")] = False,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format of results.")] = Format.table,
    home: HomeOption = None,
) -> None:
    """An interactive SQL prompt on the warehouse (read-only; statements end with ';').

    Reads statements from stdin when it is not a terminal, e.g. `qkdb shell < queries.sql`.
    """
    if format is Format.parquet:
        raise QueryError("parquet is binary; use `qkdb query -f parquet -o FILE`")
    home_dir = resolve_home(home)
    con = open_warehouse(home_dir)  # (updates the catalog if needed; never creates a warehouse)
    if duckdb_cli:
        con.close()
        argv = duckdb_cli_command(catalog_path(home_dir))
        sys.stdout.flush()
        os.execv(argv[0], argv)
    sh = Shell(con, format)
    interactive = sys.stdin.isatty()
    try:
        if interactive:
            save = _with_history(home_dir)
            note(f"qkdb shell on {catalog_path(home_dir)} (read-only). .help for help, .quit to leave.")
            try:
                sh.loop(input)
            finally:
                save()
        else:
            sh.loop(_stream_lines(sys.stdin))
    finally:
        con.close()
    if not interactive and sh.errors:
        raise typer.Exit(1)

"""`qkdb shell`: an interactive SQL prompt on a read-only connection to the warehouse."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, TextIO

import typer

from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, err, note, open_warehouse
from qkdb.cli.output import Format, TableResult, write_result
from qkdb.errors import EXIT_CODES, QkdbError, QueryError, UsageError, WarehouseError
from qkdb.query import Result
from qkdb.warehouse import catalog_path, resolve_home

if TYPE_CHECKING:  # (at run time, imported where used: an ingest need not wait ~0.1 s for it)
    import duckdb

HISTORY_FILE = ".qkdb_shell_history"
HISTORY_LENGTH = 2000
PROMPT, CONTINUE = "qkdb> ", "  ...> "

# Statements that would leave the read-only catalog: write files, open other databases, fetch code.
REFUSED = {"COPY", "COPY_DATABASE", "EXPORT", "ATTACH", "DETACH", "LOAD", "EXTENSION"}

# The dot commands: name, other spellings, argument, what it does. `.help` is made from this table.
COMMANDS: list[tuple[str, tuple[str, ...], str, str]] = [
    (".views", (), "", "finding views with their descriptions"),
    (".tables", (), "", "warehouse tables"),
    (".describe", (".d",), "NAME", "columns of a table or view, with types and descriptions"),
    (".format", (".mode",), "[FMT]", "output format: table, line (one record per row), csv, json, jsonl, markdown (none: show it)"),
    (".x", ("\\x", ".expanded"), "", "expanded mode on or off: one record per block, every column (.format line / table)"),
    (".help", (".h",), "", "this text (or: help)"),
    (".quit", (".exit", ".q"), "", "leave (or: exit, quit, Ctrl-D)"),
]
TEXT_FORMATS = [f.value for f in Format if f is not Format.parquet]
# What a table too wide for the terminal says about the columns it elides, in the shell's words.
ALL_COLUMNS = ".x (expanded: one record per row) or .format csv"
# Typed alone at the prompt, these mean what they say (none is a SQL statement).
BARE_WORDS = {"help": ".help", "exit": ".quit", "quit": ".quit"}


def _help_text() -> str:
    lines = [
        "Type SQL ending with ';' (it may span lines). The warehouse is read-only here; temporary",
        "views are allowed, e.g. to change a threshold for this session:",
        "  create temp view params as select * replace (0.8 as taxonomy_high) from qk.main.params;",
        "Tab completes keywords, functions, tables, views and columns (also table.column and alias.column).",
        "Commands:",
    ]
    for name, aliases, arg, text in COMMANDS:
        lines.append(f"  {', '.join((f'{name} {arg}'.strip(), *aliases)):<22}{text}")
    lines.append("Try:  from findings;   from taxonomy_fractions where scope = 'family';")
    return "\n".join(lines)


class Shell:
    """The prompt's state and its commands; reads statements from any line source."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fmt: Format = Format.table):
        self.con = con
        self.fmt = fmt
        self.errors = 0
        self.buffer: list[str] = []  # the lines entered so far of an unfinished statement
        self.completer = None  # set when Tab completion is on (a qkdb.cli.completion.Completer)

    # -- statements ---------------------------------------------------------------------------
    def run_sql(self, sql: str) -> None:
        """Run every statement of ``sql``; print each result; report (not raise) errors."""
        import duckdb

        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            self._sql_error(exc)
            return
        for st in statements:
            kind = st.type.name
            if kind in REFUSED:
                self._error(f"refused: {kind} statements are not available in the read-only shell")
                continue
            try:
                if _reads_intervals(st.query):
                    self._refresh_intervals()
                # Each statement runs from its own text: DuckDB draws its caret only under the
                # statement it ran, and a parsed later statement of a line has its place in the
                # whole line.
                if kind == "SELECT":  # streamed: a big result is printed as its first rows
                    write_result(Result(self.con, st.query, one_line=False), self.fmt, all_columns=ALL_COLUMNS)
                    continue
                if self.completer is not None:  # it may create or drop names
                    self.completer.invalidate()
                rel = self.con.sql(st.query)  # (other statements run here, at once)
                if rel is not None:
                    write_result(TableResult(rel.to_arrow_table()), self.fmt, all_columns=ALL_COLUMNS)
            except duckdb.Error as exc:  # as it runs, or as its rows stream
                self._sql_error(exc)
            except QkdbError as exc:  # ours, e.g. while the findings' intervals are recomputed
                self._error(str(exc))

    def _refresh_intervals(self) -> None:
        # A temp params view of this session changes what the findings measure: their intervals
        # follow (for this session only), as `qkdb findings` does.
        from qkdb.api import ensure_intervals

        if ensure_intervals(self.con):
            err.print("(the findings' intervals were recomputed for this session's data and params)", markup=False)

    def _sql_error(self, exc: duckdb.Error) -> None:
        """Report a statement's DuckDB error in full: at a prompt, the caret under the statement shows where."""
        msg = str(exc).strip()
        if "read-only" in msg.lower() or "read only" in msg.lower():
            msg = f"refused: the warehouse is read-only in the shell (temporary views are fine). {msg}"
        self._error(msg)

    def _error(self, message: str) -> None:
        self.errors += 1
        # soft_wrap: lines are left as they are (no re-wrapping at rich's width), so a caret stays
        # under the text it points at.
        err.print(f"error: {message}", markup=False, soft_wrap=True)

    # -- dot commands -------------------------------------------------------------------------
    def command(self, line: str) -> bool:
        """Run a dot command; False when the shell should stop."""
        word, _, arg = line.strip().partition(" ")
        arg = arg.strip().rstrip(";").strip()
        name = _command_name(word)
        if name is None:
            self._error(f"unknown command {word}; .help lists them")
            return True
        if name == ".quit":
            return False
        if name == ".help":
            note(_help_text())
        elif name == ".views":
            from qkdb.warehouse import load_view_files

            self._list([(v.name, v.description) for v in sorted(load_view_files(), key=lambda v: v.name)])
        elif name == ".tables":
            from qkdb.warehouse import TABLES

            self._list([(t.name, t.doc) for t in TABLES.values()])
        elif name == ".describe":
            self._describe(arg)
        elif name == ".format":
            self._format(arg)
        elif name == ".x":
            self.fmt = Format.table if self.fmt is Format.line else Format.line
            note(f"expanded mode {'on' if self.fmt is Format.line else 'off'} (output format: {self.fmt.value})")
        return True

    def _describe(self, arg: str) -> None:
        if not arg:
            self._error(".describe needs a table or view name")
            return
        try:
            from qkdb.warehouse import describe as describe_object

            d = describe_object(self.con, arg)
        except QkdbError as exc:
            self._error(str(exc))
        else:
            note(f"{d.name} ({d.kind}): {d.description}")
            self._table(["column", "type", "description"], d.columns)

    def _format(self, arg: str) -> None:
        if not arg:
            note(f"output format: {self.fmt.value}")
        elif arg == Format.parquet.value:
            self._error("parquet is binary; use `qkdb query -f parquet -o FILE` for it")
        elif arg in TEXT_FORMATS:
            self.fmt = Format(arg)
        else:
            self._error(f"unknown format {arg!r}: use {', '.join(TEXT_FORMATS)}")

    def _list(self, rows: list[tuple[str, str]]) -> None:
        self._table(["name", "description"], rows)

    def _table(self, names: list[str], rows) -> None:
        import pyarrow as pa

        cols = list(zip(*rows)) if rows else [[] for _ in names]
        table = pa.table({n: pa.array([str(v) for v in c], pa.string()) for n, c in zip(names, cols)})
        write_result(TableResult(table), self.fmt, all_columns=ALL_COLUMNS)

    # -- the loop -----------------------------------------------------------------------------
    def loop(self, read: Callable[[str], str]) -> None:
        """Read statements with ``read(prompt)`` (EOFError ends) until .quit."""
        buffer = self.buffer
        while True:
            try:
                line = read(CONTINUE if buffer else PROMPT)
            except EOFError:
                break
            except KeyboardInterrupt:
                buffer.clear()
                err.print("")
                continue
            bare = BARE_WORDS.get(line.strip().rstrip(";").strip().lower())
            if bare and buffer:
                # Inside a statement a lone `exit` is far more likely meant than SQL: say how, keep the statement.
                note(f"(the statement is not finished: end it with ';', or Ctrl-C drops it; then {line.strip()})")
                continue
            if bare:
                line = bare
            if not buffer and line.strip().startswith((".", "\\")):
                if not self.command(line):
                    return
                continue
            if not buffer and not line.strip():
                continue
            buffer.append(line)
            if _complete("\n".join(buffer)):
                sql = "\n".join(buffer)
                buffer.clear()
                self.run_sql(sql)
        if buffer and "\n".join(buffer).strip():
            sql = "\n".join(buffer)
            buffer.clear()
            self.run_sql(sql)  # the last statement may lack its ';'


def _command_name(word: str) -> str | None:
    """The dot command ``word`` names (any of its spellings, any case), or None."""
    word = word.lower()
    for name, aliases, _, _ in COMMANDS:
        if word == name or word in aliases:
            return name
    return None


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


def _tty_reader() -> Callable[[str], str]:
    """``input`` for a terminal; its prompt goes to stderr when stdout is redirected (stdout is data)."""
    if sys.stdout.isatty():
        return input

    def read(prompt: str) -> str:
        sys.stderr.write(prompt)
        sys.stderr.flush()
        return input()

    return read


def _interactive(sh: Shell, home: Path) -> Callable[[], None]:
    """Tab completion and the history file for a terminal session; returns the function that saves the history."""
    try:
        import readline
    except ImportError:  # pragma: no cover - a Python built without readline: a plain prompt
        return lambda: None
    from qkdb.cli.completion import Completer, install

    sh.completer = Completer(
        sh.con,
        commands=[c for name, aliases, _, _ in COMMANDS for c in (name, *aliases) if len(c) > 2],
        arguments={
            ".describe": lambda names: sorted(names.relations),
            ".d": lambda names: sorted(names.relations),
            ".format": lambda names: TEXT_FORMATS,
        },
        pending=lambda: sh.buffer,
    )
    install(sh.completer)
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
        raise WarehouseError("no `duckdb` binary on PATH; use `qkdb shell` without --duckdb", kind="not_found")
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


HARLEQUIN_MISSING = (
    "harlequin is not installed: `pip install 'qkdb[ide]'` puts it beside qkdb, or "
    "`pipx install harlequin` puts it on PATH; or use `qkdb shell` without --ide"
)


def find_harlequin() -> str | None:
    """The harlequin executable: the one installed beside qkdb (the ``ide`` extra), else the first on PATH."""
    # This environment's own comes first: it shares qkdb's DuckDB, so it reads the catalog's
    # storage format; and its bin folder need not be on PATH (a venv used without activating it).
    beside = Path(sys.executable).parent / "harlequin"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("harlequin")


def harlequin_command(catalog: Path) -> list[str]:
    """The argv that opens ``catalog`` read-only in harlequin; an error (one line) if there is no harlequin.

    A harlequin from another environment (e.g. pipx's) brings its own DuckDB; one older than 2
    cannot read the catalog, which is said here rather than inside harlequin's window.
    """
    exe = find_harlequin()
    if exe is None:
        # The program asked for does not exist here: "not found", as the OS says of a missing executable.
        raise WarehouseError(HARLEQUIN_MISSING, kind="not_found")
    if Path(exe).parent != Path(sys.executable).parent:
        version = _duckdb_version_of(exe)
        if version is not None and version.split(".")[0].isdigit() and int(version.split(".")[0]) < 2:
            raise WarehouseError(
                f"{exe} runs DuckDB {version}, which cannot read {catalog} (DuckDB 2 storage); upgrade its "
                "DuckDB (`pipx inject harlequin 'duckdb>=2,<3'`) or `pip install 'qkdb[ide]'`",
                kind="system",
            )
    return [exe, "--adapter", "duckdb", "--read-only", str(catalog)]


def _duckdb_version_of(exe: str) -> str | None:
    """The DuckDB version importable by the Python that runs the script ``exe``; None when unknown."""
    try:
        with open(exe, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    if not first.startswith("#!") or "python" not in first:
        return None  # not a Python entry point script (a wrapper, a binary): let harlequin speak for itself
    interpreter = first[2:].split()
    try:
        probe = subprocess.run(
            [*interpreter, "-c", "import duckdb, sys; sys.stdout.write(duckdb.__version__)"],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (probe.stdout.strip() or None) if probe.returncode == 0 else None


@app.command()
def shell(
    duckdb_cli: Annotated[bool, typer.Option("--duckdb", help="Open the catalog in the `duckdb` CLI instead (read-only).")] = False,
    ide: Annotated[bool, typer.Option("--ide", help="Open the catalog in harlequin, the terminal SQL IDE, instead (read-only).")] = False,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format of results.")] = Format.table,
    home: HomeOption = None,
) -> None:
    """An interactive SQL prompt on the warehouse (read-only; statements end with ';').

    Tab completes keywords, functions, tables, views and columns; `.help` lists the commands
    (`help`, `exit` and `quit` work too). Reads statements from stdin when it is not a terminal,
    e.g. `qkdb shell < queries.sql`.
    """
    if format is Format.parquet:
        raise QueryError("parquet is binary; use `qkdb query -f parquet -o FILE`")
    if duckdb_cli and ide:
        raise UsageError("--duckdb and --ide each open another program: give one of them")
    home_dir = resolve_home(home)
    con = open_warehouse(home_dir)  # (updates the catalog if needed; never creates a warehouse)
    if duckdb_cli or ide:
        con.close()
        catalog = catalog_path(home_dir)
        argv = harlequin_command(catalog) if ide else duckdb_cli_command(catalog)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(argv[0], argv)
    sh = Shell(con, format)
    interactive = sys.stdin.isatty()
    try:
        if interactive:
            save = _interactive(sh, home_dir)
            note(f"qkdb shell on {catalog_path(home_dir)} (read-only). Tab completes; .help for help; .quit to leave.")
            try:
                sh.loop(_tty_reader())
            finally:
                save()
        else:
            sh.loop(_stream_lines(sys.stdin))
    finally:
        con.close()
    if not interactive and sh.errors:
        # A script whose statements failed: each was reported as it ran; the exit code says "bad input".
        raise typer.Exit(EXIT_CODES["input"])

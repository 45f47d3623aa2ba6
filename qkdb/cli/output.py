"""Writing results (a query's rows, a command's record of facts) in every format, streaming where it can."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import sys
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING

from qkdb.cli.common import note, out_console
from qkdb.errors import QueryError

if TYPE_CHECKING:
    import pyarrow as pa

TABLE_ROW_LIMIT = 1000  # a terminal table beyond this is unreadable; other formats stream everything


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"
    markdown = "markdown"
    line = "line"  # one record per row, `column = value` a line (duckdb's .mode line)
    parquet = "parquet"


def _jsonable(v):
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return f"{v:.6g}"
    if isinstance(v, list):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v)


class TableResult:
    """An Arrow table offered as a result: its rows, or its batches (the commands' own listings)."""

    def __init__(self, table: pa.Table):
        self.table = table

    def rows(self):
        names = self.table.column_names
        return names, iter([[tuple(r[c] for c in names) for r in self.table.to_pylist()]])

    def reader(self) -> pa.RecordBatchReader:
        import pyarrow as pa

        return pa.RecordBatchReader.from_batches(self.table.schema, self.table.to_batches())


class RowsResult:
    """Rows of Python values offered as a result (a command's own listing): no pyarrow unless a columnar format asks.

    (Arrow arrays built from Python lists import pandas when it is installed: ~0.2–0.4 s of a
    command that prints a few rows.) ``types`` name the columns' Arrow types for those formats
    (``pyarrow.type_for_alias`` names: "string", "int64", ...; None: inferred).
    """

    def __init__(self, names: list[str], rows: list[tuple], types: list[str | None] | None = None):
        self.names, self.data, self.types = names, rows, types

    def rows(self):
        return self.names, iter([self.data])

    def reader(self) -> pa.RecordBatchReader:
        import pyarrow as pa

        cols = list(zip(*self.data)) if self.data else [()] * len(self.names)
        types = self.types or [None] * len(self.names)
        table = pa.table({n: pa.array(list(c), t and pa.type_for_alias(t)) for n, c, t in zip(self.names, cols, types)})
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())


# Formats written from Arrow batches (pyarrow's writers); the others from plain rows, so that a
# query printed as a table never loads pyarrow (~0.1 s of a command's start).
ARROW_FORMATS = (Format.parquet, Format.csv)


# How to see every column when a terminal table elides some (the shell says it with its dot commands).
ALL_COLUMNS = "--format line (one record per row) or --format csv"


def write_result(result, fmt: Format, output: Path | None = None, all_columns: str = ALL_COLUMNS) -> int:
    """Write ``result`` (a :class:`qkdb.query.Result` or :class:`TableResult`) to ``output`` (stdout when None).

    A table on a terminal shows the columns that fit its width and notes how many are elided, with
    ``all_columns`` saying how to see them all. Returns the row count.
    """
    fmt = Format(fmt)
    if fmt is Format.parquet:
        import pyarrow.parquet as pq

        if output is None and sys.stdout.isatty():
            raise QueryError("parquet output is binary: give -o FILE.parquet (or redirect stdout)")
        reader = result.reader()
        sink = str(output) if output is not None else sys.stdout.buffer
        n = 0
        with pq.ParquetWriter(sink, reader.schema, compression="zstd") as w:
            for batch in reader:
                w.write_batch(batch)
                n += batch.num_rows
        return n
    if output is not None:
        with open(output, "w", encoding="utf-8", newline="") as fh:
            return _write_text(result, fmt, fh, to_terminal=False)
    return _write_text(result, fmt, sys.stdout, to_terminal=True, all_columns=all_columns)


def _write_text(result, fmt: Format, fh: IO[str], to_terminal: bool, all_columns: str = ALL_COLUMNS) -> int:
    if fmt is Format.csv:
        import pyarrow as pa

        # One small CSV per batch (header on the first only) keeps memory flat for huge results.
        reader = result.reader()
        n, first = 0, True
        for batch in reader:
            fh.write(_csv_text(pa.Table.from_batches([batch]), header=first))
            first = False
            n += batch.num_rows
        if first:
            fh.write(_csv_text(reader.schema.empty_table(), header=True))
        return n
    names, batches = result.rows()
    n = 0
    if fmt is Format.jsonl:
        for batch in batches:
            for row in batch:
                fh.write(json.dumps(_jsonable(dict(zip(names, row)))) + "\n")
            n += len(batch)
        return n
    if fmt is Format.json:
        fh.write("[")
        for batch in batches:
            for row in batch:
                fh.write(("," if n else "") + "\n  " + json.dumps(_jsonable(dict(zip(names, row)))))
                n += 1
        fh.write("\n]\n" if n else "]\n")
        return n
    if fmt is Format.line:
        from qkdb.cli.table_fit import line_records

        return line_records(names, ([_cell(v) for v in row] for batch in batches for row in batch), fh.write)
    if fmt is Format.markdown:
        fh.write("| " + " | ".join(names) + " |\n")
        fh.write("|" + "|".join("---" for _ in names) + "|\n")
        for batch in batches:
            for row in batch:
                fh.write("| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |\n")
            n += len(batch)
        return n
    # table
    cells: list[list[str]] = []
    for batch in batches:
        for row in batch:
            if len(cells) < TABLE_ROW_LIMIT:
                cells.append([_cell(v) for v in row])
        n += len(batch)
    _print_table(list(names), cells, fh, to_terminal, all_columns)
    if n > len(cells):
        note(f"showing {len(cells)} of {n} rows; use --format csv/jsonl/parquet for all of them")
    return n


def _print_table(names: list[str], cells: list[list[str]], fh: IO[str], to_terminal: bool, all_columns: str) -> None:
    """A boxed table; on a terminal, the columns that fit its width (:mod:`qkdb.cli.table_fit`), a note on the rest."""
    from rich.console import Console
    from rich.table import Table

    from qkdb.cli.table_fit import ELIDED, fit_columns, frame_width, importance

    terminal = to_terminal and sys.stdout.isatty()
    if not terminal and _plain(names, cells):
        fh.write(_box_lines(names, cells))
        return
    console = out_console() if to_terminal else None
    order, essential = importance(names, cells) if terminal else (None, 0)
    fit = fit_columns(names, cells, console.width if terminal else None, order, essential)
    table = Table(show_header=True, header_style="bold", show_lines=False)
    for i, w in zip(fit.columns, fit.widths):
        table.add_column(names[i], width=w, overflow="fold")
    if fit.elided:
        table.add_column(ELIDED, width=len(ELIDED))
    for row in cells:
        table.add_row(*(row[i] for i in fit.columns), *((ELIDED,) if fit.elided else ()))
    if console is None:  # a file: every column at its natural width, however wide
        console = Console(file=fh, width=frame_width(fit.widths), highlight=False)
    console.print(table)
    if fit.elided:
        note(f"{len(fit.columns)} of {len(names)} columns shown; {all_columns} for all")
        kept = set(fit.columns)
        note(_hidden_line([n for i, n in enumerate(names) if i not in kept], console.width))


def _hidden_line(hidden: list[str], width: int) -> str:
    """``hidden: a, b, c and 4 more``: the elided columns' names, in one line of at most ``width`` characters."""
    for k in range(len(hidden), 0, -1):
        rest = len(hidden) - k
        line = "hidden: " + ", ".join(hidden[:k]) + (f" and {rest} more" if rest else "")
        if len(line) <= width:
            return line
    return f"hidden: {len(hidden)} columns"


def _plain(names: list[str], cells: list[list[str]]) -> bool:
    """Whether rich would print these cells as they are: one line each, no markup or emoji code, one cell per character."""
    try:
        from rich._emoji_replace import _emoji_replace  # (what rich does to ":smile:"; private: absent, rich prints)
    except ImportError:
        return False
    for text in (*names, *(c for row in cells for c in row)):
        if not text.isascii() or not text.isprintable() or "[" in text or ":" in text and _emoji_replace(text) != text:
            return False
    return True


def _box_lines(names: list[str], cells: list[list[str]]) -> str:
    """The boxed table rich prints off a terminal (its heavy-head box, every column at its natural width), written directly.

    rich lays out every cell of every row (~2 ms a row: a second for 467 models); for cells that
    are plain one-line text the layout is only padding, done here. :func:`_plain` says when.
    """
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]

    def line(left: str, fill: str, sep: str, right: str) -> str:
        return left + sep.join(fill * (w + 2) for w in widths) + right + "\n"

    def row(values: list[str], bar: str) -> str:
        return bar + bar.join(f" {v.ljust(w)} " for v, w in zip(values, widths)) + bar + "\n"

    out = [line("┏", "━", "┳", "┓"), row(names, "┃"), line("┡", "━", "╇", "┩")]
    out += [row(r, "│") for r in cells]
    out.append(line("└", "─", "┴", "┘"))
    return "".join(out)


def _csv_text(table: pa.Table, header: bool) -> str:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = _flat_cells(table)
    buf = pa.BufferOutputStream()
    pacsv.write_csv(table, buf, write_options=pacsv.WriteOptions(include_header=header))
    return buf.getvalue().to_pybytes().decode()


def _flat_cells(table: pa.Table) -> pa.Table:
    """Lists, structs and maps as JSON text (a CSV cell holds one value; pyarrow's writer refuses them)."""
    import json

    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            # (a loop over the rows of these columns only: a list per cell is what they are)
            text = [None if v is None else json.dumps(v, default=str) for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(text, pa.string()))
    return table


def write_table(table: pa.Table, fmt: Format, output: Path | None = None) -> int:
    return write_result(TableResult(table), fmt, output)


def record_rows(record: dict, prefix: str = "", human: bool = False) -> list[tuple[str, str]]:
    """A (nested) dict as key/value rows of text, in its order: ``{"a": {"b": 1}}`` gives ``("a.b", "1")``.

    A list is one row, its items joined by commas; None is an empty value. With ``human``, a count
    of bytes (a key ending in ``_bytes``, or inside one) reads as ``1.3 MiB``.
    """
    rows: list[tuple[str, str]] = []
    for k, v in record.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows += record_rows(v, key + ".", human)
        elif isinstance(v, (list, tuple)):
            rows.append((key, ",".join(str(x) for x in v)))
        elif human and isinstance(v, int) and "_bytes" in key:
            rows.append((key, human_size(v)))
        else:
            rows.append((key, "" if v is None else str(v)))
    return rows


def human_size(n: int) -> str:
    """``n`` bytes for people: ``512 B``, ``45.5 KiB``, ``1.3 MiB``."""
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def write_record(record: dict, fmt: Format, output: Path | None = None) -> int:
    """Write one record (a command's facts, e.g. `qkdb info`'s) in ``fmt``; returns the row count.

    JSON keeps the record's nesting; ``line`` lists its :func:`record_rows` as ``key = value`` lines;
    every other format lists them under the columns ``key`` and ``value``, the same rows in the same
    order (the table's sizes for people).
    """
    if Format(fmt) in (Format.json, Format.line):
        if Format(fmt) is Format.json:
            text = json.dumps(_jsonable(record), indent=2) + "\n"
        else:  # the record is one record: `key = value` a line
            rows = record_rows(record)
            pad = max((len(k) for k, _ in rows), default=0)
            text = "".join(f"{k:>{pad}} = {v}\n" for k, v in rows)
        if output is None:
            sys.stdout.write(text)
        else:
            Path(output).write_text(text, encoding="utf-8")
        return 1
    # The table is for people (sizes readable); the data formats keep the numbers.
    rows = record_rows(record, human=Format(fmt) is Format.table)
    return write_result(RowsResult(["key", "value"], rows, ["string", "string"]), fmt, output)

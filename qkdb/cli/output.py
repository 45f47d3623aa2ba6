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


# Formats written from Arrow batches (pyarrow's writers); the others from plain rows, so that a
# query printed as a table never loads pyarrow (~0.1 s of a command's start).
ARROW_FORMATS = (Format.parquet, Format.csv)


def write_result(result, fmt: Format, output: Path | None = None) -> int:
    """Write ``result`` (a :class:`qkdb.query.Result` or :class:`TableResult`) to ``output`` (stdout when None).

    Returns the row count.
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
    return _write_text(result, fmt, sys.stdout, to_terminal=True)


def _write_text(result, fmt: Format, fh: IO[str], to_terminal: bool) -> int:
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
    if fmt is Format.markdown:
        fh.write("| " + " | ".join(names) + " |\n")
        fh.write("|" + "|".join("---" for _ in names) + "|\n")
        for batch in batches:
            for row in batch:
                fh.write("| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |\n")
            n += len(batch)
        return n
    # table
    from rich.table import Table

    table = Table(show_header=True, header_style="bold", show_lines=False)
    for c in names:
        table.add_column(c, overflow="fold")
    shown = 0
    for batch in batches:
        for row in batch:
            if shown < TABLE_ROW_LIMIT:
                table.add_row(*(_cell(v) for v in row))
                shown += 1
        n += len(batch)
    if to_terminal:
        out_console().print(table)
    else:
        from rich.console import Console

        Console(file=fh, width=250, highlight=False).print(table)
    if n > shown:
        note(f"showing {shown} of {n} rows; use --format csv/jsonl/parquet for all of them")
    return n


def _csv_text(table: pa.Table, header: bool) -> str:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    buf = pa.BufferOutputStream()
    pacsv.write_csv(table, buf, write_options=pacsv.WriteOptions(include_header=header))
    return buf.getvalue().to_pybytes().decode()


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

    JSON keeps the record's nesting; every other format lists its :func:`record_rows` under the
    columns ``key`` and ``value``, the same rows in the same order (the table's sizes for people).
    """
    if Format(fmt) is Format.json:
        text = json.dumps(_jsonable(record), indent=2) + "\n"
        if output is None:
            sys.stdout.write(text)
        else:
            Path(output).write_text(text, encoding="utf-8")
        return 1
    import pyarrow as pa

    # The table is for people (sizes readable); the data formats keep the numbers.
    rows = record_rows(record, human=Format(fmt) is Format.table)
    table = pa.table({"key": pa.array([k for k, _ in rows], pa.string()), "value": pa.array([v for _, v in rows], pa.string())})
    return write_table(table, fmt, output)

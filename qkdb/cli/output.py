"""Writing query results in every format `qkdb query` offers, streaming where the format allows."""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import sys
from enum import Enum
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.table import Table

from qkdb.cli.common import note, out_console
from qkdb.errors import QueryError

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


def write_result(reader: pa.RecordBatchReader, fmt: Format, output: Path | None = None) -> int:
    """Write every batch of ``reader`` to ``output`` (stdout when None); returns the row count."""
    fmt = Format(fmt)
    if fmt is Format.parquet:
        if output is None and sys.stdout.isatty():
            raise QueryError("parquet output is binary: give -o FILE.parquet (or redirect stdout)")
        sink = str(output) if output is not None else sys.stdout.buffer
        n = 0
        with pq.ParquetWriter(sink, reader.schema, compression="zstd") as w:
            for batch in reader:
                w.write_batch(batch)
                n += batch.num_rows
        return n
    if output is not None:
        with open(output, "w", encoding="utf-8", newline="") as fh:
            return _write_text(reader, fmt, fh, to_terminal=False)
    return _write_text(reader, fmt, sys.stdout, to_terminal=True)


def _write_text(reader: pa.RecordBatchReader, fmt: Format, fh: IO[str], to_terminal: bool) -> int:
    names = reader.schema.names
    n = 0
    if fmt is Format.csv:
        # One small CSV per batch (header on the first only) keeps memory flat for huge results.
        first = True
        for batch in reader:
            fh.write(_csv_text(pa.Table.from_batches([batch]), header=first))
            first = False
            n += batch.num_rows
        if first:
            fh.write(_csv_text(reader.schema.empty_table(), header=True))
        return n
    if fmt is Format.jsonl:
        for batch in reader:
            for row in batch.to_pylist():
                fh.write(json.dumps(_jsonable(row)) + "\n")
            n += batch.num_rows
        return n
    if fmt is Format.json:
        fh.write("[")
        for batch in reader:
            for row in batch.to_pylist():
                fh.write(("," if n else "") + "\n  " + json.dumps(_jsonable(row)))
                n += 1
        fh.write("\n]\n" if n else "]\n")
        return n
    if fmt is Format.markdown:
        fh.write("| " + " | ".join(names) + " |\n")
        fh.write("|" + "|".join("---" for _ in names) + "|\n")
        for batch in reader:
            for row in batch.to_pylist():
                fh.write("| " + " | ".join(_cell(row[c]).replace("|", "\\|") for c in names) + " |\n")
            n += batch.num_rows
        return n
    # table
    table = Table(show_header=True, header_style="bold", show_lines=False)
    for c in names:
        table.add_column(c, overflow="fold")
    shown = 0
    for batch in reader:
        for row in batch.to_pylist():
            if shown < TABLE_ROW_LIMIT:
                table.add_row(*(_cell(row[c]) for c in names))
                shown += 1
        n += batch.num_rows
    if to_terminal:
        out_console().print(table)
    else:
        from rich.console import Console

        Console(file=fh, width=250, highlight=False).print(table)
    if n > shown:
        note(f"showing {shown} of {n} rows; use --format csv/jsonl/parquet for all of them")
    return n


def _csv_text(table: pa.Table, header: bool) -> str:
    buf = pa.BufferOutputStream()
    pacsv.write_csv(table, buf, write_options=pacsv.WriteOptions(include_header=header))
    return buf.getvalue().to_pybytes().decode()


def write_table(table: pa.Table, fmt: Format, output: Path | None = None) -> int:
    return write_result(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()), fmt, output)

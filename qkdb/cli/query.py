"""`qkdb query`: one read-only SQL statement, results to stdout or a file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb.cli.app import app
from qkdb.cli.common import HomeOption
from qkdb.cli.output import Format, write_result
from qkdb.query import run_query


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL to run (read-only), e.g. \"from head_metrics limit 5\".")],
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    home: HomeOption = None,
) -> None:
    """Run a read-only SQL query on the warehouse (tables and finding views)."""
    with run_query(sql, home) as reader:
        write_result(reader, format, output)

"""`qkdb query`: read-only SQL, results to stdout or a file."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, home_dir, note, open_warehouse
from qkdb.cli.output import Format, write_result
from qkdb.errors import QueryError


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL to run (read-only), e.g. \"from head_metrics limit 5\".")],
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    home: HomeOption = None,
) -> None:
    """Run read-only SQL on the warehouse (tables and finding views).

    Several statements (separated by ';') run in order; each result is printed, one table after
    the other. Data formats hold one table: with them, give one statement.
    """
    from qkdb.query import check_read_only, run_query

    # Parsed once: a refused or malformed statement says so before the warehouse is opened, and
    # the statements then run as parsed here.
    statements = check_read_only(sql)
    con = open_warehouse(home)
    from qkdb import warehouse

    # A finding view reads every head's metrics: from the index (one file), not four files a model.
    if warehouse.reads_head_metrics(con, sql):
        warehouse.shadow_head_metrics(con, home_dir(home))
    with contextlib.closing(con), run_query(statements, con=con) as results:
        if len(results) > 1 and (output is not None or Format(format) not in (Format.table, Format.markdown, Format.line)):
            raise QueryError(
                f"{len(results)} statements, but --format {Format(format).value}"
                + (" and -o" if output is not None else "")
                + " hold one result: run them one at a time (or print them as tables)"
            )
        for k, result in enumerate(results):
            if len(results) > 1:
                note(f"-- statement {k + 1} of {len(results)}")
            write_result(result, format, output)

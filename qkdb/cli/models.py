"""`qkdb models`: the registry and what is ingested."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption
from qkdb.cli.output import Format, write_table


@app.command()
def models(
    ingested: Annotated[bool, typer.Option("--ingested", help="Only models in the warehouse.")] = False,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE.")] = None,
    home: HomeOption = None,
) -> None:
    """List the registry's models (and any other ingested model) with their ingest status."""
    table = api.models_overview(home)
    if ingested:
        table = table.filter(table.column("ingested"))
    write_table(table, format, output)

"""`qkdb models`: the registry and what is ingested."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, check_warehouse, home_dir, note
from qkdb.cli.output import Format, write_table


@app.command()
def models(
    ingested: Annotated[bool, typer.Option("--ingested", help="Only models in the warehouse.")] = False,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE.")] = None,
    home: HomeOption = None,
) -> None:
    """List the registry's models (and any other ingested model) with their ingest status.

    Works before anything is ingested (the registry is what there is to ingest); a missing
    warehouse is not created. With --ingested, a missing or empty warehouse is an error.
    """
    from qkdb import warehouse

    where = home_dir(home)
    if ingested:
        check_warehouse(home)  # says what to do when nothing is ingested
    elif not warehouse.ingested_models(where):
        note(f"no model ingested in {where} yet: every row below is what `qkdb ingest --model NAME` can fetch")
    table = api.models_overview(where)
    if ingested:
        table = table.filter(table.column("ingested"))
    if Format(format) is Format.table:
        # For people: what they ask first (which model, whether it is in) leads, so that a narrow
        # terminal, which shows the columns that fit from the left, still shows it.
        lead = [c for c in LEAD_COLUMNS if c in table.column_names]
        table = table.select(lead + [c for c in table.column_names if c not in lead])
    write_table(table, format, output)


LEAD_COLUMNS = ("model", "family", "ingested", "heads", "series")

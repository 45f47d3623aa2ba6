"""`qkdb models`: the registry and what is ingested."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, check_warehouse, home_dir, note
from qkdb.cli.output import Format, RowsResult, write_result


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
    rows = api.models_overview_rows(where)
    if ingested:
        rows = [r for r in rows if r["ingested"]]
    names = list(rows[0]) if rows else ["model"]
    if Format(format) is Format.table:
        # For people: what they ask first (which model, whether it is in) leads, so that a narrow
        # terminal, which shows the columns that fit from the left, still shows it.
        lead = [c for c in LEAD_COLUMNS if c in names]
        names = lead + [c for c in names if c not in lead]
    # Rows, not an Arrow table: building one from Python values imports pandas (~0.3 s).
    write_result(RowsResult(names, [tuple(r[c] for c in names) for r in rows]), format, output)


LEAD_COLUMNS = ("model", "family", "ingested", "heads", "series")

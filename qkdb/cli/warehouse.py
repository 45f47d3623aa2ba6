"""`qkdb info` and `qkdb remove`: the warehouse itself."""

from __future__ import annotations

from typing import Annotated

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, check_warehouse, note
from qkdb.cli.output import Format, write_record


@app.command()
def info(
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format (json keeps the nesting; the others list key/value rows).")] = Format.table,
    json_out: Annotated[bool, typer.Option("--json", hidden=True, help="Same as --format json.")] = False,
    home: HomeOption = None,
) -> None:
    """Warehouse home, catalog path, table sizes, ingested models and library versions."""
    check_warehouse(home, need_models=False)  # a missing home is an error, never created
    write_record(api.info(home), Format.json if json_out else format)


@app.command()
def remove(
    model: Annotated[list[str], typer.Option("--model", "-m", help="Model to remove (repeatable).")],
    home: HomeOption = None,
) -> None:
    """Remove models from the warehouse (every table at once)."""
    check_warehouse(home)  # a missing or empty warehouse says so (and is not created)
    missing = []
    for m in model:
        if api.remove(m, home):
            note(f"removed {m}")
        else:
            missing.append(m)
    if missing:
        from qkdb.errors import WarehouseError

        raise WarehouseError(f"not in the warehouse: {', '.join(missing)}", kind="not_found")

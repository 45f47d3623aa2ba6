"""`qkdb info` and `qkdb remove`: the warehouse itself."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, check_warehouse, note, out_console
from qkdb.cli.output import Format, write_table


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@app.command()
def info(
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format (json keeps the nesting; the others list key/value rows).")] = Format.table,
    json_out: Annotated[bool, typer.Option("--json", hidden=True, help="Same as --format json.")] = False,
    home: HomeOption = None,
) -> None:
    """Warehouse home, catalog path, table sizes, ingested models and library versions."""
    check_warehouse(home, need_models=False)  # a missing home is an error, never created
    facts = api.info(home)
    if json_out or Format(format) is Format.json:
        typer.echo(json.dumps(facts, indent=2))
        return
    if Format(format) is not Format.table:
        import pyarrow as pa

        rows = [("home", facts["home"]), ("catalog", facts["catalog"]), ("catalog_bytes", str(facts["catalog_bytes"])),
                ("models", ",".join(facts["models"]))]
        rows += [(f"table_bytes.{k}", str(v)) for k, v in facts["table_bytes"].items()]
        rows += [(f"versions.{k}", str(v)) for k, v in facts["versions"].items()]
        write_table(pa.table({"key": [k for k, _ in rows], "value": [v for _, v in rows]}), format)
        return
    t = Table(show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("home", facts["home"])
    t.add_row("catalog", f"{facts['catalog']} ({_size(facts['catalog_bytes'])})")
    t.add_row("models", ", ".join(facts["models"]) or "(none ingested)")
    for name, n in facts["table_bytes"].items():
        t.add_row(f"table {name}", _size(n))
    t.add_row("versions", ", ".join(f"{k} {v}" for k, v in facts["versions"].items()))
    out_console().print(t)


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

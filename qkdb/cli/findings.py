"""`qkdb views`, `qkdb findings` and `qkdb describe`: the finding views and the data dictionary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, note, out_console
from qkdb.cli.output import Format, write_table
from qkdb.errors import QueryError

if TYPE_CHECKING:  # (at run time, imported where used: an ingest need not wait ~0.1 s for it)
    pass

FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
OutputOption = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")]

# The terminal table shows what a reader needs; every other format carries every column.
TABLE_COLUMNS = ("id", "statement", "scope", "seed_value", "measured", "status")  # measured: value [95% interval]


@app.command()
def views(
    tables: Annotated[bool, typer.Option("--tables", help="Also list the warehouse tables.")] = False,
    format: FormatOption = Format.table,
    output: OutputOption = None,
) -> None:
    """List every finding view with its one-line description (`qkdb describe NAME` for its columns)."""
    import pyarrow as pa

    from qkdb.warehouse import TABLES, load_view_files

    files = load_view_files()
    rows = [{"name": v.name, "kind": "view", "description": v.description, "depends": ", ".join(v.depends)}
            for v in sorted(files, key=lambda v: v.name)]
    if tables:
        rows = [{"name": t.name, "kind": "table", "description": t.doc, "depends": ""} for t in TABLES.values()] + rows
    schema = pa.schema([(c, pa.string()) for c in ("name", "kind", "description", "depends")])
    write_table(pa.Table.from_pylist(rows, schema=schema), format, output)




@app.command()
def findings(
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", help="Only these models (repeatable).")] = None,
    family: Annotated[Optional[list[str]], typer.Option("--family", help="Only models of these families (repeatable).")] = None,
    series: Annotated[Optional[list[str]], typer.Option("--series", help="Only checkpoints of these series (repeatable).")] = None,
    format: FormatOption = Format.table,
    output: OutputOption = None,
    home: HomeOption = None,
) -> None:
    """The seeds' headline findings: the seed's value, the value measured here with its 95% interval, and the verdict.

    A verdict is 'holds' or 'does not hold' only when the interval decides it, else 'inconclusive'.
    With --model/--family/--series every finding and its interval is recomputed on those models
    only (filters combine: a model must pass each one given).
    """
    import duckdb

    con = api.connect(home, read_only=True)
    try:
        if model or family or series:
            from qkdb.warehouse import restrict_models, select_models

            keep = select_models(con, model or (), family or (), series or ())
            restrict_models(con, keep)  # (recomputes the intervals for these models)
            note(f"findings on {len(keep)} model(s): {', '.join(keep)}")
        elif api.ensure_intervals(con):
            note("the stored intervals were out of date (an ingest still running or interrupted?): recomputed for this run")
        try:
            # A few dozen rows: fetch once, count the verdicts, then write (the view is costly to plan).
            result = con.sql("select * from findings").to_arrow_table()
        except duckdb.Error as exc:
            raise QueryError(f"the findings view failed: {str(exc).strip()}") from None
    finally:
        con.close()
    status = result.column("status").to_pylist()
    if Format(format) is Format.table and output is None:
        result = result.select(list(TABLE_COLUMNS))
    write_table(result, format, output)
    note(
        f"{status_counts(status)} (values with their 95% intervals; criteria, methods and all columns: "
        "--format csv/json/markdown, or `qkdb describe findings`)"
    )


def status_counts(status: list[str | None]) -> str:
    """'3 hold, 1 does not hold, 40 inconclusive, 31 without data'."""
    n = {s: status.count(s) for s in ("holds", "does not hold", "inconclusive", "no data")}
    return (
        f"{n['holds']} hold, {n['does not hold']} {'does' if n['does not hold'] == 1 else 'do'} not hold, "
        f"{n['inconclusive']} inconclusive, {n['no data']} without data"
    )


@app.command()
def describe(
    name: Annotated[str, typer.Argument(help="A table (e.g. heads) or view (e.g. taxonomy_fractions).")],
    format: FormatOption = Format.table,
    output: OutputOption = None,
    home: HomeOption = None,
) -> None:
    """Columns of a warehouse table or finding view, with their types and descriptions."""
    con = api.connect(home, read_only=True)
    try:
        from qkdb.warehouse import describe as describe_object

        d = describe_object(con, name)
    finally:
        con.close()
    import pyarrow as pa

    rows = pa.table({
        "column": [c for c, _, _ in d.columns],
        "type": [t for _, t, _ in d.columns],
        "description": [doc for _, _, doc in d.columns],
    })
    if Format(format) is not Format.table or output is not None:
        write_table(rows, format, output)
        return
    console = out_console()
    console.print(Text.assemble((d.name, "bold"), f" ({d.kind}): {d.description}"), soft_wrap=True)
    if d.seed:
        console.print(f"Seed: {d.seed}", markup=False, soft_wrap=True)
    if d.depends:
        console.print(f"Reads: {', '.join(d.depends)}", markup=False)
    table = Table(show_header=True, header_style="bold")
    for col in rows.column_names:
        table.add_column(col, overflow="fold")
    for c, t, doc in d.columns:
        table.add_row(c, t, doc)
    console.print(table)

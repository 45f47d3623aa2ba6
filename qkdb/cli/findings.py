"""`qkdb views`, `qkdb findings` and `qkdb describe`: the finding views and the data dictionary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, home_dir, note, open_warehouse, out_console
from qkdb.cli.output import Format, RowsResult, write_result, write_table
from qkdb.errors import QueryError

FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
OutputOption = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")]

# The terminal shows what a reader needs, one line per finding; every other format carries every column.
# measured: value [95% interval]; estimand: what the interval is about, shortened here ("models: these"
# or "models: like these"; in full in every other format).
TERMINAL_COLUMNS = ("id", "measured", "estimand", "seed_value", "status")
HEADERS = {"id": "id", "measured": "measured [95% interval]", "estimand": "models", "seed_value": "seed",
           "status": "status"}
SHORT = {"estimand": {"these models": "these", "models like these": "like these"}}
# What a narrow terminal may wrap inside its column (at spaces), in this order; ids and verdicts never
# give up a character (an id is a key: cut, the Q and K rows of a finding read alike). Where wrapping is
# not enough, the estimand's column goes first, then each finding becomes a record.
WRAP_ORDER = ("seed_value", "measured")
STATUS_COLOURS = {"holds": "green", "does not hold": "red", "inconclusive": "yellow", "no data": "bright_black"}


@app.command()
def views(
    tables: Annotated[bool, typer.Option("--tables", help="Also list the warehouse tables.")] = False,
    format: FormatOption = Format.table,
    output: OutputOption = None,
    home: HomeOption = None,
) -> None:
    """List every finding view with its one-line description (`qkdb describe NAME` for its columns).

    The views are the same in every warehouse (they ship with qkdb), so none need exist; --home is
    accepted like everywhere else and must not name a file.
    """
    home_dir(home)
    from qkdb.warehouse import TABLES, load_view_files

    files = load_view_files()
    rows = [(v.name, "view", v.description, ", ".join(v.depends)) for v in sorted(files, key=lambda v: v.name)]
    if tables:
        rows = [(t.name, "table", t.doc, "") for t in TABLES.values()] + rows
    # Rows, not an Arrow table: building one from Python values imports pandas (~0.3 s).
    write_result(RowsResult(["name", "kind", "description", "depends"], rows, ["string"] * 4), format, output)




@app.command()
def findings(
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", help="Only these models (repeatable).")] = None,
    family: Annotated[Optional[list[str]], typer.Option("--family", help="Only models of these families (repeatable).")] = None,
    series: Annotated[Optional[list[str]], typer.Option("--series", help="Only checkpoints of these series (repeatable).")] = None,
    all_rows: Annotated[bool, typer.Option("--all", help="Also list the findings without data (the terminal table; other formats always do).")] = False,
    format: FormatOption = Format.table,
    output: OutputOption = None,
    home: HomeOption = None,
) -> None:
    """The seeds' headline findings: the value measured here with its 95% interval, the seed's value, and the verdict.

    A verdict is 'holds' or 'does not hold' only when the interval decides it, else 'inconclusive'.
    The terminal shows one line per finding with data; --format csv/json/jsonl/markdown/parquet
    carry every row and column (statement, scope, criterion, interval method, ...).
    With --model/--family/--series every finding and its interval is recomputed on those models
    only (filters combine: a model must pass each one given).
    """
    import duckdb

    from qkdb import warehouse

    terminal = Format(format) is Format.table and output is None
    con = open_warehouse(home)
    try:
        if model or family or series:
            keep = warehouse.select_models(con, model or (), family or (), series or ())
            warehouse.restrict_models(con, keep)  # (recomputes the intervals for these models)
            note(f"findings on {len(keep)} model(s): {', '.join(keep)}")
            source = "findings"
        else:
            # The models' rows from one file, not one per model: the stamps' check and the staleness
            # check below both read them; the heads' from theirs, for the layer-subset notes (at
            # 140,000 heads reading every model's file took 0.7 s, a command of 0.25 s).
            warehouse.shadow_indexes(con, home_dir(home))
            # The rows stored when the models were published, while they match; else the view.
            source = warehouse.findings_source(con)
            if source == "findings" and api.ensure_intervals(con):
                note("the stored intervals were out of date (an ingest still running or interrupted?): "
                     "recomputed for this run")
        try:
            if terminal:
                cur = con.execute(f"select {', '.join(TERMINAL_COLUMNS)} from {source}")
                rows = [dict(zip(TERMINAL_COLUMNS, r)) for r in cur.fetchall()]
            else:
                result = con.sql(f"select * from {source}").to_arrow_table()
                rows = [{"id": i, "status": s} for i, s in zip(result.column("id").to_pylist(),
                                                                result.column("status").to_pylist())]
        except duckdb.Error as exc:
            raise QueryError(f"the findings view failed: {str(exc).strip()}") from None
        stale = api.stale_models(home_dir(home), con)
        subsets = api.layer_subset_notes(con)
    finally:
        con.close()
    for s in stale:
        note(s.message())
    for line in subsets:
        note(line + ("; rows marked * in the models column" if terminal else ""))
    counts = status_counts([r["status"] for r in rows])
    from qkdb.charts import claims

    claim_line = "claims: " + claims.claim_counts(claims.claim_states(rows).values())
    if not terminal:
        write_table(result, format, output)
        note(f"{counts} (values with their 95% intervals)")
        note(claim_line)
        return
    shown = rows if all_rows else [r for r in rows if r["status"] != "no data"]
    note(counts + ("" if all_rows or len(shown) == len(rows) else " (--all lists those too)"))
    note(claim_line)
    import shutil
    import sys

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    sys.stdout.write("".join(line + "\n" for line in compact_lines(shown, width, colour)))
    note("criteria, interval methods and every column: --format csv/json/markdown, or `qkdb describe findings`")


def compact_lines(rows: list[dict], width: int | None = None, colour: bool = False) -> list[str]:
    """The terminal table: a header and one line per row, in columns that fit ``width`` characters.

    Columns are as wide as their widest cell. When the total exceeds ``width``, the columns of
    :data:`WRAP_ORDER` narrow in turn, down to their header or their longest word, their cells
    wrapping at spaces onto more lines of the row: no value is cut. Where even that does not fit,
    each finding is one record: its id and verdict, then its values indented below. Status words
    are coloured when ``colour``.
    """
    import textwrap

    def cell(r: dict, c: str) -> str:
        if r.get(c) is None:
            return ""
        value = str(r[c])
        short = SHORT.get(c, {})
        head, sep, _ = value.partition(": ")
        # 'these models: layers 0-3 of 16' -> 'these*': the note above the table names the layers.
        return short[head] + "*" if sep and head in short else short.get(value, value)

    gap = "  "
    for cols in (list(TERMINAL_COLUMNS), [c for c in TERMINAL_COLUMNS if c != "estimand"]):
        header = [HEADERS[c] for c in cols]
        cells = [[cell(r, c) for c in cols] for r in rows]
        widths = {c: max(len(line[i]) for line in [header, *cells]) for i, c in enumerate(cols)}

        def over() -> int:
            return sum(widths.values()) + len(gap) * (len(cols) - 1) - (width or 0)

        if width is None:
            break
        for c in WRAP_ORDER:
            i = cols.index(c)
            least = max([len(header[i])] + [len(word) for line in cells for word in line[i].split()])
            widths[c] -= max(0, min(over(), widths[c] - least))
        if over() <= 0:
            break
    else:  # records carry every column, the estimand's too
        header = [HEADERS[c] for c in TERMINAL_COLUMNS]
        return _record_lines(header, [[cell(r, c) for c in TERMINAL_COLUMNS] for r in rows], width, colour)

    def style(text: str, k: int, status: str | None) -> str:
        if not colour:
            return text
        return typer.style(text, bold=True) if k == 0 else typer.style(text, fg=STATUS_COLOURS.get(status))

    lines = []
    for k, line in enumerate([header, *cells]):
        wrapped = [textwrap.wrap(text, widths[c], break_long_words=False) or [""] if c in WRAP_ORDER and k else [text]
                   for c, text in zip(cols, line)]
        for j in range(max(len(w) for w in wrapped)):
            parts = [(w[j] if j < len(w) else "").ljust(widths[c]) for c, w in zip(cols, wrapped)]
            if k == 0:
                parts = [style(p, 0, None) for p in parts]
            elif j == 0:
                parts[-1] = style(parts[-1], k, line[-1])
            lines.append(gap.join(parts).rstrip())
    return lines


def _record_lines(header: list[str], cells: list[list[str]], width: int, colour: bool) -> list[str]:
    """One record per finding, for a terminal too narrow for the columns: ``id  status``, then its values indented (wrapped at spaces)."""
    import textwrap

    lines = []
    for line in cells:
        status = line[-1]
        lines.append(f"{line[0]}  " + (typer.style(status, fg=STATUS_COLOURS.get(status)) if colour else status))
        for h, v in zip(header[1:-1], line[1:-1]):
            lines.extend(textwrap.wrap(f"{h}: {v}", max(20, width), initial_indent="  ", subsequent_indent="    ",
                                       break_long_words=False, break_on_hyphens=False))
    return lines


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
    con = open_warehouse(home, need_models=False)
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
    from rich.table import Table
    from rich.text import Text

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

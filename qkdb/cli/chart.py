"""`qkdb chart` (one seed figure to png/svg/pdf/html/json) and `qkdb report` (one offline HTML page)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, check_warehouse, home_dir, note, open_warehouse
from qkdb.errors import ChartError

ModelOption = Annotated[
    Optional[list[str]],
    typer.Option("--model", "-m", help="Model to show (repeatable; default: every standalone model and each series' latest checkpoint)."),
]
DEFAULT_REPORT = "qkdb-report.html"  # where `qkdb report` writes when stdout is a terminal and no -o is given
SeriesOption = Annotated[Optional[str], typer.Option("--series", "-s", help="Training series of the series-* figures (default: the first ingested).")]


@app.command()
def chart(
    name: Annotated[Optional[str], typer.Argument(help="Figure name (see --list).", show_default=False)] = None,
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="FILE.png, .svg, .pdf, .html (offline) or .json (Vega-Lite spec); default: the spec as JSON on stdout."),
    ] = None,
    model: ModelOption = None,
    series: SeriesOption = None,
    head: Annotated[
        Optional[list[str]],
        typer.Option("--head", help="Head LAYER.HEAD (e.g. 12.5) of a collage; repeatable for the 2×2 collages (default: the seeds' random.Random(42) sample)."),
    ] = None,
    scale: Annotated[float, typer.Option("--scale", help="PNG pixels per CSS pixel.", min=0.1, max=10)] = 2.0,
    list_: Annotated[bool, typer.Option("--list", "-l", help="List the figures, one per line, and exit.")] = False,
    source: Annotated[Optional[str], typer.Option("--source", help="Whose values a benchmark figure draws: 'qkdb' (this warehouse, default) or 'thesis' (the seeds' author).")] = None,
    metric: Annotated[Optional[str], typer.Option("--metric", help="plasticity-vs-benchmark's metric (default ap_drop; e.g. ap_overall, bias_strength).")] = None,
    benchmark: Annotated[Optional[str], typer.Option("--benchmark", "-b", help="A benchmark figure's benchmark (default: LongBench-Pro when a model meets it).")] = None,
    include_truncated: Annotated[bool, typer.Option("--include-truncated", help="Use benchmark length slices longer than their run's context budget (inputs cut; left out by default).")] = False,
    home: HomeOption = None,
) -> None:
    """Render one of the seeds' figures from the warehouse; the output's extension picks the format."""
    from qkdb.charts import registry

    if list_:
        import shutil
        import textwrap

        width = max(len(n) for n, _ in registry.listing())
        # On a terminal each description wraps under itself; in a pipe, one line per figure (for grep).
        room = shutil.get_terminal_size().columns - width - 2 if sys.stdout.isatty() else None
        for n, line in registry.listing():
            lines = textwrap.wrap(line, max(30, room), break_on_hyphens=False) if room else [line]
            typer.echo(f"{n:<{width}}  " + ("\n" + " " * (width + 2)).join(lines))
        return
    if not name:
        raise ChartError("give a figure name (qkdb chart NAME -o FILE), or --list to see them", kind="usage")
    options = _figure_options(registry.get(name), source=source, metric=metric, benchmark=benchmark)
    from qkdb.charts import chart as build_chart
    from qkdb.charts import render

    fmt = render.format_of(render.check_output(output)) if output else "json"  # before the queries
    heads = None if not head else (head[0] if len(head) == 1 else head)
    models = None if not model else (model[0] if len(model) == 1 else model)
    con = open_warehouse(home)
    try:
        from qkdb import warehouse

        # Every head's metrics and components, and every model's row, from the indexes (one file
        # each, not files a model).
        warehouse.shadow_indexes(con, home_dir(home), pca=True)
        if include_truncated:
            _set_param(con, "benchmark_truncated", "true")
        figure = build_chart(name, con, models=models, series=series, head=heads, **options)
    finally:
        con.close()
    if output is None:
        sys.stdout.write(render.render(figure, "json").decode())
        return
    t0 = time.perf_counter()
    render.save(figure, output, scale=scale)
    typer.echo(f"wrote {output} ({fmt}, {time.perf_counter() - t0:.1f} s)", err=True)


def _set_param(con, name: str, value_sql: str) -> None:
    """One parameter for this connection only (a temp view shadows ``params`` for every view)."""
    db = con.execute("select current_database()").fetchall()[0][0]
    con.execute(f'create or replace temp view params as select * replace ({value_sql} as {name}) from "{db}".main.params')


def _figure_options(figure, **given) -> dict:
    """The options given that the figure takes; one it does not take is a usage error (unknown names fail here too)."""
    import inspect

    taken = inspect.signature(figure.function()).parameters
    options = {k: v for k, v in given.items() if v is not None}
    for k in options:
        if k not in taken:
            raise ChartError(f"--{k} does not apply to {figure.name} (it applies to plasticity-vs-benchmark"
                             + (" and plasticity-retention" if k != "metric" else "") + ")", kind="usage")
    return options


def _report_connection(home, figures_only: bool = False):
    """The report's connection, where the findings come from, and whether their intervals were recomputed.

    The warehouse read-only, with current intervals and its base views snapshotted: every figure
    reads the same few base views, computed once, from memory after that. ``figures_only`` (the
    report's second process): the findings are not read there, so where they come from is not asked.
    """
    from qkdb import warehouse
    from qkdb.api import ensure_intervals

    con = open_warehouse(home)
    try:
        # The models and heads from the indexes first: whether the stored findings are current is
        # a fingerprint of every model's row (one file a model through the view: 0.2 s at 467).
        warehouse.shadow_indexes(con, home_dir(home))
        findings_from = "findings" if figures_only else warehouse.findings_source(con)
        recomputed = findings_from == "findings" and ensure_intervals(con)
        warehouse.snapshot(con, home=home_dir(home))
    except BaseException:
        con.close()
        raise
    return con, findings_from, recomputed


@app.command()
def report(
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help=f"HTML file to write; default: stdout when it is redirected, else {DEFAULT_REPORT} here."),
    ] = None,
    model: ModelOption = None,
    series: Annotated[Optional[list[str]], typer.Option("--series", "-s", help="Training series to include (repeatable; default: all ingested).")] = None,
    title: Annotated[str, typer.Option("--title", help="Page title.")] = "qkdb report",
    home: HomeOption = None,
) -> None:
    """One self-contained HTML page (works offline): models, findings and every figure the data supports."""
    from qkdb.charts import build_report, report_split

    to_terminal = False
    if output is None and sys.stdout.isatty():
        # Megabytes of HTML are no use on a terminal: the page goes to a file, named at the end.
        output, to_terminal = Path(DEFAULT_REPORT), True
    if output is not None and output.suffix.lower() not in (".html", ".htm"):
        raise ChartError(f"the report is HTML: give -o FILE.html, not {str(output)!r}")
    if output is not None:
        from qkdb.charts import render

        render.check_output(output)  # said before the figures are built, not after
    check_warehouse(home)  # a missing warehouse is said once, before any process is forked
    # A second process builds part of the figures (charts/report_split.py). It is forked before
    # this process opens any database; each then prepares its own connection the same way.
    helper = report_split.Helper.start(lambda: _report_connection(home, figures_only=True)[0],
                                       models=model or None, series=series or None)
    con = None
    try:
        con, findings_from, recomputed = _report_connection(home)
        if recomputed:
            typer.echo("the stored intervals of the findings were out of date: recomputed for this report", err=True)
        result = build_report(
            con, models=model or None, series=series or None, title=title, findings_from=findings_from, helper=helper,
            progress=lambda label, ok: typer.echo(f"  {'ok' if ok else 'not supported:'} {label}", err=True),
        )
    finally:
        if con is not None:
            con.close()
        if helper is not None:
            helper.close()
    if helper is not None and helper.failure:
        note(f"note: the report's second process did not help ({helper.failure}); its figures were built here")
    if output is None:
        sys.stdout.write(result.html)
    else:
        output.write_text(result.html, encoding="utf-8")
    # typer.echo, not the rich console: a summary line must not be wrapped at 80 columns.
    typer.echo(
        f"report{'' if output is None else ' ' + str(output.resolve() if to_terminal else output)}: {len(result.shown)} figure(s)"
        + (f", {len(result.missing)} not supported by the data (listed in the page)" if result.missing else "")
        + (" (stdout is a terminal, so the page went to this file; -o FILE.html names another)" if to_terminal else ""),
        err=True,
    )

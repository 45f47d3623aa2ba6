"""`qkdb benchmarks …`: long-context benchmark scores beside the geometry (docs/benchmarks-join.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, note
from qkdb.cli.output import Format, write_result
from qkdb.errors import UsageError

benchmarks_app = typer.Typer(
    name="benchmarks",
    help="Long-context benchmark scores (LongBench-Pro, RULER, your own) and which captured model stands for which benchmarked one.",
    no_args_is_help=True,
)
app.add_typer(benchmarks_app, name="benchmarks")

FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
OutputOption = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE.")]
ModeOption = Annotated[
    str,
    typer.Option("--mode", help="'nonthinking' (default), 'thinking', or 'all' (every mode, each its own rows; never averaged)."),
]


def _mode(mode: str) -> str:
    if mode not in ("nonthinking", "thinking", "all"):
        raise UsageError(f"--mode must be 'nonthinking', 'thinking' or 'all', got {mode!r}")
    return "%" if mode == "all" else mode


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _run(sql: str, fmt: Format, output: Path | None, home: Path | None, mode: str, empty=None) -> int:
    """Write ``sql``'s rows in the given mode; ``empty()`` raises instead when there are none."""
    from qkdb.query import Result

    pattern = _mode(mode)
    con = api.benchmarks_connection(home)
    try:
        # The benchmark views read params.benchmark_mode: this connection's own params (the session only).
        db = con.execute("select current_database()").fetchall()[0][0]
        con.execute(f'create temp view params as select * replace ({_quote(pattern)} as benchmark_mode) from "{db}".main.params')
        if empty is not None and not con.execute(f"select exists ({sql})").fetchall()[0][0]:
            empty()
        return write_result(Result(con, sql), fmt, output)
    finally:
        con.close()


LIST_SQL = """
select r.benchmark, r.bench_model, r.mode, r.context_budget, r.best_of,
    max(s.score) filter (where s.slice_kind = 'overall') as overall,
    string_agg(s.slice, ' ' order by s.length_tokens) filter (where s.slice_kind = 'token_length') as lengths,
    any_value(s.origin) as origin,
    -- Each mapping with its origin: the registry's (shipped) or the user's (map / import).
    (select string_agg(m.model || ' (' || m.match_kind || ', ' || if(m.origin = 'bundled', 'registry', 'yours') || ')',
                       ', ' order by m.model)
     from benchmark_models m where m.benchmark = r.benchmark and m.bench_model = r.bench_model) as captured_models
from benchmark_runs r
join benchmark_scores s on s.benchmark = r.benchmark and s.bench_model = r.bench_model and s.mode = r.mode
    and s.context_budget is not distinct from r.context_budget and s.best_of is not distinct from r.best_of
{where}
group by all
order by r.benchmark, r.bench_model, r.mode
"""


@benchmarks_app.command("list")
def list_runs(
    benchmark: Annotated[Optional[str], typer.Option("--benchmark", "-b", help="Only this benchmark.")] = None,
    mapped: Annotated[bool, typer.Option("--mapped", help="Only benchmarked models a captured model stands for.")] = False,
    mode: ModeOption = "nonthinking",
    format: FormatOption = Format.table,
    output: OutputOption = None,
    home: HomeOption = None,
) -> None:
    """List the benchmarked models with their overall score, the lengths scored and the captured models that stand for them."""
    conds = []
    if benchmark:
        _known_benchmark(benchmark, home)
        conds.append(f"r.benchmark = {_quote(benchmark)}")
    if mapped:
        conds.append("exists (select 1 from benchmark_models m where m.benchmark = r.benchmark and m.bench_model = r.bench_model)")
    n = _run(LIST_SQL.format(where=("where " + " and ".join(conds)) if conds else ""), format, output, home, mode)
    if n == 0:
        note("no benchmark run matches" + (f" (benchmark {benchmark!r})" if benchmark else ""))


def _known_benchmark(benchmark: str, home: Path | None) -> None:
    """Refuse a benchmark without scores (exit 4), naming the scored ones."""
    from qkdb.warehouse import check_benchmark

    con = api.benchmarks_connection(home)
    try:
        check_benchmark(con, benchmark)
    finally:
        con.close()


SHOW_SQL = """
select m.model, m.benchmark, m.bench_model, m.match_kind, s.mode, s.context_budget, s.best_of,
    s.slice_kind, s.slice, s.score, s.origin, s.source
from benchmark_models m
join benchmark_runs r on r.benchmark = m.benchmark and r.bench_model = m.bench_model
join benchmark_scores s on s.benchmark = r.benchmark and s.bench_model = r.bench_model and s.mode = r.mode
    and s.context_budget is not distinct from r.context_budget and s.best_of is not distinct from r.best_of
where (m.model = {name} or m.bench_model = {name}) {slices}
order by m.benchmark, s.mode, s.slice_kind = 'overall' desc, s.slice_kind, s.length_tokens, s.slice
"""


@benchmarks_app.command("show")
def show(
    model: Annotated[str, typer.Argument(help="A captured model (e.g. qwen3-4b) or a benchmarked one (e.g. Qwen3-4B).")],
    all_slices: Annotated[bool, typer.Option("--all-slices", help="Every slice (difficulty, task, language...), not only the overall score and the lengths.")] = False,
    mode: ModeOption = "nonthinking",
    format: FormatOption = Format.table,
    output: OutputOption = None,
    home: HomeOption = None,
) -> None:
    """The scores a model stands beside: its mapping (and how well it matches) and the run's overall and per-length scores."""
    slices = "" if all_slices else "and s.slice_kind in ('overall', 'token_length')"

    def empty():
        from qkdb.errors import InputError

        raise InputError(f"no benchmark scores for {model!r}: map it with `qkdb benchmarks map {model} BENCH_MODEL "
                         "--match-kind KIND` (or import a CSV of benchmark_models); `qkdb benchmarks list` shows the "
                         "benchmarked models", kind="not_found")

    _run(SHOW_SQL.format(name=_quote(model), slices=slices), format, output, home, mode, empty)


@benchmarks_app.command("import")
def import_files(
    paths: Annotated[list[Path], typer.Argument(help="LongBench-Pro summary files (<mode>_context-<N>_bon-<k>_summary.json, in a folder named for the model), folders of them (e.g. LongBench-Pro/output/), or CSV files of benchmark_scores' or benchmark_models' columns.")],
    home: HomeOption = None,
) -> None:
    """Import benchmark scores or model mappings; every file is checked before anything is stored, and a run imported again replaces its rows."""
    done = api.import_benchmarks(paths, home)
    scores = done["stored"].get("benchmark_scores", (0, 0))
    models = done["stored"].get("benchmark_models", (0, 0))
    parts = []
    if scores[0]:
        parts.append(f"{scores[0]} score rows of {len(done['runs'])} run(s) (replacing {scores[1]} stored)")
    if models[0]:
        parts.append(f"{models[0]} model mapping(s) (replacing {models[1]})")
    note(f"imported {len(done['files'])} file(s): " + ("; ".join(parts) or "nothing new"))
    for line in done["notes"]:
        note(line)


@benchmarks_app.command("map")
def map_model(
    model: Annotated[str, typer.Argument(help="The captured model (as ingested).")],
    bench_model: Annotated[str, typer.Argument(help="The benchmarked model it stands for, as the benchmark names it (e.g. Qwen3-4B).")],
    match_kind: Annotated[str, typer.Option("--match-kind", help="'exact' (the scored checkpoint is the captured one), 'base_vs_instruct' or 'other'.")],
    benchmark: Annotated[str, typer.Option("--benchmark", "-b", help="The benchmark.")] = "longbench-pro",
    note_text: Annotated[Optional[str], typer.Option("--note", help="What was captured and what was scored.")] = None,
    home: HomeOption = None,
) -> None:
    """Say which benchmarked model a captured model stands for (replaces its mapping for that benchmark)."""
    done = api.map_benchmark_model(model, bench_model, benchmark=benchmark, match_kind=match_kind, note=note_text, home=home)
    note(f"{model} stands for {bench_model} on {benchmark} ({match_kind})")
    for line in done["notes"]:
        note(line)

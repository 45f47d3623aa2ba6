"""The CLI through typer's runner: exit codes, data on stdout only, clear one-line errors."""

from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq
import pytest
import typer

from qkdb.cli.app import app
from qkdb.cli.output import human_size
from qkdb.errors import EXIT_CODES, QueryError

FACTS = ["--family", "Toy", "--gqa-ratio", "2", "--n-layers", "2"]


def _ingest(runner, dataset, *extra):
    return runner.invoke(app, ["ingest", "--path", str(dataset), "--model", "toy", *FACTS, "-q", "-j", "1", *extra])


def test_every_command_module_is_listed_and_every_listed_command_exists():
    import importlib

    from qkdb.cli.app import COMMANDS, registered_names

    for module, _ in set(COMMANDS.values()):
        importlib.import_module(f"qkdb.cli.{module}")
    assert registered_names() == set(COMMANDS)
    group = typer.main.get_command(app)
    for name, (_, summary) in COMMANDS.items():
        cmd = group.get_command(typer.Context(group), name)
        # `qkdb --help` lists the summary without loading the command: it must be the command's own.
        assert " ".join(cmd.help.split("\n\n")[0].split()) == summary, name


def test_ingest_then_query_formats(runner, dataset, tmp_path):
    result = _ingest(runner, dataset)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""  # messages go to stderr
    assert "ingested toy: 8 heads" in result.stderr

    q = "select layer, head, bias_strength from head_metrics order by bias_strength desc limit 5"
    out = runner.invoke(app, ["query", q, "--format", "csv"])
    assert out.exit_code == 0 and out.stderr == ""
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert len(rows) == 5 and [float(r["bias_strength"]) for r in rows] == sorted(
        (float(r["bias_strength"]) for r in rows), reverse=True
    )

    out = runner.invoke(app, ["query", "select layer, head from heads order by 1, 2", "-f", "jsonl"])
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert lines[0] == {"layer": 0, "head": 0} and len(lines) == 8

    out = runner.invoke(app, ["query", "select pc, r_q from pca where pc < 2 and layer = 0 and head = 0", "-f", "json"])
    assert [r["pc"] for r in json.loads(out.stdout)] == [0, 1]

    out = runner.invoke(app, ["query", "select 1 as one, 'a|b' as s", "-f", "markdown"])
    assert out.stdout.splitlines() == ["| one | s |", "|---|---|", "| 1 | a\\|b |"]

    target = tmp_path / "pc0.parquet"
    out = runner.invoke(app, ["query", "select * from pca where model='toy' and pc=0", "-f", "parquet", "-o", str(target)])
    assert out.exit_code == 0 and pq.read_table(target).num_rows == 8

    out = runner.invoke(app, ["query", "select model, count(*) as n from heads group by model"])
    assert out.exit_code == 0 and "toy" in out.stdout and "8" in out.stdout


@pytest.mark.parametrize(
    "sql", ["create table t (a int)", "drop view heads", "copy (select 1) to 'x.csv'", "select 1; delete from heads"]
)
def test_writing_statements_are_refused(runner, sql):
    result = runner.invoke(app, ["query", sql])  # (refused before any warehouse is looked for)
    assert result.exit_code == EXIT_CODES["input"]
    assert result.stdout == ""
    assert result.stderr.startswith("error: refused:") and "Traceback" not in result.stderr


def test_sql_error_is_one_line_without_traceback(runner, dataset):
    _ingest(runner, dataset)
    result = runner.invoke(app, ["query", "select no_such_column from heads"])
    assert result.exit_code == EXIT_CODES["input"]
    assert "no_such_column" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "^" not in result.stderr  # no caret drawing
    assert result.stdout == ""


def test_several_statements_print_in_turn_and_a_data_format_refuses_them(runner, dataset):
    _ingest(runner, dataset)
    both = runner.invoke(app, ["query", "select 'first' as a; select count(*) as n from heads"])
    assert both.exit_code == 0, both.stderr
    assert both.stdout.index("first") < both.stdout.index("8")  # the second result after the first
    assert "-- statement 1 of 2" in both.stderr and "-- statement 2 of 2" in both.stderr
    refused = runner.invoke(app, ["query", "select 1; select 2", "-f", "csv"])
    assert refused.exit_code == EXIT_CODES["input"] and refused.stdout == ""
    assert "2 statements, but --format csv" in refused.stderr


def test_a_list_or_struct_column_is_one_json_cell_in_csv(runner, dataset):
    # (sink_card's layer_rates is a list per row: pyarrow's CSV writer refuses lists)
    _ingest(runner, dataset)
    got = runner.invoke(app, ["query", "select [0.5::double, 1] as l, {'a': 2} as s, 3 as n, null::double[] as e",
                              "-f", "csv"])
    assert got.exit_code == 0, got.stderr
    assert got.stdout.splitlines() == ['"l","s","n","e"', '"[0.5, 1.0]","{""a"": 2}",3,']


def test_query_parses_its_sql_once(runner, dataset, monkeypatch):
    import duckdb

    _ingest(runner, dataset)
    real, calls = duckdb.extract_statements, []

    def counted(sql):  # DuckDB's own parser, counted
        calls.append(sql)
        return real(sql)

    monkeypatch.setattr(duckdb, "extract_statements", counted)
    sql = "select count(*) as n from heads; select 2 as two"
    result = runner.invoke(app, ["query", sql, "-f", "markdown"])
    assert result.exit_code == 0, result.stderr
    assert "| 8 |" in result.stdout and "| 2 |" in result.stdout
    assert calls == [sql]


def test_parsed_statements_run_as_parsed(home):
    import duckdb

    from qkdb import api
    from qkdb.query import check_read_only, run_query

    api.connect(home, read_only=False).close()  # an empty warehouse
    statements = check_read_only("select 40 + 2 as x; explain select 1")
    with run_query(statements, home) as results:
        assert [r.statement for r in results] == statements  # the parsed objects, not their text again
        names, batches = results[0].rows()
        assert names == ["x"] and list(batches) == [[(42,)]]
        assert results[1].reader().read_all().column_names == ["explain_key", "explain_value"]
    # Statements parsed elsewhere are still checked: a writing one is refused before any runs.
    with pytest.raises(QueryError, match="refused: DELETE"):
        with run_query(check_read_only("select 1") + duckdb.extract_statements("delete from heads"), home):
            pass


def test_unknown_model_suggests_close_names(runner, dataset):
    result = runner.invoke(app, ["ingest", "--path", str(dataset), "--model", "qwen3-8", "-q"])
    assert result.exit_code == EXIT_CODES["not_found"]  # an unknown name: the same code as in `describe`, `remove`
    assert "unknown model 'qwen3-8'" in result.stderr and "qwen3-8b" in result.stderr


def test_missing_key_folder_is_named(runner, dataset):
    result = runner.invoke(app, ["ingest", "--path", str(dataset), "--model", "toy", "--family", "Toy",
                                 "--gqa-ratio", "1", "--n-layers", "2", "-q"])
    assert result.exit_code == EXIT_CODES["input"]
    assert "key head folders missing: l00h02k (read by l00h02q)" in result.stderr
    assert "with --gqa-ratio 2 the query heads read exactly the key folders there are" in result.stderr


@pytest.mark.parametrize(("value", "ok"), [("all", True), ("300", True), ("1", False), ("many", False)])
def test_fit_rows_takes_a_count_or_all(runner, dataset, value, ok):
    result = _ingest(runner, dataset, "--fit-rows", value)
    if ok:
        assert result.exit_code == 0, result.stderr
    else:
        assert result.exit_code == EXIT_CODES["input"]
        assert result.stderr.startswith("error: --fit-rows takes a number of vectors") and "Traceback" not in result.stderr


def test_out_of_range_option_is_a_one_line_error(runner, dataset):
    result = _ingest(runner, dataset, "--points", "-3")
    assert result.exit_code == EXIT_CODES["input"]
    assert result.stderr == "error: points must be >= 0, got -3\n"


def test_progress_display_counts_every_head_of_a_real_ingest(dataset, tmp_path):
    import qkdb
    from qkdb.cli.progress import Bars, IngestDisplay

    events = []
    with Bars(terminal=True) as bars:
        display = IngestDisplay(bars)

        def record(event, **info):
            events.append((event, info.get("model")))
            display(event, **info)

        qkdb.ingest(dataset, "toy", family="Toy", gqa_ratio=2, n_layers=2, workers=1, points=0,
                    home=tmp_path / "h", progress=record)
        task = bars._rich.tasks[bars._tasks["heads toy"]]
    assert [e for e in events if e[0] == "head"] == [("head", "toy")] * 8  # every event names its model
    assert display.done["toy"] == display.totals["toy"] == 8
    assert task.completed == task.total == 8 and task.fields["detail"] == "8/8 heads"


def test_progress_off_a_terminal_is_plain_lines_for_long_steps_only(capsys):
    from qkdb.cli import progress

    now = [0.0]
    with progress.Bars(terminal=False, clock=lambda: now[0]) as bars:
        bars.update("slow", "slow step", 0, 30, "0/30 files")  # (a step's clock starts at its first report)
        bars.update("quick", "quick step", 1, 2)
        bars.update("quick", "quick step", 2, 2)  # done within 2 s: no line at all
        for t in (1.0, progress.FIRST_LINE, 5.0, progress.FIRST_LINE + progress.EVERY, 20.0):
            now[0] = t
            bars.update("slow", "slow step", t, 30, f"{t:g}/30 files")
        now[0] = 31.0
        bars.update("slow", "slow step", 30, 30, "30/30 files")
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["slow step: 2/30 files (2 s)", "slow step: 12/30 files (12 s)", "slow step: 30/30 files (31 s)"]


def test_debug_shows_the_traceback_and_keeps_the_exit_code(runner, dataset):
    _ingest(runner, dataset)
    plain = runner.invoke(app, ["query", "drop view heads"])
    for line in (["--debug", "query", "drop view heads"], ["query", "drop view heads", "--debug"]):
        result = runner.invoke(app, line)
        assert result.exit_code == plain.exit_code == EXIT_CODES["input"], result.output
        assert "Traceback (most recent call last)" in result.stderr and "Traceback" not in plain.stderr
        assert result.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]


def test_models_lists_registry_and_ingest_status(runner, dataset):
    _ingest(runner, dataset)
    out = runner.invoke(app, ["models", "-f", "csv"])
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(out.stdout))}
    assert rows["llama3.2-3b"]["ingested"] == "false" and rows["llama3.2-3b"]["gqa_ratio"] == "3"
    assert rows["toy"]["ingested"] == "true" and rows["toy"]["heads"] == "8"
    only = runner.invoke(app, ["models", "--ingested", "-f", "csv"])
    assert [r["model"] for r in csv.DictReader(io.StringIO(only.stdout))] == ["toy"]


def test_info_and_remove(runner, dataset, home):
    _ingest(runner, dataset)
    out = runner.invoke(app, ["info", "--json"])
    facts = json.loads(out.stdout)
    assert facts["home"] == str(home) and facts["models"] == ["toy"] and facts["table_bytes"]["heads"] > 0
    assert runner.invoke(app, ["remove", "--model", "toy"]).exit_code == 0
    again = runner.invoke(app, ["remove", "--model", "toy"])
    assert again.exit_code == EXIT_CODES["not_found"] and "holds no model yet" in again.stderr


def _info_rows(fmt: str, text: str) -> list[tuple[str, str]]:
    """The key/value rows `qkdb info -f FMT` printed, read back from its output."""
    if fmt == "csv":
        header, *rows = csv.reader(io.StringIO(text))
        assert header == ["key", "value"]
        return [tuple(r) for r in rows]
    if fmt == "jsonl":
        return [(d["key"], d["value"]) for d in map(json.loads, text.splitlines())]
    if fmt == "markdown":
        header, rule, *rows = text.splitlines()
        assert header == "| key | value |" and rule == "|---|---|"
        return [tuple(c.strip() for c in r.strip("|").split(" | ")) for r in rows]
    if fmt == "line":  # one record: `key = value` a line, keys right-aligned
        return [tuple(part.strip() for part in r.split(" = ", 1)) for r in text.splitlines()]
    lines = text.splitlines()  # table: a header row drawn with heavy bars, then the rows
    assert [c.strip() for c in lines[1].strip("┃").split("┃")] == ["key", "value"]
    return [tuple(c.strip() for c in r.strip("│").split("│")) for r in lines if r.startswith("│")]


def test_info_lists_the_same_rows_in_every_format(runner, dataset, home):
    from qkdb import api

    _ingest(runner, dataset)  # (once: every format reads the same warehouse)
    facts = api.info(home)
    for fmt in ("table", "csv", "jsonl", "markdown", "line"):
        size = human_size if fmt == "table" else str  # the table is for people; the data keep bytes
        expected = [
            ("home", str(home)),
            ("catalog", str(home / "qk.duckdb")),
            ("catalog_bytes", size(facts["catalog_bytes"])),
            ("models", "toy"),
            *[(f"table_bytes.{t}", size(n)) for t, n in facts["table_bytes"].items()],
            *[(f"versions.{lib}", v) for lib, v in facts["versions"].items()],
        ]
        assert "table_bytes.heads" in dict(expected) and "versions.duckdb" in dict(expected)
        out = runner.invoke(app, ["info", "-f", fmt])
        assert out.exit_code == 0, out.stderr
        assert _info_rows(fmt, out.stdout) == expected, fmt


def test_human_size():
    assert [human_size(n) for n in (0, 1023, 1024, 1536, 5 * 2**20 + 2**19, 3 * 2**40)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.5 MiB", "3.0 TiB"]


def test_info_as_json_keeps_the_nesting(runner, dataset, home):
    from qkdb import api

    _ingest(runner, dataset)
    for args in (["-f", "json"], ["--json"]):
        out = runner.invoke(app, ["info", *args])
        assert out.exit_code == 0, out.stderr
        assert json.loads(out.stdout) == api.info(home)
        assert list(json.loads(out.stdout)) == ["home", "catalog", "catalog_bytes", "models", "stale", "table_bytes", "versions"]


def test_home_option_overrides_environment(runner, dataset, tmp_path):
    other = tmp_path / "other-home"
    result = _ingest(runner, dataset, "--home", str(other))
    assert result.exit_code == 0
    assert (other / "qk.duckdb").exists()
    out = runner.invoke(app, ["query", "select count(*) as n from heads", "-f", "csv", "--home", str(other)])
    assert out.stdout.splitlines() == ["\"n\"", "8"]


def test_simulate_help_defaults_are_the_simulators():
    from qkdb.cli import simulate as cli_simulate
    from qkdb.ingest import Ranges, Sinks

    assert (cli_simulate.SLOPE_RATIO, cli_simulate.NEGATIVE_FRACTION) == (Ranges.slope_ratio, Ranges.negative_fraction)
    assert cli_simulate.SINK_LOGIT == Sinks.logit


def test_simulate_plants_sinks_that_the_ingest_finds(runner, tmp_path):
    out, home = tmp_path / "sinks", tmp_path / "home"
    result = runner.invoke(app, ["simulate", "-o", str(out), "--layers", "2", "--q-heads", "4", "--kv-heads", "2",
                                 "--head-dim", "16", "--max-position", "32", "--examples", "4", "--sinks", "0.5",
                                 "--model", "toy-sinks"])
    assert result.exit_code == 0, result.output
    assert "every position, sinks in 50% of the query heads" in result.stderr
    assert runner.invoke(app, ["ingest", "--path", str(out), "--home", str(home), "--no-plasticity"]).exit_code == 0
    got = runner.invoke(app, ["query", "select n_heads, n_sink_heads, status from sink_rate", "-f", "csv", "--home", str(home)])
    assert got.stdout.splitlines()[1:] == ['8,4,"measured"']


def test_simulated_sinks_default_to_short_texts(runner, tmp_path):
    # (every position of a 4,096-token text is 4,096 queries per text and head: 64 tokens unless asked)
    from qkdb.ingest.sources.layout import read_head

    out = tmp_path / "sinks"
    result = runner.invoke(app, ["simulate", "-o", str(out), "--layers", "1", "--q-heads", "2", "--kv-heads", "1",
                                 "--head-dim", "8", "--examples", "2", "--sinks", "0.5"])
    assert result.exit_code == 0, result.output
    q = read_head(next(out.glob("l00h00q*")) / "data.parquet")
    assert q.positions.max() == 63 and len(q.positions) == 2 * 64


def test_help_and_a_query_load_neither_numpy_nor_pyarrow_and_a_query_no_other_command(tmp_path, dataset):
    # The interactive commands start fast because the layers load only what a command needs.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from qkdb.cli.app import app\n"
        "try:\n"
        "    app(sys.argv[1:], prog_name='qkdb')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('numpy', 'pyarrow', 'altair', 'qkdb.cli.ingest') if m in sys.modules), file=sys.stderr)\n"
    )
    home = tmp_path / "home"
    from qkdb import api

    api.ingest(dataset, "toy", family="Toy", gqa_ratio=2, n_layers=2, workers=1, points=0, home=home)
    loaded = {}
    for args in (["--help"], ["query", "--home", str(home), "select 1"]):
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
        loaded[args[0]] = out.stderr.strip().splitlines()[-1]
    # Help lists the commands without loading them; a query loads its own module only.
    assert loaded == {"--help": "[]", "query": "[]"}, loaded


def test_several_models_refresh_the_findings_once_and_leave_them_current(runner, tmp_path, monkeypatch):
    import qkdb
    from qkdb import pipeline, warehouse
    from helpers.datasets import make_dataset

    calls = []
    real = pipeline.refresh_intervals
    monkeypatch.setattr(pipeline, "refresh_intervals", lambda home: calls.append(home) or real(home))
    from qkdb.ingest.sources.layout import write_metadata

    a, b = make_dataset(tmp_path / "a", n=300), make_dataset(tmp_path / "b", n=300, seed=1)
    write_metadata(a, {"model": "a"})
    write_metadata(b, {"model": "b"})
    home = tmp_path / "home"
    result = runner.invoke(app, ["ingest", "--path", str(a), "--path", str(b), *FACTS, "-q", "-j", "1", "--home", str(home)])
    assert result.exit_code == 0, result.stderr
    assert calls == [home]  # once for the two models, not once each
    con = qkdb.connect(home)
    try:
        assert len(con.execute("select model from models").fetchall()) == 2
        assert warehouse.intervals_current(con)
    finally:
        con.close()
    calls.clear()
    results = qkdb.api.ingest_many([(a, "a2"), (b, "b2")], home=home, workers=1, **{"family": "Toy", "gqa_ratio": 2, "n_layers": 2})
    assert len(results) == 2 and calls == [home]


def test_several_models_are_each_said_as_they_finish_not_at_the_end_of_the_batch(tmp_path):
    import subprocess
    import sys
    import time

    from helpers.datasets import make_dataset
    from qkdb.ingest.sources.layout import write_metadata
    from qkdb.warehouse import store

    a, b = make_dataset(tmp_path / "a", n=300), make_dataset(tmp_path / "b", n=300, seed=1)
    write_metadata(a, {"model": "a"})
    write_metadata(b, {"model": "b"})
    home = tmp_path / "home"
    lock = store.acquire_model(home, "b")  # b waits for it (--wait): the batch cannot end before we let it
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkdb", "ingest", "--path", str(a), "--path", str(b), *FACTS, "-q", "-j", "1",
         "--wait", "120", "--home", str(home)],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        first = proc.stderr.readline()
        while first.startswith("note: "):  # (a's notes come before it is said: its frequencies are fitted)
            first = proc.stderr.readline()
        assert first.startswith("ingested a: "), first
        time.sleep(0.5)
        assert proc.poll() is None and store.ingested_models(home) == ["a"]  # said while b still waited
    finally:
        lock.release()
    out, rest = proc.communicate(timeout=300)
    assert proc.returncode == 0, rest
    rest = "".join(line for line in rest.splitlines(keepends=True) if not line.startswith("note: "))
    assert out == "" and rest.startswith("ingested b: ")
    assert store.ingested_models(home) == ["a", "b"]


def test_version_prints_the_installed_version(runner):
    from qkdb._version import version

    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0
    assert out.stdout.strip() == f"qkdb {version()}"


@pytest.mark.parametrize(("typed", "meant"), [("quer", "query"), ("benchmark", "benchmarks"), ("finding", "findings")])
def test_a_mistyped_command_is_told_the_one_it_resembles(runner, typed, meant):
    out = runner.invoke(app, [typed])
    assert out.exit_code == 2
    assert f"Did you mean '{meant}'" in out.stderr


def test_an_unknown_command_without_a_neighbour_points_to_the_listing(runner):
    out = runner.invoke(app, ["zzz"])
    assert out.exit_code == 2
    assert "No such command 'zzz'" in out.stderr and "Did you mean" not in out.stderr
    assert "`qkdb -h` for help" in out.stderr


@pytest.mark.parametrize("args, said", [
    (["query"], "error: Missing argument 'sql'. (`qkdb query -h` for help)"),
    (["chart", "--bogus"], "error: No such option: --bogus (`qkdb chart -h` for help)"),
    (["models", "-f", "nope"], "error: Invalid value for '--format' / '-f': 'nope' is not one of"),
    (["benchmarks", "list", "--nope"], "error: No such option: --nope"),
])
def test_a_usage_error_is_one_error_line_with_exit_2(args, said):
    # issue 47: typer's five-line panel broke docs/cli.md's promise of one `error:` line (a real process:
    # the panel is drawn by the framework's standalone mode, which the in-process runner also goes through).
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "qkdb", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), done.stderr


def test_describe_an_unknown_name_is_not_found(runner, tmp_path):
    from qkdb import api

    api.connect(tmp_path / "h", read_only=False).close()  # a warehouse (a writer creates it)
    out = runner.invoke(app, ["describe", "nope", "--home", str(tmp_path / "h")])
    assert out.exit_code == EXIT_CODES["not_found"] and "no table or view named 'nope'" in out.stderr


def test_a_process_that_runs_the_cli_again_builds_each_command_once(runner, home):
    """Typer builds the root group again at every run: a command built once is not built with it again."""
    from qkdb.cli.app import _load

    first = runner.invoke(app, ["models", "--format", "csv"])
    assert first.exit_code == 0, first.stderr
    built = _load("models")["models"]
    root = typer.main.get_command(app)
    assert "models" not in root.commands  # (taken from the module's build, not made again)
    assert root.get_command(typer.Context(root), "models") is built
    again = runner.invoke(app, ["models", "--format", "csv"])
    assert (again.exit_code, again.stdout, again.stderr) == (0, first.stdout, first.stderr)

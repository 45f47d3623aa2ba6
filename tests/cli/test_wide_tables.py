"""Tables wider than the terminal (issue 32): the columns that fit, whole; the rest elided with a note.

Driven in a real pseudo-terminal 100 columns wide, as a person at a laptop would see them:
`qkdb query`, `qkdb models`, `qkdb shell` and `qkdb findings` (whose ids are keys, never cut).
"""

from __future__ import annotations

import csv
import io
import re

import pytest

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.table_fit import LONG_TEXT_MIN, SHORT, fit_columns, frame_width
from qkdb.ingest import registry
from qkdb.ingest.capture.simulate import simulate

from helpers.terminal import finish, spawn_qkdb

WIDTH = 100
SIM = dict(layers=2, q_heads=4, kv_heads=2, head_dim=16, vectors=300, workers=1)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """Two small Qwen3 models under their registry names (so the findings' long ids have data) and one other."""
    base = tmp_path_factory.mktemp("wide")
    home = base / "home"
    for seed, name in enumerate(("qwen3-0.6b", "qwen3-1.7b", "sim-c")):
        simulate(base / name, model=name, family="Qwen3" if name.startswith("qwen3") else "Sim C", seed=seed, **SIM)
        api.ingest(base / name, home=home, workers=1)
    return home


def _screen(*args: str, home, width: int = WIDTH) -> list[str]:
    """What ``qkdb ARGS`` shows on a terminal ``width`` columns wide (stdout and stderr), line by line, without colour codes."""
    child = spawn_qkdb(*args, "--home", str(home), columns=width, timeout=120)
    assert finish(child, timeout=120) == 0, child.transcript.getvalue()
    return [ANSI.sub("", line) for line in child.transcript.getvalue().replace("\r\n", "\n").splitlines()]


def _table(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The header cells and body rows of the boxed table among ``lines``."""
    header = next(line for line in lines if line.startswith("┃"))
    body = [line for line in lines if line.startswith("│")]
    cells = lambda line, bar: [c.strip() for c in line.strip(bar).split(bar)]  # noqa: E731
    return cells(header, "┃"), [cells(line, "│") for line in body]


def _columns(home, sql: str) -> list[str]:
    con = api.connect(home, read_only=True)
    try:
        return [d[0] for d in con.execute(sql).description]
    finally:
        con.close()


def test_fitting_never_squeezes_a_column_below_its_header_or_its_short_values():
    names = ["id", "a_long_header_name", "statement", "n"]
    rows = [["003.F4.large_qwen3.position_dominated", "1", "x " * 80, "7"], ["id2", "22", "short", "8"]]
    for width in (60, 80, 100, 140, 400):
        fit = fit_columns(names, rows, width)
        shown = dict(zip(fit.columns, fit.widths))
        assert frame_width(fit.widths + ([1] if fit.elided else [])) <= width
        assert fit.columns == list(range(len(fit.columns))) and fit.elided == len(names) - len(fit.columns)
        assert shown[0] == len(rows[0][0])  # a key: whole, on one line
        if 1 in shown:
            assert shown[1] == len("a_long_header_name")
        if 2 in shown:  # long text wraps, but never in fewer than LONG_TEXT_MIN characters
            assert LONG_TEXT_MIN <= shown[2] <= len(rows[0][2].rstrip()) + 1
    assert fit_columns(names, rows, 60).elided == 3 and fit_columns(names, rows, 70).elided == 2
    assert fit_columns(names, rows, 400).elided == 0
    everything = fit_columns(names, rows, None)  # a file or a pipe: every column, natural widths
    assert everything.elided == 0 and everything.widths == [37, 18, 160, 1]
    assert SHORT >= len("003.F4.large_qwen3.position_dominated")


def test_query_shows_the_columns_that_fit_whole_and_says_how_many(warehouse):
    sql = "from head_metrics limit 3"
    columns = _columns(warehouse, sql)
    lines = _screen("query", sql, home=warehouse)
    assert max(len(line) for line in lines) <= WIDTH
    header, body = _table(lines)
    assert header[-1] == "\u2026" and header[:-1] == [c for c in columns if c in header]  # whole names, in order
    assert len(header) - 1 >= 5 and len(body) == 3  # one line per row: no cell broken over lines
    assert f"{len(header) - 1} of {len(columns)} columns shown; --format line (one record per row) or --format csv for all" in lines
    hidden = next(line for line in lines if line.startswith("hidden: "))
    assert hidden.startswith("hidden: " + ", ".join(c for c in columns if c not in header)[:20])


# The three examples: what the user asked for must survive a narrow terminal.
NARROW = [  # (sql, the columns a narrow terminal must show, and those it must show from 100 columns on)
    ("from findings", ["id", "measured"], ["status"]),
    # issue 47: metrics before model facts (it showed 10 columns of model facts and no metric)
    ("select * from head_metrics limit 3", ["model", "layer", "head"], ["pos_var_q", "pos_var_k"]),
    # the row's label (it was the hidden column)
    ("from taxonomy_fractions where scope = 'family'", ["scope", "family", "category", "fraction"], []),
]


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize(("sql", "wanted", "from_100"), NARROW, ids=["findings", "head_metrics", "taxonomy_fractions"])
def test_a_narrow_terminal_drops_context_never_the_values(warehouse, sql, wanted, from_100, width):
    wanted = wanted + (from_100 if width >= 100 else [])
    columns = _columns(warehouse, sql)
    lines = _screen("query", sql, home=warehouse, width=width)
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in table) <= width, "\n".join(lines)
    header, _ = _table(lines)
    assert set(wanted) <= set(header), (header, columns)
    shown = [c for c in header if c != "\u2026"]
    assert shown == [c for c in columns if c in shown]  # the table's own order
    if sql.startswith("select * from head_metrics"):
        # Keys, then metrics: not one of them is a model fact or an all-NULL column
        assert sum(c not in ("model", "family", "layer", "head", "kv_head") for c in shown) >= 2
        assert not {"series", "series_order", "phase", "step", "n_layers", "head_dim"} & set(shown), shown
    if "\u2026" in header:  # what is elided is context, after the values
        assert not {"measured", "fraction"} & (set(columns) - set(shown))
        assert any(line.startswith("hidden: ") for line in lines)


@pytest.mark.parametrize("width", [80, 100])
def test_line_format_is_the_expanded_mode_of_a_narrow_table(warehouse, width):
    lines = _screen("query", "from findings limit 2", "-f", "line", home=warehouse, width=width)
    records = "\n".join(lines).split("\n\n")
    assert len(records) == 2
    assert any(line.strip().startswith("statement = ") for line in records[0].splitlines())


def test_line_format_and_files_carry_every_column(runner, warehouse, tmp_path):
    sql = "from head_metrics limit 2"
    columns = _columns(warehouse, sql)
    out = runner.invoke(app, ["query", sql, "-f", "line", "--home", str(warehouse)])
    assert out.exit_code == 0, out.output
    records = out.stdout.split("\n\n")
    assert len(records) == 2
    names = [line.split(" = ", 1)[0].strip() for line in records[0].strip("\n").splitlines()]
    assert names == columns
    # A table written to a file (or a pipe) has no edge: every column, nothing elided.
    target = tmp_path / "t.txt"
    assert runner.invoke(app, ["query", sql, "-o", str(target), "--home", str(warehouse)]).exit_code == 0
    header, body = _table(target.read_text().splitlines())
    assert header == columns and len(body) == 2


def test_models_fits_with_the_ingest_status_in_view(warehouse):
    lines = _screen("models", home=warehouse)
    assert max(len(line) for line in lines) <= WIDTH
    header, body = _table(lines)
    assert header[:4] == ["model", "family", "ingested", "heads"]
    n_models = len(registry.load_registry()) + 1  # the registry and sim-c
    assert len(body) == n_models  # one line each (it was 171 lines of 4-character columns)
    assert {r[0] for r in body if r[2] == "True"} == {"qwen3-0.6b", "qwen3-1.7b", "sim-c"}


def test_models_at_80_columns_hides_an_all_null_column_before_the_head_count(warehouse):
    lines = _screen("models", home=warehouse, width=80)
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    header, _ = _table(lines)
    assert "heads" in header and "series" not in header  # every model here is outside a series: NULL


def test_every_line_fits_the_terminal_notes_wrapped(warehouse):
    # issue 47: `COLUMNS=120 qkdb findings` printed 125-character lines; notes of ~200 characters ran on.
    for width in (80, 120):
        lines = _screen("findings", home=warehouse, width=width)
        assert max(len(line) for line in lines) <= width, [line for line in lines if len(line) > width]
        assert any(line.startswith("claims: ") for line in lines)
        wrapped = [i for i, line in enumerate(lines) if line.startswith("  ") and not line.startswith("   ")]
        assert wrapped, "a long note wraps, its continuation indented"
    lines = _screen("chart", "--list", home=warehouse)
    assert max(len(line) for line in lines) <= WIDTH, [line for line in lines if len(line) > WIDTH]


def test_shell_tables_fit_and_say_how_to_see_every_column(warehouse):
    child = spawn_qkdb("shell", "--home", str(warehouse), columns=WIDTH, timeout=120)
    child.expect_exact("qkdb> ")
    child.send("from findings;\r")
    child.expect_exact("qkdb> ")
    lines = [ANSI.sub("", line) for line in child.before.replace("\r\n", "\n").splitlines()]
    child.send("\\x\r")  # psql's spelling of the expanded mode
    child.expect_exact("qkdb> ")
    assert "expanded mode on" in child.before
    child.send("select 1 as one, 'x' as two;\r")
    child.expect_exact("qkdb> ")
    as_lines = child.before.replace("\r\n", "\n")
    child.send(".x\r")
    child.expect_exact("qkdb> ")
    assert "expanded mode off (output format: table)" in child.before
    child.send("quit\r")
    assert finish(child) == 0
    n_rows = api.connect(warehouse, read_only=True).execute("select count(*) from findings").fetchone()[0]
    header, body = _table(lines)
    assert max(len(line) for line in lines) <= WIDTH and header[0] == "id"
    assert len([r for r in body if r[0]]) == n_rows  # it was 1,800+ lines of 2-character columns
    # Only values wrap (a measured value longer than its column), never a key: every row starts with its id
    assert all(not r[0] or re.fullmatch(r"(\d{3}|attn|rope)\.[\w.]+", r[0]) for r in body)
    assert any(re.fullmatch(r"\d+ of \d+ columns shown; \.x \(expanded: one record per row\) or \.format csv for all", line)
               for line in lines)
    assert {"measured", "status"} <= set(header)  # the values, before the finding's wording
    assert "one = 1" in as_lines and "two = x" in as_lines


def test_findings_keeps_every_id_whole_at_100_columns(runner, warehouse):
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["findings", "-f", "csv", "--home", str(warehouse)]).stdout)))
    shown = [r for r in rows if r["status"] != "no data"]
    assert {"003.F1.small_qwen3.q", "003.F1.small_qwen3.k"} <= {r["id"] for r in shown}
    lines = _screen("findings", home=warehouse)
    assert max(len(line) for line in lines) <= WIDTH
    text = "\n".join(lines)
    for r in shown:
        # The whole id starts a line of its own row (ids are keys: the Q and K rows must differ).
        assert re.search(rf"^{re.escape(r['id'])}\s", text, re.MULTILINE), r["id"]
        # The seed's value and the interval are whole too (a long one wraps inside its column).
        for value in (r["seed_value"], r["measured"]):
            assert all(word in text for word in value.split()), value
    assert "\u2026" not in text


def test_a_plain_table_off_a_terminal_is_written_as_rich_would_print_it():
    # `qkdb models` on 467 models: rich lays out every cell (a second); plain cells are padded directly,
    # to the same bytes. Cells rich would read as markup or emoji codes, or wide characters, keep rich.
    import io

    from rich.console import Console
    from rich.table import Table

    from qkdb.cli import output
    from qkdb.cli.table_fit import fit_columns, frame_width

    def by_rich(names, cells):
        fit = fit_columns(names, cells, None)
        table = Table(show_header=True, header_style="bold", show_lines=False)
        for i, w in zip(fit.columns, fit.widths):
            table.add_column(names[i], width=w, overflow="fold")
        for row in cells:
            table.add_row(*row)
        buf = io.StringIO()
        Console(file=buf, width=frame_width(fit.widths), highlight=False).print(table)
        return buf.getvalue()

    names = ["model", "heads", "a longer header", "ingested_at"]
    cells = [["llama3.2-1b", "512", "NULL", "2026-11-25 20:02:07.710595+00:00"], ["x", "", "a b  c", "1:2:3"]]
    assert output._plain(names, cells)
    assert output._box_lines(names, cells) == by_rich(names, cells)
    assert output._box_lines(names, []) == by_rich(names, [])
    for odd in ("[bold]x[/bold]", ":smile:", "naïve", "two\nlines", "tab\there"):
        assert not output._plain(names, cells + [["m", "1", odd, ""]]), odd
    out = io.StringIO()
    output._print_table(names, cells, out, to_terminal=False, all_columns="")
    assert out.getvalue() == by_rich(names, cells)

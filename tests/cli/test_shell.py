"""`qkdb shell` as a person uses it: Tab completion, help and the dot commands, in a real terminal.

The terminal tests drive a real `qkdb shell` process in a pseudo-terminal (pexpect) on a small
warehouse built by a real ingest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from helpers.processes import sigint_as_at_a_terminal
from helpers.terminal import CTRL_A, CTRL_C, CTRL_J, CTRL_Q, ESCAPE, TAB, finish, spawn_qkdb

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.completion import Names, sql_candidates
from qkdb.cli.shell import COMMANDS, HISTORY_FILE, Shell, _help_text
from qkdb.errors import EXIT_CODES
from qkdb.ingest.capture.simulate import simulate

SIM = dict(layers=2, q_heads=4, kv_heads=2, head_dim=32, vectors=300, workers=1)
N_HEADS = SIM["layers"] * SIM["q_heads"]
PROMPT, CONTINUE = "qkdb> ", "...> "


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    base = tmp_path_factory.mktemp("shell")
    simulate(base / "a", model="sim-a", family="Sim A", seed=1, **SIM)
    api.ingest(base / "a", home=base / "home", workers=1)
    return base / "home"


@pytest.fixture
def names(warehouse):
    con = api.connect(warehouse, read_only=True)
    try:
        yield Names.load(con)
    finally:
        con.close()


def _shell(warehouse, *extra: str, **kw):
    child = spawn_qkdb("shell", "--home", str(warehouse), *extra, **kw)
    child.expect_exact(PROMPT)
    return child


def _all_spellings() -> list[str]:
    return [s for name, aliases, _, _ in COMMANDS for s in (name, *aliases)]


# ---------------------------------------------------------------------------------------------
# Completion in a real terminal
# ---------------------------------------------------------------------------------------------


def test_tab_completes_a_table_name(warehouse):
    child = _shell(warehouse)
    # `head_m` + Tab must become `head_metrics ` for the statement to run at all.
    child.send(f"select 'n=' || count(*) as n from head_m{TAB};\r")
    child.expect_exact(f"n={N_HEADS}")
    child.expect_exact(PROMPT)
    child.send("quit\r")
    assert finish(child) == 0


def test_two_tabs_list_the_columns_that_match(warehouse):
    child = _shell(warehouse)
    child.send(f"select bias_{TAB}{TAB}")
    child.expect_exact(PROMPT)  # drawn again under the listing
    listing = child.before
    assert "bias_strength" in listing
    assert "bias_sign" in listing and "bias_decomposition" in listing  # a column and a view
    assert "heads" not in listing
    child.send(CTRL_C)
    child.expect_exact(PROMPT)
    child.send(".quit\r")
    assert finish(child) == 0


def test_tab_completes_a_column_through_an_alias_named_later_in_the_line(warehouse):
    child = _shell(warehouse)
    # Type the FROM first, go back to the start of the line (Ctrl-A) and write the select list.
    child.send(f"from heads h where layer = 1 limit 1;{CTRL_A}select 'layer=' || h.lay{TAB}\r")
    child.expect_exact("layer=1")
    child.expect_exact(PROMPT)
    child.send("exit\r")
    assert finish(child) == 0


def test_tab_completes_dot_commands_and_their_arguments(warehouse):
    child = _shell(warehouse)
    child.send(f".desc{TAB}head_me{TAB}\r")
    child.expect_exact("head_metrics (view)")
    child.expect_exact("bias_strength")
    child.expect_exact(PROMPT)
    child.send(f".form{TAB}cs{TAB}\r")
    child.expect_exact(PROMPT)
    child.send("select 1 as one;\r")
    child.expect_exact('"one"')  # csv now
    child.expect_exact(PROMPT)
    child.send(".exit\r")
    assert finish(child) == 0


def test_a_temporary_view_is_completed_once_created(warehouse):
    child = _shell(warehouse)
    child.send(f"select 'w' as w from head_m{TAB};\r")  # the names are read at the first Tab
    child.expect_exact(PROMPT)
    child.send("create temp view my_probe as select 7 as probe_value;\r")
    child.expect_exact(PROMPT)
    child.send(f"select 'v=' || probe_v{TAB}from my_pr{TAB};\r")
    child.expect_exact("v=7")
    child.expect_exact(PROMPT)
    child.send("quit\r")
    assert finish(child) == 0


def test_help_exit_and_quit_do_what_they_say(warehouse):
    child = _shell(warehouse)
    child.send("help\r")
    for spelling in _all_spellings():
        child.expect_exact(spelling)
    child.expect_exact(PROMPT)
    child.send(".help\r")
    child.expect_exact(".exit")
    child.expect_exact(PROMPT)
    # Inside an unfinished statement, `exit` says how to get out and keeps the statement.
    child.send("select 'still ' || 'here' as s\r")
    child.expect_exact(CONTINUE)
    child.send("exit\r")
    child.expect_exact("not finished")
    child.expect_exact(CONTINUE)
    child.send(";\r")
    child.expect_exact("still here")
    child.expect_exact(PROMPT)
    child.send("exit\r")
    assert finish(child) == 0
    assert "error" not in child.transcript.getvalue()


@pytest.mark.parametrize("leave", ["quit", "QUIT;", ".q", ".exit"])
def test_every_way_out_ends_the_shell_and_keeps_the_history(warehouse, leave):
    (warehouse / HISTORY_FILE).unlink(missing_ok=True)
    child = _shell(warehouse)
    child.send(f"select {len(leave)} as width;\r")
    child.expect_exact(PROMPT)
    child.send(f"{leave}\r")
    assert finish(child) == 0
    assert f"select {len(leave)} as width;" in (warehouse / HISTORY_FILE).read_text()


def test_prompts_go_to_stderr_when_stdout_is_redirected(warehouse, tmp_path):
    out = tmp_path / "out.csv"
    child = pexpect.spawn(
        "/bin/sh", ["-c", f"{sys.executable} -m qkdb shell --home {warehouse} -f csv > {out}"],
        env={"NO_COLOR": "1", "TERM": "xterm", "INPUTRC": "/dev/null", "PATH": "/usr/bin:/bin"},
        encoding="utf-8", timeout=60, preexec_fn=sigint_as_at_a_terminal,
    )
    child.expect_exact(PROMPT)  # on the terminal (stderr)
    child.send("select 42 as answer;\r")
    child.expect_exact(PROMPT)
    child.send("quit\r")
    assert finish(child) == 0
    assert out.read_text() == '"answer"\n42\n'


# A SELECT that fails on row 200,000, after its first rows have streamed (see the test below).
FAILS_AS_IT_STREAMS = "select (case when range < 200000 then '1' else 'x' end)::int as v from range(300000)"


def _caret_target(text: str) -> str:
    """The text DuckDB's caret points at in the last ``LINE n: ...`` drawing of ``text``."""
    lines = text.replace("\r", "").splitlines()
    at = max(k for k, line in enumerate(lines) if line.startswith("LINE "))
    start = lines[at + 1].index("^")
    return lines[at][start : start + lines[at + 1].count("^")]


def test_a_failing_statement_shows_duckdbs_message_with_its_caret_however_it_runs(warehouse):
    import duckdb

    from qkdb.query import BATCH_ROWS, Result

    # One thread runs the query only as its rows are fetched: the conversion error comes from a
    # fetch once a first batch has arrived, not from running the statement.
    con = api.connect(warehouse, read_only=True)
    try:
        con.execute("set threads = 1")
        _, batches = Result(con, FAILS_AS_IT_STREAMS, one_line=False).rows()
        assert len(next(batches)) == BATCH_ROWS
        with pytest.raises(duckdb.ConversionException):
            next(batches)
    finally:
        con.close()

    child = _shell(warehouse)
    # A plain statement (run at once), a SELECT failing as it starts, a SELECT failing as it streams.
    child.send("create temp view broken as\rselect layer, nope from heads;\r")
    child.expect_exact(PROMPT)
    assert "error: Binder Error: Referenced column \"nope\" not found" in child.before
    assert "LINE 2: select layer, nope from heads" in child.before and _caret_target(child.before) == "nope"
    child.send("select 1 as one; select lyer from heads;\r")
    child.expect_exact(PROMPT)
    assert "error: Binder Error: Referenced column \"lyer\" not found" in child.before
    assert _caret_target(child.before) == "lyer"  # under the second statement's own text
    child.send("set threads = 1;\r")
    child.expect_exact(PROMPT)
    child.send(f"{FAILS_AS_IT_STREAMS};\r")
    child.expect_exact(PROMPT)
    assert "error: Conversion Error: Could not convert string 'x' to INT32" in child.before
    assert _caret_target(child.before) == "::int"
    child.send("quit\r")
    assert finish(child) == 0


# ---------------------------------------------------------------------------------------------
# What Tab offers, from the real catalog
# ---------------------------------------------------------------------------------------------


def test_after_from_only_relations_and_table_functions(names):
    got = sql_candidates(names, "select * from ", "h")
    assert {"heads", "head_metrics"} <= set(got)
    assert "hash" not in got and "having" not in got  # a scalar function, a keyword
    assert "read_parquet" in sql_candidates(names, "select * from ", "read_p")


def test_columns_are_those_of_the_relations_the_statement_names(names):
    in_heads = sql_candidates(names, "select ", "l", after=" from heads")
    assert "layer" in in_heads and "like" in in_heads
    assert not set(in_heads) & (set(names.relations["pca"]) - set(names.relations["heads"]))
    assert "pc" not in sql_candidates(names, "select ", "pc", after=" from heads")  # pca's column
    assert "pc" in sql_candidates(names, "select ", "pc")  # no relation named yet: every column


def test_qualified_and_aliased_columns(names):
    assert sql_candidates(names, "select ", "heads.lay") == ["heads.layer"]
    assert sql_candidates(names, "select p.pc from pca p join heads h using (model) where ", "h.lay") == ["h.layer"]
    assert sql_candidates(names, "select ", "nothing.x") == []


def test_keywords_follow_the_case_typed(names):
    assert "SELECT" in sql_candidates(names, "", "SEL")
    assert "select" in sql_candidates(names, "", "sel")


def test_names_include_the_sessions_temporary_views(warehouse):
    con = api.connect(warehouse, read_only=True)
    try:
        con.execute("create temp view my_thresholds as select 0.5 as cut")
        names = Names.load(con)
    finally:
        con.close()
    assert names.relations["my_thresholds"] == ["cut"]
    assert not any(n.startswith("duckdb_") for n in names.relations)  # the system's views are table functions


# ---------------------------------------------------------------------------------------------
# Dot commands and bare words, reading a script
# ---------------------------------------------------------------------------------------------


def test_help_lists_every_dot_command_the_shell_accepts(warehouse, capsys):
    text = _help_text()
    con = api.connect(warehouse, read_only=True)
    try:
        sh = Shell(con)
        for spelling in _all_spellings():
            assert spelling in text
            keep_going = sh.command(spelling + (" heads" if spelling in (".describe", ".d") else ""))
            assert keep_going == (spelling not in (".quit", ".exit", ".q")), spelling
        assert sh.errors == 0
        sh.command(".nope")
    finally:
        con.close()
    assert sh.errors == 1 and "unknown command .nope" in capsys.readouterr().err


def test_script_with_bare_words_and_a_failing_select(runner, warehouse):
    script = "help\nselect nope;\nselect 42 as ok;\n.format\nquit\nselect 'never' as s;\n"
    res = runner.invoke(app, ["shell", "--home", str(warehouse)], input=script)
    assert res.exit_code == EXIT_CODES["input"]  # the failed statement, reported once the script ends
    assert "42" in res.stdout and "never" not in res.stdout
    assert ".describe NAME" in res.stderr and "nope" in res.stderr and "output format: table" in res.stderr


# ---------------------------------------------------------------------------------------------
# --ide: harlequin on the warehouse
# ---------------------------------------------------------------------------------------------

# Run in the qkdb process before the CLI: no harlequin "beside" this Python (as when qkdb is
# installed without the ide extra), so the one on PATH is used, or none.
NOT_BESIDE = "import sys; sys.executable = '/nonexistent/bin/python'"


def _qkdb(*args: str, path: str, prelude: str = NOT_BESIDE) -> subprocess.CompletedProcess:
    code = f"{prelude}\nfrom qkdb.__main__ import main\nmain()\n"
    env = {**os.environ, "PATH": path, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_ide_opens_the_harlequin_on_path_on_the_catalog_read_only(warehouse, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args = tmp_path / "args.txt"
    _executable(bin_dir / "harlequin", f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {args}\necho 'harlequin ran'\nexit 0\n")
    res = _qkdb("shell", "--ide", "--home", str(warehouse), path=f"{bin_dir}:/usr/bin:/bin")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "harlequin ran\n"  # the process became harlequin (exec): nothing of ours after it
    assert args.read_text().splitlines() == ["--adapter", "duckdb", "--read-only", str(warehouse / "qk.duckdb")]


def test_ide_without_harlequin_says_how_to_get_it(warehouse, tmp_path):
    res = _qkdb("shell", "--ide", "--home", str(warehouse), path=str(tmp_path))
    assert res.returncode == EXIT_CODES["not_found"]
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: harlequin is not installed")
    assert "pip install 'qkdb[ide]'" in lines[0] and "pipx install harlequin" in lines[0]


def test_ide_refuses_a_harlequin_whose_duckdb_cannot_read_the_catalog(warehouse, tmp_path):
    # A pipx-style harlequin: a Python entry point whose interpreter has DuckDB 1.x.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = _executable(tmp_path / "old-env-python", "#!/bin/sh\nprintf 1.1.3\n")
    _executable(bin_dir / "harlequin", f"#!{python}\n# -*- coding: utf-8 -*-\nimport sys\n")
    res = _qkdb("shell", "--ide", "--home", str(warehouse), path=f"{bin_dir}:/usr/bin:/bin")
    assert res.returncode == EXIT_CODES["system"], res.stderr
    assert "runs DuckDB 1.1.3" in res.stderr and "pipx inject harlequin" in res.stderr
    assert res.stdout == ""  # (not run: run, its "python" would print the version)


def test_ide_checks_the_warehouse_first_and_takes_no_duckdb_flag(tmp_path):
    missing = tmp_path / "nowhere"
    res = _qkdb("shell", "--ide", "--home", str(missing), path=str(tmp_path))
    assert res.returncode == EXIT_CODES["not_found"] and f"no warehouse at {missing}" in res.stderr
    assert not missing.exists()
    res = _qkdb("shell", "--ide", "--duckdb", "--home", str(missing), path=str(tmp_path))
    assert res.returncode == EXIT_CODES["usage"] and "give one of them" in res.stderr


@pytest.mark.ide
def test_harlequin_runs_queries_on_the_warehouse_and_cannot_write_it(warehouse, tmp_path):
    env = {"HOME": str(tmp_path), "TERM": "xterm-256color"}  # harlequin's config, buffers and history stay in tmp
    child = spawn_qkdb("shell", "--ide", "--home", str(warehouse), env=env, timeout=60)
    child.expect_exact("Query Editor")
    if child.expect_exact(["Locale Not Set", "Data Catalog"]) == 0:  # a C locale: harlequin says so first
        child.send(ESCAPE)
    run_query = CTRL_J  # harlequin's binding (ctrl+enter is not sent by every terminal)
    child.send(f"create table ide_probe as select 1 as one{run_query}")
    child.expect_exact("Query Error")
    # DuckDB's message names the warehouse's path, so where it wraps depends on the path's length:
    # "read-" may end one screen line and "only" start the next, with cursor moves between them.
    child.expect(r"read-?(?:\s|[\u2500-\u257f]|\x1b\[[0-9;?]*[A-Za-z])*only")
    # harlequin takes keys as its widgets get focus, not as they arrive: give it time between steps.
    time.sleep(1)
    child.send("q")  # closes the error ("any other key closes")
    time.sleep(1)
    child.send(CTRL_A)  # select the editor's text, replaced by what is typed
    time.sleep(0.3)
    child.send(f"select 'heads=' || count(*) from head_metrics{run_query}")
    child.expect_exact(f"heads={N_HEADS}")  # only in the result: the editor shows the query's own text
    child.send(CTRL_Q)
    assert finish(child, timeout=60) == 0
    con = api.connect(warehouse, read_only=True)
    try:
        assert con.execute("select count(*) from duckdb_tables() where table_name = 'ide_probe'").fetchone() == (0,)
    finally:
        con.close()

"""The CLI contract of docs/cli.md, walked over every command.

The tables are read from the page itself, so a command added, a flag dropped or an exit code
renumbered fails here until the page says so too.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES, INTERRUPTED

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _table(heading: str) -> list[list[str]]:
    """The rows of the first markdown table after ``heading`` (cells stripped, header and rule dropped)."""
    text = DOC.read_text().split(f"## {heading}\n", 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def _commands() -> dict[str, object]:
    """Every leaf command by its full name ("hub list"), loaded through the lazy group as a user's line would."""
    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    found = {}

    def walk(group, prefix):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            if hasattr(cmd, "list_commands"):
                walk(cmd, prefix + [name])
            else:
                found[" ".join(prefix + [name])] = cmd

    walk(root, [])
    return found


COMMANDS = _commands()
DOCUMENTED = {row[0].strip("`"): row for row in _table("Commands")}


def _options(cmd) -> set[str]:
    return {opt for p in cmd.params for opt in p.opts}


def test_every_command_is_documented_and_every_documented_command_exists():
    assert set(DOCUMENTED) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_home_and_format_are_where_the_page_says(name):
    _, _, warehouse, home, fmt = DOCUMENTED[name]
    options = _options(COMMANDS[name])
    assert ("--home" in options) == (home == "yes"), f"qkdb {name}: --home"
    assert ("--format" in options) == (fmt == "yes"), f"qkdb {name}: --format"
    # A command that touches a warehouse takes --home; one that touches none has nothing to point it at.
    assert (warehouse != "none") == (home == "yes"), f"qkdb {name}: warehouse {warehouse!r} vs --home {home!r}"


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(runner, name, flag):
    result = runner.invoke(app, [*name.split(), flag])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout and f"qkdb {name}" in result.stdout
    assert COMMANDS[name].help and len(COMMANDS[name].help.strip()) > 10


def test_the_exit_code_table_is_the_programs():
    rows = _table("Exit codes")
    documented = {kind: int(code) for code, kind, _ in rows}
    assert documented == {"success": 0, **EXIT_CODES, "interrupted": INTERRUPTED}
    assert len(set(documented.values())) == len(documented)  # one code per kind


@pytest.fixture
def places(tmp_path):
    """A home that does not exist, a plain file, and a folder that is not a dataset."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    return {"missing": tmp_path / "no-such-home", "file": a_file, "tmp": tmp_path}


# One failing line per command and the kind it must exit with. Reading commands on a home that
# does not exist are "not_found" and must leave it uncreated.
def _failing(name: str, p: dict) -> tuple[list[str], str]:
    missing = str(p["missing"])
    reading = {
        "query": ["select 1"], "findings": [], "describe": ["heads"], "info": [], "shell": [],
        "chart": ["bias-strength"], "report": ["-o", str(p["tmp"] / "r.html")], "remove": ["--model", "x"],
        "models": ["--ingested"],
    }
    if name in reading:
        return [name, *reading[name], "--home", missing], "not_found"
    return {
        "ingest": (["ingest", "--path", missing], "not_found"),
        "views": (["views", "-o", str(p["missing"] / "views.csv")], "not_found"),
        "simulate": (["simulate", "--out", str(p["file"])], "input"),
        "sniff": (["sniff", "--model-path", missing, "--out", str(p["tmp"] / "out")], "not_found"),
        "demo": (["demo", "--home", str(p["file"])], "input"),
        # Port 9 (discard) on loopback: refused at once, no packet leaves the machine.
        "hub list": (["hub", "list", "--repo", "x/y", "--endpoint", "http://127.0.0.1:9"], "network"),
        "hub push": (["hub", "push", missing, "--repo", "x/y", "--endpoint", "http://127.0.0.1:9"], "not_found"),
        "publish": (["publish", "x/y", "--home", missing, "--endpoint", "http://127.0.0.1:9"], "not_found"),
        "pull": (["pull", "x/y", "--home", missing, "--endpoint", "http://127.0.0.1:9"], "network"),
        "benchmarks list": (["benchmarks", "list", "--home", str(p["file"])], "input"),
        "benchmarks show": (["benchmarks", "show", "no-such-model", "--home", missing], "not_found"),
        "benchmarks import": (["benchmarks", "import", missing, "--home", missing], "not_found"),
        "benchmarks map": (["benchmarks", "map", "m", "B", "--match-kind", "same", "--home", missing], "input"),
    }[name]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_failure_is_one_line_with_the_code_of_its_kind_and_debug_works_anywhere(runner, name, places):
    args, kind = _failing(name, places)
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_CODES[kind], result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in result.stderr
    assert not places["missing"].exists()  # nothing created on the way to the error
    # --debug before the command, after it, and last: the traceback first, then the same line and
    # the same exit code (docs/cli.md: a script's `case $?` does not change with --debug).
    for at in (0, 1 + name.count(" "), len(args)):
        debug = runner.invoke(app, [*args[:at], "--debug", *args[at:]])
        assert debug.exit_code == EXIT_CODES[kind], (at, debug.output)
        assert "Traceback (most recent call last)" in debug.stderr, (at, debug.output)
        assert debug.stderr.strip().splitlines()[-1] == lines[-1] and debug.stdout == ""


def _suggestions(message: str) -> list[list[str]]:
    return [shlex.split(s)[1:] for s in re.findall(r"`(qkdb [^`]+)`", message)]


def test_the_missing_warehouse_message_suggests_only_commands_that_parse(runner, places):
    result = runner.invoke(app, ["findings", "--home", str(places["missing"])])
    suggested = _suggestions(result.stderr)
    assert [s[0] for s in suggested] == ["ingest", "ingest", "demo"]
    for words in suggested:
        cmd = COMMANDS[words[0]]
        # Parsing the suggestion as the command would (an unknown option or a missing argument raises).
        cmd.make_context(words[0], ["." if w == "DIR" else w for w in words[1:]])
    # The model the message names is one `qkdb ingest --model` can fetch.
    from qkdb.ingest import registry

    assert registry.find(suggested[0][suggested[0].index("--model") + 1]) is not None


def test_an_unknown_model_is_not_sent_to_ingest(runner, places, tmp_path):
    # A name outside the registry cannot be fetched with `qkdb ingest --model`: the hint must not say so.
    import qkdb
    from helpers.datasets import make_dataset

    home = tmp_path / "home"
    qkdb.ingest(make_dataset(tmp_path / "ds", n=200), "toy", family="T", n_layers=2, gqa_ratio=2, workers=1, home=home)
    result = runner.invoke(app, ["chart", "ab-plane-collage", "--model", "nosuch", "--home", str(home)])
    assert result.exit_code == EXIT_CODES["not_found"]
    assert "nosuch" in result.stderr and "ingest --model nosuch" not in result.stderr
    for words in _suggestions(result.stderr):
        assert words[0] in COMMANDS


def test_an_empty_folder_is_no_warehouse_and_an_empty_warehouse_can_be_described(runner, tmp_path):
    import qkdb

    folder = tmp_path / "folder"
    folder.mkdir()
    for args in (["info"], ["describe", "heads"], ["findings"]):
        result = runner.invoke(app, [*args, "--home", str(folder)])
        assert result.exit_code == EXIT_CODES["not_found"], args
        assert result.stderr.startswith(f"error: no warehouse at {folder}; ") and "qkdb ingest" in result.stderr
    assert list(folder.iterdir()) == []  # and nothing was created in it
    empty = tmp_path / "empty"
    qkdb.connect(empty, read_only=False).close()  # a catalog, no model
    for args in (["info"], ["describe", "heads"]):
        assert runner.invoke(app, [*args, "--home", str(empty)]).exit_code == 0, args
    result = runner.invoke(app, ["findings", "--home", str(empty)])
    assert result.exit_code == EXIT_CODES["not_found"] and "holds no model yet" in result.stderr

"""The docs cannot drift from the program: cited test files exist, exit codes are the CLI's, documented commands parse.

Each command line in a code block of the README or docs/ (``qkdb ...``) is run with ``--help``
appended: click parses every subcommand and option name before it prints the help, so a renamed
option or command fails here (values are not checked: placeholders such as ``DIR`` stand in them).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from qkdb.cli.app import COMMANDS as CLI_COMMANDS
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES, INTERRUPTED

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_every_cited_test_file_exists():
    missing = [(p.name, cited) for p in DOCS for cited in set(re.findall(r"tests/[\w/.-]+?\.py", _text(p)))
               if not (ROOT / cited).is_file()]
    assert not missing


def test_no_doc_cites_a_path_outside_the_repository():
    # issue 47: docs/plasticity.md sent readers to ../shared/, which a clone does not have.
    outside = [(p.name, m) for p in DOCS for m in re.findall(r"(?<![\w/])(?:\.\./[\w./-]+|/work/[\w./-]+)", _text(p))
               if not (p.parent / m).resolve().is_relative_to(ROOT)]
    assert not outside


def test_every_exit_code_a_doc_names_is_one_the_cli_has():
    known = set(EXIT_CODES.values()) | {0, INTERRUPTED}
    said = [(p.name, int(n)) for p in DOCS
            for n in re.findall(r"\bexit(?:s| code| status)?(?: with)?(?: code)? (\d+)\b", _text(p))]
    assert said, "the docs name exit codes"
    assert not [s for s in said if s[1] not in known]


def test_the_exit_code_table_is_the_clis():
    table = dict(re.findall(r"^\| (\d+) \| (\w+) \|", _text(ROOT / "docs" / "cli.md"), re.M))
    assert {int(code): kind for code, kind in table.items()} == {
        **{v: k for k, v in EXIT_CODES.items()}, 0: "success", INTERRUPTED: "interrupted"}


def _commands() -> list[tuple[str, str]]:
    """(doc, command line) of every ``qkdb`` command in a fenced code block, continuations joined."""
    found = []
    for path in DOCS:
        blocks = re.findall(r"^```[^\n]*\n(.*?)^```", _text(path), re.M | re.S)
        for block in blocks:
            lines, pending = [], ""
            for raw in block.replace("\\\n", " ").splitlines():  # a quoted argument may span lines
                pending = f"{pending} {raw.strip()}" if pending else raw.split(" #")[0]
                if pending.count('"') % 2 == 0 and pending.count("'") % 2 == 0:
                    lines.append(pending)
                    pending = ""
            for line in lines:
                line = re.sub(r"^\s*\$\s*", "", line.split(" #")[0]).strip()
                line = re.sub(r"^(\w+=\S+\s+)+", "", line)  # VAR=value prefixes
                words = line.split()
                # (a benchmark table's first column may read "qkdb" too: a command names a subcommand)
                if len(words) > 1 and words[0] == "qkdb" and (words[1] in CLI_COMMANDS or words[1].startswith("-")):
                    found.append((path.name, line.split(" | ")[0].split(" > ")[0].split(" && ")[0].strip()))
    return found


COMMANDS = _commands()


def test_the_docs_have_commands_to_check():
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize(("doc", "line"), COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_every_documented_command_parses(runner, doc, line):
    try:
        args = shlex.split(line)[1:]
    except ValueError as exc:
        pytest.fail(f"{doc}: {line!r} does not split as a shell line: {exc}")
    args = [a for a in args if a != "--debug"]
    out = runner.invoke(app, [*args, "--help"])
    assert out.exit_code == 0, f"{doc}: `{line}` -> {out.output[-600:]}"


def test_the_architecture_lists_every_benchmark_script():
    row = next(line for line in _text(ROOT / "docs" / "architecture.md").splitlines() if line.startswith("| `benchmarks/`"))
    assert {p.name for p in (ROOT / "benchmarks").glob("*.py")} <= set(re.findall(r"`(\w+\.py)`", row))


def test_the_series_hint_names_a_series_and_a_command_that_parses(runner):
    from qkdb.charts.data import SERIES_HINT
    from qkdb.ingest import registry

    (command,) = re.findall(r"`(qkdb [^`]+)`", SERIES_HINT)
    args = shlex.split(command)[1:]
    assert runner.invoke(app, [*args, "--help"]).exit_code == 0
    assert len(registry.series_models(args[args.index("--series") + 1])) >= 2


SOURCES = [p for d in ("qkdb", "ingest", "warehouse", "charts") for p in sorted((ROOT / d).rglob("*.py"))]


def _suggestions() -> list[tuple[str, str]]:
    """(file, command) of every ``qkdb ...`` command quoted in backticks in the program's own strings.

    Placeholders are made words: an f-string field ``{repo}`` or ``<sample_path()>`` becomes ``X``,
    an ellipsis is dropped, and what follows a pipe or a redirection is not qkdb's.
    """
    found = set()
    for path in SOURCES:
        for cmd in re.findall(r"`(qkdb [^`\n]+)`", _text(path)):
            cmd = cmd.replace('\\"', '"').split(" | ")[0].split(" < ")[0]
            cmd = re.sub(r"\{\{?[^{}]*\}?\}|<[^<>]*>", "X", cmd)
            cmd = re.sub(r"\s*(\.\.\.|…)", "", cmd).strip()
            found.add((path.relative_to(ROOT).as_posix(), cmd))
    return sorted(found)


SUGGESTIONS = _suggestions()


def test_the_program_suggests_commands_to_check():
    assert len(SUGGESTIONS) >= 50


def _unknown_words(args: list[str]) -> list[str]:
    """The words of ``args`` that are neither a subcommand on the path nor an option of the command reached."""
    import typer

    cmd = typer.main.get_command(app)
    words = list(args)
    # (typer carries its own click: a group is what has subcommands)
    while words and hasattr(cmd, "get_command") and not words[0].startswith("-"):
        sub = cmd.get_command(cmd.context_class(cmd), words[0])
        if sub is None:
            return [words[0]]
        cmd, words = sub, words[1:]
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    return [w for w in words if w.startswith("-") and w != "-" and w.split("=")[0] not in known]


@pytest.mark.parametrize(("where", "line"), SUGGESTIONS, ids=[f"{w}:{c[:60]}" for w, c in SUGGESTIONS])
def test_every_command_the_program_suggests_names_real_commands_and_options(where, line):
    """Every command a message, hint or help text tells the user to run names a real command and its real
    options (a suggestion may name an option without its value, so values are not parsed)."""
    # (--debug is taken off the line wherever it stands: qkdb.cli.app.QkdbGroup.parse_args)
    assert not _unknown_words([a for a in shlex.split(line)[1:] if a != "--debug"]), f"{where}: `{line}`"


def test_the_suggestion_check_can_fail():
    assert _unknown_words(["ingest", "--modle", "x"]) == ["--modle"]
    assert _unknown_words(["ingst"]) == ["ingst"]
    assert _unknown_words(["hub", "list", "--repo", "x"]) == []

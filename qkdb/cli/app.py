"""The root ``qkdb`` app: command registration and the one place errors are rendered."""

from __future__ import annotations

import os
import sys

import typer
import typer.core

from qkdb.errors import QkdbError


def _debug_enabled(ctx: typer.Context | None) -> bool:
    if os.environ.get("QKDB_DEBUG"):
        return True
    while ctx is not None:
        if ctx.obj and ctx.obj.get("debug"):
            return True
        ctx = ctx.parent
    return False


class QkdbGroup(typer.core.TyperGroup):
    """Renders every :class:`QkdbError` once, on stderr, with its exit code (traceback only with --debug).

    Commands load on first use (:data:`COMMANDS`); the help's listing needs only their summaries.
    """

    _listing = False

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> typer.core.TyperCommand | typer.core.TyperGroup | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            if self._listing:  # a stand-in that carries the summary, for `qkdb --help`'s table only
                return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
            for name, command in _load(COMMANDS[cmd_name][0]).items():
                self.commands.setdefault(name, command)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: typer.Context, formatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except QkdbError as exc:
            if _debug_enabled(ctx):
                raise
            typer.echo(f"error: {exc}", err=True)
            raise SystemExit(exc.exit_code) from None
        except BrokenPipeError:
            # `qkdb query ... | head`: the reader has what it wanted; stop quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise SystemExit(130) from None


app = typer.Typer(
    cls=QkdbGroup,
    name="qkdb",
    help="A DuckDB warehouse of the positional geometry of attention queries and keys.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    ctx.obj = {"debug": debug}


# Every command in the order `qkdb --help` lists them: the module that defines it (each module
# adds its commands to `app` on import) and the first paragraph of its help, which is what that
# listing shows (tests/cli/test_cli.py keeps it equal to the command's own). A module is imported
# when one of its commands runs, so `qkdb query` loads neither the ingest's options nor rich's
# progress bars, and `qkdb --help` loads none.
COMMANDS = {
    "ingest": ("ingest", "Ingest sniffed-qk data (a local folder or the Hugging Face Hub): compute every metric per head and publish each model atomically."),
    "query": ("query", "Run read-only SQL on the warehouse (tables and finding views)."),
    "models": ("models", "List the registry's models (and any other ingested model) with their ingest status."),
    "info": ("warehouse", "Warehouse home, catalog path, table sizes, ingested models and library versions."),
    "remove": ("warehouse", "Remove models from the warehouse (every table at once)."),
    "simulate": ("simulate", "Write a simulated dataset with planted drift, Q/K offset, RoPE rings and noise."),
    "views": ("findings", "List every finding view with its one-line description (`qkdb describe NAME` for its columns)."),
    "findings": ("findings", "The seeds' headline findings: the value measured here with its 95% interval, the seed's value, and the verdict."),
    "describe": ("findings", "Columns of a warehouse table or finding view, with their types and descriptions."),
    "shell": ("shell", "An interactive SQL prompt on the warehouse (read-only; statements end with ';')."),
    "hub": ("hub", "The Hugging Face Hub dataset repo (one branch per model)."),
    "chart": ("chart", "Render one of the seeds' figures from the warehouse; the output's extension picks the format."),
    "report": ("chart", "One self-contained HTML page (works offline): models, findings and every figure the data supports."),
    "sniff": ("sniff", "Capture queries and keys of a causal LM (local folder or GGUF) into the sniffed-qk layout."),
    "demo": ("demo", "Ingest the bundled real sample (SmolLM2-135M) offline, print the findings and write the report."),
}


def _load(module: str) -> dict[str, typer.core.TyperCommand | typer.core.TyperGroup]:
    """The click commands of ``qkdb.cli.<module>``, built from what it registered with ``app``."""
    import importlib

    importlib.import_module(f"qkdb.cli.{module}")
    # Typer built the root group before this import: build the module's commands as a group of
    # their own (the callback makes Typer return a group even for one command) and take them.
    sub = typer.Typer(add_completion=False)
    sub.callback()(lambda: None)
    sub.registered_commands = [c for c in app.registered_commands if c.callback.__module__ == f"qkdb.cli.{module}"]
    sub.registered_groups = [g for g in app.registered_groups if COMMANDS.get(g.name, ("",))[0] == module]
    return dict(typer.main.get_command(sub).commands)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="qkdb")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

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

    Commands load on first use (:data:`COMMANDS`).
    """

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> typer.core.TyperCommand | typer.core.TyperGroup | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            for name, command in _load(COMMANDS[cmd_name]).items():
                self.commands.setdefault(name, command)
        return self.commands.get(cmd_name)

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


# Every command in the order `qkdb --help` lists them, and the module that defines it (each module
# adds its commands to `app` on import). A module is imported when one of its commands runs, so
# `qkdb query` loads neither the ingest's options nor rich's progress bars.
COMMANDS = {
    "ingest": "ingest", "query": "query", "models": "models", "info": "warehouse", "remove": "warehouse",
    "simulate": "simulate", "views": "findings", "findings": "findings", "describe": "findings",
    "shell": "shell", "hub": "hub", "chart": "chart", "report": "chart", "sniff": "sniff", "demo": "demo",
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
    sub.registered_groups = [g for g in app.registered_groups if COMMANDS.get(g.name) == module]
    return dict(typer.main.get_command(sub).commands)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="qkdb")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

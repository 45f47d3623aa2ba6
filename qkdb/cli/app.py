"""The root ``qkdb`` app: command registration and the one place errors are rendered."""

from __future__ import annotations

import os
import sys

import click
import typer
import typer.core

from qkdb.errors import QkdbError


def _debug_enabled(ctx: click.Context | None) -> bool:
    if os.environ.get("QKDB_DEBUG"):
        return True
    while ctx is not None:
        if ctx.obj and ctx.obj.get("debug"):
            return True
        ctx = ctx.parent
    return False


class QkdbGroup(typer.core.TyperGroup):
    """Renders every :class:`QkdbError` once, on stderr, with its exit code (traceback only with --debug)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except QkdbError as exc:
            if _debug_enabled(ctx):
                raise
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(exc.exit_code) from None
        except BrokenPipeError:
            # `qkdb query ... | head`: the reader has what it wanted; stop quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
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


# Each command lives in its own module and adds itself to `app` on import.
COMMAND_MODULES = ("ingest", "query", "models", "warehouse", "simulate", "findings", "shell", "hub", "chart", "sniff", "demo")


def _register() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"qkdb.cli.{name}")


_register()


def main() -> None:
    """Console-script entry point."""
    app(prog_name="qkdb")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The root ``qkdb`` app: command registration and the one place errors are rendered."""

from __future__ import annotations

import os
import sys

import typer
import typer.core

from qkdb.errors import EXIT_CODES, INTERRUPTED, QkdbError

DEBUG = "qkdb.debug"  # key in click's ctx.meta (shared by a context and its children)


def _debug_enabled(ctx: typer.Context | None) -> bool:
    if os.environ.get("QKDB_DEBUG"):
        return True
    # parse_args takes --debug off the line wherever it is and notes it here (ctx.meta is shared by
    # every context of one invocation).
    return ctx is not None and bool(ctx.meta.get(DEBUG))


def _from_the_framework(exc: BaseException) -> bool:
    # typer's own exceptions (usage errors, --help's exit, Abort) are handled by typer itself.
    return type(exc).__module__.split(".")[0] in ("typer", "click")


class QkdbGroup(typer.core.TyperGroup):
    """Renders every :class:`QkdbError` once, on stderr, with its exit code (traceback only with --debug).

    Commands load on first use (:data:`COMMANDS`); the help's listing needs only their summaries.
    """

    _listing = False

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> typer.core.TyperCommand | typer.core.TyperGroup | None:
        if cmd_name in COMMANDS:
            if self._listing and cmd_name not in self.commands:
                # a stand-in that carries the summary, for `qkdb --help`'s table only
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

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        # A usage error is one `error:` line too (docs/cli.md), not typer's boxed panel: click runs
        # without its own handling, and what it raises is said here, with the help to ask for.
        # (typer 0.26-0.28 carries its own click as typer._click: pyproject pins that range)
        from typer._click import exceptions as cx
        from typer.exceptions import Abort

        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except cx.NoArgsIsHelpError as exc:  # `qkdb` or `qkdb hub` alone: the help, as typer shows it
            from typer import rich_utils

            rich_utils.rich_format_error(exc)
            sys.exit(exc.exit_code)
        except cx.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "qkdb"
            typer.echo(f"error: {_one_line(exc.format_message())} (`{where} -h` for help)", err=True)
            sys.exit(exc.exit_code)
        except Abort:
            typer.echo("interrupted", err=True)
            sys.exit(INTERRUPTED)
        except cx.ClickException as exc:
            typer.echo(f"error: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        # (click returns an exit's code, e.g. --help's 0, where it would have exited)
        sys.exit(rv if isinstance(rv, int) else 0)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        # --debug is accepted anywhere on the line (`qkdb query "..." --debug`), not only before
        # the command as click would have it (up to a "--", after which everything is an argument).
        cut = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:cut]:
            ctx.meta[DEBUG] = True
            args = [a for i, a in enumerate(args) if a != "--debug" or i >= cut]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: typer.Context):
        # With --debug the traceback comes first, then the same one line and the same exit code as
        # without it: a script's `case $?` must not change because someone asked for more detail.
        debug = _debug_enabled(ctx)
        try:
            return super().invoke(ctx)
        except QkdbError as exc:
            _fail(str(exc), exc.exit_code, debug)
        except BrokenPipeError:
            # `qkdb query ... | head`: the reader has what it wanted; stop quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise SystemExit(INTERRUPTED) from None
        except OSError as exc:  # the machine's fault (disk full, permissions, ...) not caught nearer
            if _from_the_framework(exc):
                raise
            from qkdb.errors import from_os_error

            error = from_os_error(exc, f"qkdb {ctx.invoked_subcommand or ''}".strip())
            _fail(str(error), error.exit_code, debug)
        except Exception as exc:
            if _from_the_framework(exc):
                raise
            from qkdb.errors import os_error_in_message

            fault = os_error_in_message(str(exc), f"qkdb {ctx.invoked_subcommand or ''}".strip())
            if fault is not None:
                _fail(str(fault), fault.exit_code, debug)
            _fail(
                f"internal error in qkdb {ctx.invoked_subcommand or ''}: {type(exc).__name__}: {exc} "
                + ("(a bug: please report it with the traceback above)" if debug else
                   "(a bug: run it again with --debug for the traceback, and please report it)"),
                EXIT_CODES["internal"], debug,
            )


def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def _fail(message: str, code: int, debug: bool = False) -> None:
    """Say ``message`` in one line on stderr and exit with ``code``; with ``debug``, the traceback first.

    Called inside an ``except`` block: the traceback is the exception being handled.
    """
    if debug:
        import traceback

        sys.stderr.write(traceback.format_exc())
    # One line, whatever a library put in the message.
    typer.echo(f"error: {_one_line(message)}", err=True)
    raise SystemExit(code) from None


app = typer.Typer(
    cls=QkdbGroup,
    name="qkdb",
    help="A DuckDB warehouse of the positional geometry of attention queries and keys.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from qkdb._version import version

        typer.echo(f"qkdb {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    # Listed for --help only: QkdbGroup.parse_args has already taken it off the line.
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.", expose_value=False),
    _version: bool = typer.Option(False, "--version", help="Print qkdb's version and exit.", is_eager=True,
                                  callback=_print_version, expose_value=False),
) -> None:
    pass


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
    "publish": ("sharing", "Publish the warehouse's tables, manifest, findings and a dataset card to a Hub dataset repo, in one commit."),
    "pull": ("sharing", "Add the models of a published warehouse to this one, each as an ingest adds it (atomically; never over other data unless --force)."),
    "benchmarks": ("benchmarks", "Long-context benchmark scores (LongBench-Pro, RULER, your own) and which captured model stands for which benchmarked one."),
    "chart": ("chart", "Render one of the seeds' figures from the warehouse; the output's extension picks the format."),
    "report": ("chart", "One self-contained HTML page (works offline): models, findings and every figure the data supports."),
    "sniff": ("sniff", "Capture queries and keys of a causal LM (local folder, Hub model or GGUF) into the sniffed-qk layout."),
    "demo": ("demo", "Ingest the bundled real sample (SmolLM2-135M) offline, print the findings and write the report."),
}


# The click commands of each module built so far (`_load`), and what the modules registered with `app`.
_BUILT: dict[str, dict[str, typer.core.TyperCommand | typer.core.TyperGroup]] = {}
_REGISTERED: dict[str, tuple[list, list]] = {}


def _load(module: str) -> dict[str, typer.core.TyperCommand | typer.core.TyperGroup]:
    """The click commands of ``qkdb.cli.<module>``, built from what it registered with ``app`` (once a process)."""
    if module in _BUILT:
        return _BUILT[module]
    import importlib

    importlib.import_module(f"qkdb.cli.{module}")
    # Typer built the root group before this import: build the module's commands as a group of
    # their own (the callback makes Typer return a group even for one command) and take them.
    sub = typer.Typer(add_completion=False)
    sub.callback()(lambda: None)
    sub.registered_commands = [c for c in app.registered_commands if c.callback.__module__ == f"qkdb.cli.{module}"]
    sub.registered_groups = [g for g in app.registered_groups if COMMANDS.get(g.name, ("",))[0] == module]
    _BUILT[module] = dict(typer.main.get_command(sub).commands)
    # Taken off the root app, which Typer builds again, with every command registered there, each
    # time the root group is made: in a process that runs the CLI many times (the tests' runner),
    # ~45 ms a run once every module is imported. The root group takes them from here instead.
    _REGISTERED[module] = (sub.registered_commands, sub.registered_groups)
    app.registered_commands = [c for c in app.registered_commands if c not in sub.registered_commands]
    app.registered_groups = [g for g in app.registered_groups if g not in sub.registered_groups]
    return _BUILT[module]


def registered_names() -> set[str]:
    """Every command name the imported modules registered (built or not): what :data:`COMMANDS` must list."""
    infos = [*app.registered_commands, *app.registered_groups]
    for commands, groups in _REGISTERED.values():
        infos += [*commands, *groups]
    return {(i.name or i.callback.__name__).replace("_", "-") for i in infos}


def main() -> None:
    """Console-script entry point."""
    app(prog_name="qkdb")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Options and helpers shared by the commands."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

HomeOption = Annotated[
    Optional[Path],
    typer.Option(
        "--home",
        envvar="QKDB_HOME",
        help="Warehouse home (default: $QKDB_HOME, else the platform's user data dir).",
        show_default=False,
    ),
]


class Dtype(str, Enum):
    """Stored vector type of a written dataset (`qkdb simulate`, `qkdb sniff`)."""

    float32 = "float32"
    float16 = "float16"


# Messages and progress go to stderr; stdout carries data only.
err = Console(stderr=True, highlight=False)


def out_console() -> Console:
    # Piped output is data: do not wrap it at an assumed 80-column terminal.
    width = None if sys.stdout.isatty() else 100_000
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=width)


def demo_home_default() -> Path:
    """Where `qkdb demo` puts its sample unless told otherwise (never the user's own warehouse)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("qkdb-demo", appauthor=False))


def home_dir(home: Path | None) -> Path:
    """The warehouse home a command was given (resolved); an error when it names a file."""
    from qkdb import warehouse
    from qkdb.errors import WarehouseError

    where = warehouse.resolve_home(home)
    if where.exists() and not where.is_dir():
        raise WarehouseError(f"{where} is a file, not a warehouse home (--home or $QKDB_HOME)", kind="input")
    return where


def check_warehouse(home: Path | None, *, need_models: bool = True) -> Path:
    """The warehouse home a reading command was given, checked without connecting; one line saying what to do when there is nothing to read.

    A missing home, or a folder that holds neither a catalog nor a model, is "no warehouse" (and is
    never created); one without a model is an error for the commands that read models
    (``need_models``). The message names the commands that would fill it and, when ``qkdb demo``
    has run, where its sample is.
    """
    from qkdb import warehouse
    from qkdb.errors import WarehouseError

    where = home_dir(home)
    models = warehouse.ingested_models(where) if where.is_dir() else []
    exists = bool(models) or warehouse.catalog_path(where).is_file()
    if not exists or (need_models and not models):
        said = f"no warehouse at {where}" if not exists else f"the warehouse at {where} holds no model yet"
        raise WarehouseError(f"{said}; {_fill_hint(where)}", kind="not_found")
    return where


def open_warehouse(home: Path | None, *, need_models: bool = True):
    """A read-only connection for a reading command (see :func:`check_warehouse`)."""
    from qkdb import api

    return api.connect(check_warehouse(home, need_models=need_models), read_only=True)


def _fill_hint(where: Path) -> str:
    from qkdb import warehouse

    hint = "ingest one with `qkdb ingest --model llama3.2-3b` (from the Hub) or `qkdb ingest --path DIR`"
    demo = demo_home_default()
    if demo.resolve() != where and warehouse.ingested_models(demo):
        return f"`qkdb demo` put its sample in {demo}: add --home {demo} (or export QKDB_HOME={demo}), or {hint}"
    return f"{hint}, or run `qkdb demo` for the bundled sample"


def note(message: str) -> None:
    """A message on stderr: wrapped at spaces to a terminal's width (continued lines indented), one line off a terminal.

    Off a terminal a log keeps one message per line (rich would break it at 80 columns); a word
    longer than the terminal (a path, a command to paste) is never broken.
    """
    if err.is_terminal:
        import textwrap

        message = "\n".join(
            line for para in message.splitlines()
            for line in (textwrap.wrap(para, max(20, err.width), subsequent_indent="  ", break_long_words=False,
                                       break_on_hyphens=False) or [""]))
    err.print(message, markup=False, soft_wrap=True)

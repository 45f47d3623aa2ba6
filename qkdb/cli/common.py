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


def note(message: str) -> None:
    # One message, one line: a log or a terminal wraps it itself (rich would break it at 80 columns off a terminal).
    err.print(message, markup=False, soft_wrap=True)

"""A rich progress bar on stderr fed by the ingest's progress callback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from qkdb.cli.common import err


@contextlib.contextmanager
def ingest_progress(quiet: bool = False) -> Iterator:
    if quiet:
        yield lambda *a, **k: None
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("heads"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )
    tasks: dict[str, int] = {}

    def callback(event: str, **info) -> None:
        model = info.get("model")
        if event == "start":
            tasks[model] = bar.add_task(f"ingest {model}", total=info.get("total"))
            tasks["_current"] = tasks[model]
        elif event == "head" and "_current" in tasks:
            bar.advance(tasks["_current"])
        elif event == "download":
            tasks.setdefault("_dl", bar.add_task("download", total=info.get("total")))
            bar.update(tasks["_dl"], completed=info.get("done"))

    with bar:
        yield callback

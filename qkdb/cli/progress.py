"""A rich progress display on stderr fed by the ingest's progress callback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from qkdb.cli.common import err


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


class IngestDisplay:
    """The progress callback for ``qkdb.api.ingest(progress=...)``: a bar of heads per model, one of bytes per
    download; on a Ray cluster, one of models done and failed, with the bytes the workers read and sent back."""

    def __init__(self) -> None:
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=True,
        )
        self.heads: dict[str, int] = {}  # model -> task id
        self.downloads: dict[str, int] = {}
        self.models: int | None = None  # the bar of models, on a cluster

    def __call__(self, event: str, **info) -> None:
        bar, model = self.bar, info.get("model", "")
        if event == "start":
            total = info.get("total") or 0
            self.heads[model] = bar.add_task(f"ingest {model}", total=total, detail=f"0/{total} heads")
        elif event == "head" and model in self.heads:
            task = self.heads[model]
            bar.advance(task)
            t = bar.tasks[task]
            bar.update(task, detail=f"{int(t.completed)}/{int(t.total or 0)} heads")
        elif event == "cluster":  # models on a Ray cluster: each one's heads are counted on its worker
            total, done, failed = info.get("total") or 0, info.get("done") or 0, info.get("failed") or 0
            if self.models is None:
                self.models = bar.add_task("ray", total=total, detail="")
            detail = f"{done}/{total} models" + (f", {failed} failed" if failed else "")
            detail += f", read {_mb(info.get('bytes_read') or 0)}, got {_mb(info.get('bytes_received') or 0)}"
            bar.update(self.models, completed=done + failed, detail=detail)
        elif event == "download":
            total, done = info.get("total") or 0, info.get("done") or 0
            if model not in self.downloads:
                self.downloads[model] = bar.add_task(f"download {model}", total=total or None, detail="")
            bar.update(self.downloads[model], total=total or None, completed=done, detail=f"{_mb(done)}/{_mb(total)}")


@contextlib.contextmanager
def ingest_progress(quiet: bool = False) -> Iterator:
    """Yields the callback for ``qkdb.api.ingest(progress=...)``: heads per model, bytes per download."""
    if quiet:
        yield lambda *a, **k: None
        return
    display = IngestDisplay()
    with display.bar:
        yield display

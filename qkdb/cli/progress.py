"""Progress on stderr: rich bars on a terminal, plain lines in logs and pipes.

Every long command (ingest, simulate, sniff, demo) reports through :class:`Bars`: named steps with
a count done of a total. On a terminal they are rich bars that vanish when done; elsewhere (a
log file, a pipe, a CI job) a step that runs longer than :data:`FIRST_LINE` seconds gets a plain
line then, another every :data:`EVERY` seconds, and one when it ends — so a 9 s job piped to a
file still says what it is doing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from qkdb.cli.common import err

FIRST_LINE = 2.0  # seconds a step runs before its first plain line
EVERY = 10.0  # seconds between plain lines of one step


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


class Bars:
    """Named steps with a count each; a context manager.

    Parameters
    ----------
    quiet : bool
        Show nothing.
    terminal : bool, optional
        Draw rich bars (default: whether stderr is a terminal); else plain lines.
    clock : callable
        Seconds, monotonic (tests pass their own).
    """

    def __init__(self, quiet: bool = False, terminal: bool | None = None, clock: Callable[[], float] = time.monotonic):
        self.quiet = quiet
        self.terminal = err.is_terminal if terminal is None else terminal
        self.clock = clock
        self._rich = None
        self._tasks: dict[str, int] = {}
        self._plain: dict[str, dict] = {}  # key -> started, last line, last text

    def __enter__(self) -> Bars:
        if not self.quiet and self.terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._rich = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True,
            )
            self._rich.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.__exit__(*exc)
        elif exc[0] is None:
            for key in list(self._plain):
                self._finish(key)

    def update(self, key: str, label: str, done: float, total: float | None, detail: str = "") -> None:
        """Step ``key`` (shown as ``label``) has ``done`` of ``total`` (None: unknown) units; ``detail`` says which."""
        if self.quiet:
            return
        if self._rich is not None:
            if key not in self._tasks:
                self._tasks[key] = self._rich.add_task(label, total=total, detail=detail)
            self._rich.update(self._tasks[key], completed=done, total=total, detail=detail)
            return
        now = self.clock()
        state = self._plain.setdefault(key, {"started": now, "said": None, "label": label, "text": ""})
        state["text"] = detail or (f"{done:g}/{total:g}" if total else f"{done:g}")
        state["complete"] = bool(total) and done >= total
        due = state["started"] + FIRST_LINE if state["said"] is None else state["said"] + EVERY
        if now >= due and not state["complete"]:
            self._line(state, now)
        elif state["complete"]:
            self._finish(key)

    def message(self, text: str) -> None:
        """One line above the bars (or on its own)."""
        if self.quiet:
            return
        if self._rich is not None:
            self._rich.console.print(text, markup=False, highlight=False)
        else:
            err.print(text, markup=False, highlight=False, soft_wrap=True)

    def _line(self, state: dict, now: float) -> None:
        state["said"] = now
        err.print(f"{state['label']}: {state['text']} ({now - state['started']:.0f} s)", markup=False,
                  highlight=False, soft_wrap=True)

    def _finish(self, key: str) -> None:
        state = self._plain.pop(key, None)
        if state is not None:
            now = self.clock()
            if now - state["started"] >= FIRST_LINE:  # a short step needs no line
                self._line(state, now)


class IngestDisplay:
    """The progress callback of ``qkdb.api.ingest(progress=...)``: heads per model, bytes per download; on a
    Ray cluster (``ingest_many(cluster=...)``), models done and failed with the bytes the workers read and sent back."""

    def __init__(self, bars: Bars) -> None:
        self.bars = bars
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}

    def __call__(self, event: str, **info) -> None:
        model = info.get("model", "")
        if event == "start":
            self.totals[model], self.done[model] = info.get("total") or 0, 0
            self.bars.update(f"heads {model}", f"ingest {model}", 0, self.totals[model], f"0/{self.totals[model]} heads")
        elif event == "head" and model in self.totals:
            self.done[model] += 1
            n, total = self.done[model], self.totals[model]
            self.bars.update(f"heads {model}", f"ingest {model}", n, total, f"{n}/{total} heads")
        elif event == "cluster":  # each model's heads are counted on its worker: here, whole models
            total, done, failed = info.get("total") or 0, info.get("done") or 0, info.get("failed") or 0
            detail = f"{done}/{total} models" + (f", {failed} failed" if failed else "")
            detail += f", read {_mb(info.get('bytes_read') or 0)}, got {_mb(info.get('bytes_received') or 0)}"
            self.bars.update("ray", "ray", done + failed, total, detail)
        elif event == "download":
            total, done = info.get("total") or 0, info.get("done") or 0
            self.bars.update(f"download {model}", f"download {model}", done, total or None, f"{_mb(done)}/{_mb(total)}")


class ingest_progress:  # noqa: N801 - used as a context manager, like contextlib's
    """``with ingest_progress(quiet) as progress: api.ingest(..., progress=progress)``."""

    def __init__(self, quiet: bool = False) -> None:
        self.bars = Bars(quiet)

    def __enter__(self) -> Callable[..., None]:
        self.bars.__enter__()
        return IngestDisplay(self.bars)

    def __exit__(self, *exc) -> None:
        self.bars.__exit__(*exc)

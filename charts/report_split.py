"""The report's figures built in two processes: a forked helper builds a share of them.

Building the report is Python-bound: Altair composes and serialises each figure under the GIL
(~80% of a report's build on 23 models), so a thread would not help, and a second interpreter
started afresh would spend its first ~0.4 s importing DuckDB and Altair. A process forked from
the CLI has them already. It opens the warehouse on its own (read-only, as the CLI does; DuckDB
lets several processes read one file), prepares it the same way, builds the figures given to it
and sends their specs back as one pickle through a pipe; the parent builds the rest meanwhile and
puts all of them on the page in page order. The two take the figures one at a time, heaviest first,
from a queue they share (:class:`_Queue`): whichever is free takes the next, so the split stays
even whatever the warehouse's size makes each figure cost, and whatever else the parent does first
(the findings, the scorecard). The page is byte for byte the one a single process
writes (tests/charts/test_report_split.py).

The fork is made only where it is safe and pays: on Linux, with two or more usable cores, and
while the process runs a single thread. DuckDB runs worker threads while a database is open, and
a child forked from a process with other threads may inherit a lock one of them held; the CLI
closes its connection first, so nothing else runs then. Wherever the helper fails (an error
while building, or data that changed between the two opens: an ingest published in between), the
parent builds its share itself, so a helper can make the report faster but never wrong.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable, Sequence

import duckdb

# Relative build cost of each figure (seconds ×10, the mean of its time on 27,900 and on 140,100
# heads of benchmarks/latency.py's warehouses); the rest cost ~0.3. Only the order in which the
# figures are taken depends on them: heaviest first, so that the last ones taken are small.
COST = {
    "rq-vs-rk": 4.9, "complement-collage": 2.3, "explained-variance": 2.3, "bias-vs-separation": 2.1,
    "pca-collage": 1.9, "pc-roles": 1.9, "ab-plane-collage": 1.6, "drift-bars": 1.4, "slope-ratio": 1.1,
    "series-explained-variance": 1.1, "depth-heatmaps": 1.1, "variance-decomposition": 0.9,
    "depth-heatmap-rk": 0.75, "depth-heatmap-rq": 0.65, "series-phase-portraits": 0.4,
}
# Figures taken together with the first of their group, by one process: the head explorer's points
# are read once per process (charts.explorer.shared).
TOGETHER = {name: "rq-vs-rk" for name in ("bias-vs-separation",)}
# Figures the shared queue can hand out (more are built by the parent).
MAX_UNITS = 4096
PARENT, HELPER = 1, 2


def available() -> bool:
    """True where a helper may be forked now: Linux, two or more usable cores, one thread running."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        # Native threads count (DuckDB's, BLAS's), not only Python's.
        return len(os.sched_getaffinity(0)) >= 2 and len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def units(labels: Sequence[str]) -> list[list[int]]:
    """The job indices in the order they are taken: heaviest first, a figure of :data:`TOGETHER` with its partner.

    Each unit is built by one process. Deterministic: both processes compute it from their labels.
    """
    by_key: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_key.setdefault(TOGETHER.get(label.split(" (")[0], label), []).append(i)
    groups = list(by_key.values())
    return sorted(groups, key=lambda g: (-sum(_cost(labels[i]) for i in g), g[0]))


def _cost(label: str) -> float:
    return COST.get(label.split(" (")[0], 0.3)


class _Queue:
    """The units still to build, shared by the parent and its forked helper: a counter under a lock,
    and which process took each unit."""

    def __init__(self) -> None:
        import multiprocessing as mp

        # (anonymous shared memory and a semaphore: both survive os.fork; no thread is started)
        self._lock = mp.Lock()
        self._next = mp.RawValue("i", 0)
        self._owner = mp.RawArray("b", MAX_UNITS)

    def take(self, n_units: int, me: int) -> int | None:
        """The next unit's position for ``me``, or None when none is left (the helper: none it can record)."""
        with self._lock:
            pos = self._next.value
            if pos >= n_units or (me == HELPER and pos >= MAX_UNITS):
                return None
            self._next.value = pos + 1
            if pos < MAX_UNITS:
                self._owner[pos] = me
            return pos

    def taken_by(self, n_units: int, who: int) -> list[int]:
        return [p for p in range(min(n_units, MAX_UNITS)) if self._owner[p] == who]


def _taken(queue: _Queue, labels: Sequence[str], me: int):
    """The job indices ``me`` takes from the queue, unit by unit, until none is left."""
    order = units(labels)
    while (pos := queue.take(len(order), me)) is not None:
        yield from order[pos]


class Helper:
    """A forked process building its :func:`share` of the report's figure jobs.

    Start it with :meth:`start` before this process opens any DuckDB database; pass it to
    :func:`qkdb.charts.report.build_report`, which asks for its share (:meth:`share`) and
    collects it (:meth:`results`); :meth:`close` reaps it (always call it, in a ``finally``).
    """

    def __init__(self, pid: int, fd: int, queue: _Queue):
        self.pid, self.fd, self.queue = pid, fd, queue
        self.failure: str | None = None  # why its share was not used, once :meth:`results` said {}

    @classmethod
    def start(cls, open_con: Callable[[], duckdb.DuckDBPyConnection], models=None, series=None) -> Helper | None:
        """Fork the helper, or None where :func:`available` says no. ``open_con`` opens and prepares
        the warehouse exactly as the caller's own connection is (e.g. snapshotted)."""
        if not available():
            return None
        for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
            stream.flush()
        queue = _Queue()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child (its effect is tested)
            os.close(r)
            _child(w, queue, open_con, models, series)
        os.close(w)
        return cls(pid, r, queue)

    def take(self, labels: Sequence[str]):
        """The job indices this process (the parent) builds: taken from the shared queue one unit at a time."""
        return _taken(self.queue, labels, PARENT)

    def theirs(self, labels: Sequence[str]) -> set[int]:
        """The job indices the helper took (after :meth:`results`: it takes no more)."""
        order = units(labels)
        return {i for pos in self.queue.taken_by(len(order), HELPER) for i in order[pos]}

    def results(self, labels: Sequence[str]) -> dict:
        """Index → :class:`~qkdb.charts.report.Made` of the helper's share; {} if it failed or saw other jobs."""
        chunks = []
        with os.fdopen(self.fd, "rb") as f:
            self.fd = -1
            while chunk := f.read(1 << 20):
                chunks.append(chunk)
        self._reap()
        try:
            message = pickle.loads(b"".join(chunks))
        except Exception:  # nothing or a torn message: the helper died; the parent builds its share
            self.failure = "it ended without a result"
            return {}
        if message[0] == "failed":
            self.failure = message[1]
            return {}
        _, seen, made = message
        if list(seen) != list(labels):
            self.failure = "it saw other models or series (an ingest or removal landed as the report started)"
            return {}
        return made

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def _reap(self) -> None:
        if self.pid:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = 0


def _child(fd: int, queue: _Queue, open_con, models, series) -> None:  # pragma: no cover - runs in the child
    code = 1
    try:
        from qkdb.charts.data import one_read_of_models, single_threaded
        from qkdb.charts.explorer import shared
        from qkdb.charts.report import _jobs, _label, make_figure

        con = open_con()
        with one_read_of_models():
            jobs = _jobs(con, models, series)
        labels = [_label(j) for j in jobs]
        with shared(), single_threaded(con), one_read_of_models():
            made = {i: make_figure(con, jobs[i][0], jobs[i][1]) for i in _taken(queue, labels, HELPER)}
        con.close()
        payload = pickle.dumps(("made", labels, made), protocol=pickle.HIGHEST_PROTOCOL)
        code = 0
    except BaseException as exc:  # a Ctrl-C or a bug: the parent builds the share itself, and says why
        payload = pickle.dumps(("failed", f"{type(exc).__name__}: {exc}".rstrip(": ")))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
    except BaseException:  # (the parent is gone: nothing to tell)
        code = 1
    finally:
        # Never back into the caller's code (the CLI, pytest): no atexit handlers, no flushing of
        # buffers inherited from the parent.
        os._exit(code)

"""The report's figures built in two processes: a forked helper builds a share of them.

Building the report is Python-bound: Altair composes and serialises each figure under the GIL
(~80% of a report's build on 23 models), so a thread would not help, and a second interpreter
started afresh would spend its first ~0.4 s importing DuckDB and Altair. A process forked from
the CLI has them already. It opens the warehouse on its own (read-only, as the CLI does; DuckDB
lets several processes read one file), prepares it the same way, builds the figures given to it
and sends their specs back as one pickle through a pipe; the parent builds the rest meanwhile and
puts all of them on the page in page order. The page is byte for byte the one a single process
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
# heads of benchmarks/latency.py's warehouses, with charts.altair_copy); the rest cost ~0.4. Only
# the split's balance depends on them.
COST = {
    "rq-vs-rk": 5.0, "complement-collage": 3.7, "pca-collage": 3.3, "explained-variance": 3.0,
    "pc-roles": 2.3, "bias-vs-separation": 2.2, "ab-plane-collage": 2.2, "drift-bars": 1.5,
    "series-explained-variance": 1.4, "depth-heatmaps": 1.3, "slope-ratio": 1.1,
    "variance-decomposition": 0.9, "depth-heatmap-rk": 0.8, "depth-heatmap-rq": 0.7,
    "series-phase-portraits": 0.6,
}
# Figures built in the same process as the first of their group: the head explorer's points are
# read once per process (charts.explorer.shared), and the first query of the ``points`` table in a
# process reads every model's file footers (0.15 s on 467 models). Costs are each figure's own,
# given the group's first.
TOGETHER = {name: "rq-vs-rk" for name in ("bias-vs-separation", "pca-collage", "ab-plane-collage", "complement-collage")}
# The parent's own work besides its share, in the same units: the scorecard's inputs before the
# figures (0.09 s at 27,900 heads, 0.35 s at 140,100) and the page after them, less what the helper
# spends pickling its share.
PARENT_EXTRA = 2.0
# What the parent does besides its share: the findings, the lead, the page, unpickling the share.


def available() -> bool:
    """True where a helper may be forked now: Linux, two or more usable cores, one thread running."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        # Native threads count (DuckDB's, BLAS's), not only Python's.
        return len(os.sched_getaffinity(0)) >= 2 and len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def share(labels: Sequence[str]) -> set[int]:
    """The job indices the helper builds: greedy by cost, heaviest first, to whichever side has less
    (a figure of :data:`TOGETHER` to its partner's side).

    The parent starts with :data:`PARENT_EXTRA`, its work besides the figures.
    """
    loads = {"parent": PARENT_EXTRA, "helper": 0.0}
    theirs: set[int] = set()
    side: dict[str, str] = {}
    for i in sorted(range(len(labels)), key=lambda i: (-_cost(labels[i]), i)):
        name = labels[i].split(" (")[0]
        partner = TOGETHER.get(name, name)
        who = side.get(partner) or min(loads, key=lambda k: (loads[k], k == "parent"))
        side.setdefault(name, who)
        loads[who] += _cost(labels[i])
        if who == "helper":
            theirs.add(i)
    return theirs


def _cost(label: str) -> float:
    return COST.get(label.split(" (")[0], 0.4)


class Helper:
    """A forked process building its :func:`share` of the report's figure jobs.

    Start it with :meth:`start` before this process opens any DuckDB database; pass it to
    :func:`qkdb.charts.report.build_report`, which asks for its share (:meth:`share`) and
    collects it (:meth:`results`); :meth:`close` reaps it (always call it, in a ``finally``).
    """

    def __init__(self, pid: int, fd: int):
        self.pid, self.fd = pid, fd
        self.failure: str | None = None  # why its share was not used, once :meth:`results` said {}

    @classmethod
    def start(cls, open_con: Callable[[], duckdb.DuckDBPyConnection], models=None, series=None) -> Helper | None:
        """Fork the helper, or None where :func:`available` says no. ``open_con`` opens and prepares
        the warehouse exactly as the caller's own connection is (e.g. snapshotted)."""
        if not available():
            return None
        for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
            stream.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child (its effect is tested)
            os.close(r)
            _child(w, open_con, models, series)
        os.close(w)
        return cls(pid, r)

    def share(self, jobs: Sequence) -> set[int]:
        from qkdb.charts.report import _label

        return share([_label(j) for j in jobs])

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


def _child(fd: int, open_con, models, series) -> None:  # pragma: no cover - runs in the child
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
            made = {i: make_figure(con, jobs[i][0], jobs[i][1]) for i in sorted(share(labels))}
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

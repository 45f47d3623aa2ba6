"""Runtime tuning of an ingest, in one place: its worker processes, their BLAS threads, the allocator.

Standard library only: :mod:`qkdb.__main__` imports this before anything heavy
(:func:`tune_command_line`), so that the workers' fork server imports numpy, pyarrow and scipy on
one core while the CLI imports itself on the other. The ingest itself calls
:func:`tune_ingest_process`; each worker :func:`keep_freed_memory` and one BLAS thread.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# What every worker needs, imported once by the fork server instead of once per worker (~1 s of
# CPU each). "__main__" too: otherwise each worker re-runs the main script's imports.
# `fork_server` makes the server's own exit quick (see there).
PRELOAD = ["__main__", "qkdb.ingest.engine.fork_server", "qkdb.ingest.engine.pool", "scipy.linalg"]

# Set in the fork server's environment only: `fork_server` acts on it there, and removes it.
FORK_SERVER_MARK = "QKDB_FORK_SERVER"


def mp_context():
    """The multiprocessing context of the ingest's pool: a preloaded fork server where there is one."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


# One thread for every BLAS and OpenMP runtime a worker may load (OpenBLAS in numpy's and scipy's
# wheels, MKL or OpenMP builds elsewhere). Read when the library loads, so it must be in the
# environment before the fork server imports numpy.
SINGLE_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


@contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the duration of the block (processes started in it inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_workers(workers: int) -> None:
    """Start the worker processes' fork server now, without waiting for it.

    Its imports (~0.7 s of CPU) then run on another core while the caller gets ready, instead of
    delaying the first head. Does nothing for one worker or where there is no fork server (the
    pool starts its processes when it is created). Idempotent.

    The server, and so every worker forked from it, starts with one BLAS thread: workers compute
    with one thread each anyway (``threadpool_limits(1)``), but a BLAS library started with more
    creates its threads when it loads — in the server and again in each worker — and they spin
    ~0.1 s of CPU each on cores the ingest needs (measured: ~0.5 s of CPU, ~4 % of a core ingest).
    """
    if workers > 1 and mp_context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        with scoped_env({**SINGLE_THREAD_ENV, FORK_SERVER_MARK: "1"}):
            forkserver.ensure_running()


# prctl's option (linux/prctl.h): the signal the kernel sends a process when its parent ends.
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> bool:
    """Have the kernel SIGKILL this process as soon as its parent process ``parent`` ends.

    Parameters
    ----------
    parent : int
        The pid this process's parent had when it forked this one. If the parent has already
        ended (this process was re-parented before the signal was armed, so it would never
        come), this process exits at once with status 1.

    Returns
    -------
    bool
        Whether the signal is armed: only on Linux (``PR_SET_PDEATHSIG``); elsewhere nothing
        is done.

    Notes
    -----
    The kernel sends the signal when the *thread* that forked this process ends, not the whole
    parent process: call it only in a process forked by a thread that lasts as long as its
    parent. It is not inherited by children of ``fork``, and survives ``exec``.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None).prctl  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:
        os._exit(1)
    return True


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(largest: int = 32 << 20, keep: int = 256 << 20) -> bool:
    """Have glibc's malloc reuse freed blocks of up to ``largest`` bytes instead of unmapping them.

    A worker allocates and frees arrays of the same few sizes for every head (subsamples, phasor
    tables, scores: 0.1–8 MiB each). By default glibc serves blocks above 128 KiB with a fresh
    ``mmap`` and unmaps them at ``free`` (it raises that threshold only as it sees larger blocks
    freed, and trims the heap's top back to the system), so each head pays for page faults and
    zeroed pages on first touch: a third of the complement stage's time. From the heap, and not
    trimmed below ``keep`` bytes, they are reused warm. What is kept is bounded by the worker's
    peak, which does not grow with the number of heads.

    Returns whether the settings were applied (only where the C library is glibc). Meant for the
    ingest's worker processes: it changes how the whole process allocates.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False  # not glibc (musl has no mallopt): nothing to tune
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # Each returns 1 on success; glibc caps the mmap threshold at 32 MiB on 64-bit systems.
    return bool(mallopt(_M_MMAP_THRESHOLD, largest)) & bool(mallopt(_M_TRIM_THRESHOLD, keep))


def is_ingest(argv: list[str]) -> bool:
    """Whether a ``qkdb`` command line runs an ingest (not its help)."""
    args = [a for a in argv if not a.startswith("-")]
    return bool(args) and args[0] == "ingest" and "-h" not in argv and "--help" not in argv


def wants_workers(argv: list[str]) -> bool:
    """Whether a ``qkdb`` command line will run an ingest with several workers (a cheap guess).

    A wrong guess costs little: an idle fork server, or a late one.
    """
    if not is_ingest(argv) or (os.cpu_count() or 1) < 2:
        return False
    for i, a in enumerate(argv):
        value = None
        if a in ("--workers", "-j") and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith("--workers="):
            value = a.split("=", 1)[1]
        elif a.startswith("-j") and len(a) > 2:
            value = a[2:]
        if value is not None:
            return value.strip() != "1"
    return True


def tune_command_line(argv: list[str]) -> bool:
    """Tune a ``qkdb`` process for its command line before it imports anything heavy; True for an ingest.

    An ingest's own process does no linear algebra worth a second thread (its workers do, with one
    thread each), but OpenBLAS would start one as numpy loads, and it would spin ~0.1 s of CPU
    while this process imports the CLI: the critical path to the first head. A value the user set
    is kept. With several workers, their fork server starts now: it imports numpy, pyarrow and
    scipy (~0.7 s) on another core while this process imports the CLI (~0.7 s), so the first head
    comes that much sooner. The ingest starts it anyway (idempotent): a failure here is left for
    it to meet.
    """
    ingest = is_ingest(argv)
    if ingest:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if wants_workers(argv):
        try:
            start_workers(2)
        except (OSError, ValueError):
            pass
    return ingest


def tune_ingest_process(workers: int) -> None:
    """Tune the process that runs an ingest: it stages every head's rows (or computes them, with one
    worker) like a worker, so it keeps freed memory for reuse; and the workers' fork server starts now."""
    keep_freed_memory()
    start_workers(workers)

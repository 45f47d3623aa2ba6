"""Preloaded by the ingest workers' fork server (its workers inherit it): how long they live.

When the ingest's process ends, its fork server sees its pipe close and exits. Tearing down
numpy, scipy and pyarrow module by module takes it another ~0.15 s, during which it still holds
the standard streams it inherited: a caller that captures the ingest's output (``subprocess.run``
in a script ingesting many models, the benchmark) waits that long after the ingest has finished.
The server has nothing to flush or release — it writes nothing, and its workers have exited —
so once its exit has begun it ends with ``os._exit``.

That pipe (its "alive" pipe) is also what ends the server, and with it the workers, when the
ingest dies without a word (SIGKILL, SIGTERM, a crash): see :func:`bind_worker`.
"""

import atexit
import os
import signal

from qkdb.ingest.engine.runtime import FORK_SERVER_MARK, die_with_parent

# Only in the process `start_workers` started (the mark is in its environment alone), and never
# in the workers forked from it later (the mark is gone by then): they exit on their own terms.
if os.environ.pop(FORK_SERVER_MARK, None) == "1":
    atexit.register(os._exit, 0)
    # Inherited by every worker forked from this server: their parent's pid, known before the fork.
    SERVER_PID = os.getpid()
else:
    SERVER_PID = None


def bind_worker() -> None:
    """Tie a pool worker's life to its fork server's, and the server's to the ingest's.

    Call it first in the worker's initializer. Does nothing unless this process was forked by
    the server :func:`qkdb.ingest.engine.runtime.start_workers` started (elsewhere there is no such
    server, or it is someone else's).

    Notes
    -----
    The server exits when its alive pipe reaches end-of-file, i.e. once every holder of the
    pipe's write end has exited. The stdlib hands a copy of that end to each worker (for workers
    that start processes of their own, which ours never do), so idle workers kept the server
    alive; and nothing stopped an idle worker, whose task queue never reaches end-of-file (the
    workers hold its write end too): after a SIGKILL of the ingest all lived on. So, in this order:

    1. the kernel is asked to kill the worker when the server ends (``PR_SET_PDEATHSIG``; the
       server forks its workers from its main thread, which lasts as long as the server);
    2. if the server ended before that took effect, the worker exits now;
    3. the worker closes its copy of the pipe: the ingest's process is then its only holder,
       and the server exits as soon as that process does, whichever of its threads started it.

    Until step 3 the worker's own copy keeps the server alive, so the server cannot exit
    through its pipe between the fork and step 1. The multiprocessing resource tracker, held
    open by the ingest and its workers only, then sees its own pipe close and exits too.

    The worker also ignores SIGINT, as the server and the tracker already do: a Ctrl-C reaches
    the terminal's whole process group, and the ingest alone should answer it (it stops its pool
    and says "interrupted"); otherwise each idle worker printed a KeyboardInterrupt traceback.
    """
    if SERVER_PID is None or os.getpid() == SERVER_PID:
        return
    die_with_parent(SERVER_PID)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from multiprocessing import forkserver

    server = forkserver._forkserver  # (private; its fields have been stable since Python 3.4)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None and getattr(server, "_forkserver_pid", None) is None:
        # (a pid here would make the pipe this process's own handle on a server it started)
        server._forkserver_alive_fd = None
        os.close(fd)

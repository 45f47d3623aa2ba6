"""Preloaded by the ingest workers' fork server, and only there: it exits without tearing itself down.

When the ingest's process ends, its fork server sees its pipe close and exits. Tearing down
numpy, scipy and pyarrow module by module takes it another ~0.15 s, during which it still holds
the standard streams it inherited: a caller that captures the ingest's output (``subprocess.run``
in a script ingesting many models, the benchmark) waits that long after the ingest has finished.
The server has nothing to flush or release — it writes nothing, and its workers have exited —
so once its exit has begun it ends with ``os._exit``.
"""

import atexit
import os

from qkdb.ingest.workers import FORK_SERVER_MARK

# Only in the process `start_workers` started (the mark is in its environment alone), and never
# in the workers forked from it later (the mark is gone by then): they exit on their own terms.
if os.environ.pop(FORK_SERVER_MARK, None) == "1":
    atexit.register(os._exit, 0)

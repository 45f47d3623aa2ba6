"""``python -m qkdb`` and the ``qkdb`` console script: the CLI."""

import os
import sys


def main() -> None:
    from qkdb.ingest.engine.runtime import is_ingest, start_workers, wants_workers

    ingest = is_ingest(sys.argv[1:])
    if ingest:
        # An ingest's own process does no linear algebra worth a second thread (its workers do,
        # with one thread each), but OpenBLAS would start one as numpy loads, and it would spin
        # ~0.1 s of CPU while this process imports the CLI: the critical path to the first head.
        # Set before anything imports numpy; a value the user set is kept.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if wants_workers(sys.argv[1:]):
        # The workers' fork server imports numpy, pyarrow and scipy (~0.7 s) on another core
        # while this process imports the CLI (~0.7 s): started here, an ingest's first head comes
        # that much sooner. The ingest starts it anyway (idempotent): a failure here is left for it
        # to meet.
        try:
            start_workers(2)
        except (OSError, ValueError):
            pass
    from qkdb.cli import main as cli_main

    if not ingest:
        cli_main()
        return
    try:
        cli_main()
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(0)


def _exit_now(code) -> None:
    """End an ingest's process without tearing down its modules (~0.1 s of numpy, pyarrow, duckdb).

    By the time the command returns, everything it wrote is closed and synced (tables, catalog,
    run log) and its workers have exited; what is left is for the interpreter to free. The
    standard streams are flushed here, as ``sys.exit`` would.
    """
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing more can be delivered anyway
    os._exit(code)


if __name__ == "__main__":
    main()

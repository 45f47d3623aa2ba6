"""``python -m qkdb`` and the ``qkdb`` console script: the CLI."""

import os
import sys


def main() -> None:
    from qkdb.ingest import tune_command_line

    ingest = tune_command_line(sys.argv[1:])
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

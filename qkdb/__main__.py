"""``python -m qkdb`` and the ``qkdb`` console script: the CLI."""

import sys


def main() -> None:
    from qkdb.ingest.workers import start_workers, wants_workers

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

    cli_main()


if __name__ == "__main__":
    main()

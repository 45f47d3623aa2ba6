"""Running qkdb ingests in processes of their own, and reading what they left (crash and orphan tests)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import duckdb

FACTS = ["--family", "Toy", "--gqa-ratio", "2", "--n-layers", "2"]


def sigint_as_at_a_terminal() -> None:
    """``preexec_fn`` for a child that must take Ctrl-C as a terminal's foreground job does.

    A job started in the background by a non-interactive shell (``.ci/run &``, nohup) inherits
    SIGINT *ignored*, and so would its children: Python then installs no KeyboardInterrupt handler.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ingest_cmd(path, model, *extra, pause: str | None = None, seconds: float = 30.0):
    """``qkdb ingest`` in a process of its own; ``pause`` stops it ``seconds`` at that point of the ingest.

    The pause is injected into that process (``store.PAUSES``) before the CLI runs: the same
    entry point as the ``qkdb`` command, nothing read from the environment.
    """
    code = "from qkdb.warehouse import store\n"
    if pause:
        code += f"store.PAUSES[{pause!r}] = {seconds!r}\n"
    code += "from qkdb.__main__ import main\nmain()\n"
    return [sys.executable, "-c", code, "ingest", "--path", str(path), "--model", model, *FACTS, "-q", "-j", "1", *extra]


def _snapshot(home: Path) -> dict[str, int]:
    con = duckdb.connect(str(home / "qk.duckdb"), read_only=True)
    try:
        return {
            t: con.execute(f"select count(*) from {t}").fetchall()[0][0]
            for t in ("heads", "pca", "rotation", "models", "head_metrics")
        }
    finally:
        con.close()


def _wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False

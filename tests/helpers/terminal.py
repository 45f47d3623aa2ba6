"""Driving a real ``qkdb`` process in a pseudo-terminal (pexpect), as a person at a keyboard would."""

from __future__ import annotations

import io
import os
import sys

import pexpect

from helpers.processes import sigint_as_at_a_terminal

TAB, ESCAPE, CTRL_A, CTRL_C, CTRL_D, CTRL_J, CTRL_Q = "\t", "\x1b", "\x01", "\x03", "\x04", "\n", "\x11"


def spawn_qkdb(*args: str, prelude: str = "", env: dict[str, str] | None = None, timeout: float = 30,
               columns: int = 200, cwd: str | os.PathLike | None = None) -> pexpect.spawn:
    """``qkdb ARGS`` on a pseudo-terminal of 40 rows and ``columns`` columns (in ``cwd``); ``prelude`` is Python run in that process before the CLI.

    The terminal is plain and predictable: no colours, no user readline settings (``INPUTRC``).
    Everything the process writes is kept in ``child.transcript`` (a StringIO) for failure messages.
    """
    code = f"{prelude}\nfrom qkdb.__main__ import main\nmain()\n"
    # COLUMNS/LINES say the terminal's size to programs that read them before the terminal's own
    # (Textual, rich); pytest-xdist's workers set them to 80×24, so they are set to the pty's here.
    full_env = {**os.environ, "NO_COLOR": "1", "TERM": "xterm", "INPUTRC": os.devnull,
                "COLUMNS": str(columns), "LINES": "40", **(env or {})}
    child = pexpect.spawn(
        sys.executable, ["-c", code, *args], env=full_env, encoding="utf-8", dimensions=(40, columns), timeout=timeout, cwd=cwd,
        preexec_fn=sigint_as_at_a_terminal,
    )
    child.transcript = io.StringIO()
    child.logfile_read = child.transcript
    return child


def finish(child: pexpect.spawn, timeout: float = 30) -> int:
    """Wait for the process to end; its exit status."""
    child.expect(pexpect.EOF, timeout=timeout)
    child.close()
    return child.exitstatus

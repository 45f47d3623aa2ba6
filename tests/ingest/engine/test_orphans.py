"""Nothing left behind: an ingest's helper processes end when the ingest dies, however it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from qkdb.ingest.engine.runtime import die_with_parent
from qkdb.warehouse import store

from helpers.datasets import make_dataset
from helpers.processes import FACTS, _snapshot, _wait_for, sigint_as_at_a_terminal

psutil = pytest.importorskip("psutil")

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# `python -m qkdb` starts the fork server early, from its entry point; the CLI called directly
# leaves it to the pool, started when the first groups are submitted.
# The ingest sleeps after each head it receives (a pause injected into its process before the CLI
# runs): killed in that sleep, its pool is running. "early": through qkdb's entry point, which
# starts the workers' fork server before the CLI loads; "lazy": the CLI alone, the pool starts it.
_PAUSE = "from qkdb.warehouse import store; store.PAUSES['after_head'] = 30; import sys; sys.argv[0] = 'qkdb'; "
ENTRIES = {
    "early": [sys.executable, "-c", _PAUSE + "from qkdb.__main__ import main; main()"],
    "lazy": [sys.executable, "-c", _PAUSE + "from qkdb.cli import main; main()"],
}


def _gone(proc) -> bool:
    # A zombie has ended; only its exit status waits for whoever adopted it to reap.
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _describe(proc) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:80]}"
    except psutil.Error:
        return str(proc.pid)


def _start_ingest(tmp_path, entry: str, **popen):
    ds = make_dataset(tmp_path / "ds")
    home = tmp_path / "home"
    cmd = [*ENTRIES[entry], "ingest", "--path", str(ds), "--model", "toy", *FACTS, "-q", "--workers", "2",
           "--home", str(home)]
    # stderr to a file, not a pipe: the helpers inherit it, and a pipe they kept open would hang
    # the test reading it instead of failing it.
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(cmd, stderr=err, preexec_fn=sigint_as_at_a_terminal, **popen)
    return proc, home


def _helpers(proc, home) -> list:
    """Every descendant of the running ingest ``proc``, once its two workers are at work."""
    me = psutil.Process(proc.pid)

    def ready() -> bool:
        kids = me.children(recursive=True)
        return len(kids) == 4 and any((home / store.STAGING).glob("toy.*/heads/data.parquet"))

    assert _wait_for(ready), "the ingest never got its pool running"
    kids = me.children(recursive=True)
    # The shape the test is about: the tracker and the fork server under the ingest, the workers
    # under the fork server. Were it different, "all gone" would prove less than it says.
    by_role = {"tracker": [], "server": [], "worker": []}
    for p in kids:
        if p.ppid() == proc.pid:
            by_role["tracker" if "resource_tracker" in " ".join(p.cmdline()) else "server"].append(p)
        else:
            by_role["worker"].append(p)
    assert [len(by_role[r]) for r in ("tracker", "server", "worker")] == [1, 1, 2], kids
    assert all(w.ppid() == by_role["server"][0].pid for w in by_role["worker"])
    return kids


def _assert_all_gone(kids, within: float = 5.0) -> None:
    ok = _wait_for(lambda: all(_gone(p) for p in kids), timeout=within)
    left = [_describe(p) for p in kids if not _gone(p)]
    for p in kids:  # whatever the outcome, leave nothing running for the next test
        if not _gone(p):
            p.kill()
    assert ok, f"still running {within} s after the ingest died: {left}"


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["early", "lazy"])
def test_sigkill_of_the_ingest_ends_its_fork_server_tracker_and_workers(tmp_path, entry):
    proc, home = _start_ingest(tmp_path, entry)
    try:
        kids = _helpers(proc, home)
    finally:
        proc.kill()  # SIGKILL of the qkdb Python process itself (no shell in between)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    _assert_all_gone(kids)
    snap = _snapshot(home)
    assert all(v == 0 for v in snap.values()), snap  # nothing published


@pytest.mark.slow
def test_sigterm_of_the_ingest_ends_its_helpers(tmp_path):
    proc, home = _start_ingest(tmp_path, "early")
    try:
        kids = _helpers(proc, home)
    finally:
        proc.terminate()
        proc.wait()
    assert proc.returncode == -signal.SIGTERM  # (no handler: the ingest dies as on SIGKILL)
    _assert_all_gone(kids)
    assert all(v == 0 for v in _snapshot(home).values())


@pytest.mark.slow
def test_ctrl_c_stops_the_ingest_alone_and_quietly(tmp_path):
    # A terminal's Ctrl-C signals the whole foreground process group: the ingest, its fork
    # server, tracker and workers alike.
    proc, home = _start_ingest(tmp_path, "early", start_new_session=True)
    try:
        kids = _helpers(proc, home)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert (tmp_path / "stderr").read_text() == "interrupted\n"  # one message, no worker's traceback
    _assert_all_gone(kids)
    assert not home.exists()  # a first ingest stopped before publishing leaves no empty home


_CHILD = """
import os, sys, time
from qkdb.ingest.engine.runtime import die_with_parent
armed = die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())
print(armed, flush=True)
time.sleep(60)
"""


@linux_only
def test_die_with_parent_exits_at_once_when_the_parent_is_already_gone():
    # The parent may end before the signal is armed; then it would never come.
    wrong = os.getpid() + 1  # the child's parent is this process
    out = subprocess.run([sys.executable, "-c", _CHILD, str(wrong)], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (1, "")


@linux_only
def test_die_with_parent_kills_the_child_with_its_parent():
    # parent: a Python process that starts the child from its main thread, then waits to be killed.
    parent_code = (
        "import subprocess, sys, time; "
        f"c = subprocess.Popen([sys.executable, '-c', {_CHILD!r}], stdout=subprocess.PIPE, text=True); "
        "print(c.pid, c.stdout.readline().strip(), flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        pid, armed = parent.stdout.readline().split()
        child = psutil.Process(int(pid))
        assert armed == "True"
    finally:
        parent.kill()
        parent.communicate()
    _assert_all_gone([child], within=3.0)


def test_die_with_parent_does_nothing_off_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert die_with_parent(os.getppid()) is False

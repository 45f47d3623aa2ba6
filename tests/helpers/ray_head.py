"""A real Ray head on loopback for the cluster tests, started with `ray start` and ended by killing what it started.

Ray binds the machine's network address unless told otherwise, even with ``--node-ip-address
127.0.0.1``; ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its macOS/Windows default) makes it use
loopback, for the head and for every driver started with :data:`RayHead.env`. Token
authentication is off: it turns itself on wherever ``~/.ray/auth_token`` exists (a local Ray
instance writes one), and the Ray Client does not send the token. The head's session
files live in a temporary ``RAY_TMPDIR``: every process it starts names that folder on its command
line (or the head's address), which is how the teardown finds them (and their children, the workers) to end them — never
``ray stop``, which ends every Ray process on the machine, other sessions' too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@contextlib.contextmanager
def short_tmp() -> Iterator[Path]:
    """A fresh folder with a short path, removed afterwards: Ray's socket paths under it must stay
    within AF_UNIX's 107 bytes, which pytest's own temporary folders can exceed."""
    path = Path(tempfile.mkdtemp(prefix="qkray-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RayHead:
    tmp: Path
    port: int
    client_port: int
    env: dict  # the environment a driver needs to reach it on loopback

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def client_address(self) -> str:
        return f"ray://127.0.0.1:{self.client_port}"

    def processes(self) -> list[psutil.Process]:
        """Every process of this head: those naming its folder, and their descendants (the workers)."""
        # (The Ray Client server names neither the folder nor anything but the head's GCS address.)
        mine, markers = {}, (str(self.tmp), f"127.0.0.1:{self.port}")
        for p in psutil.process_iter(["cmdline"]):
            try:
                if any(m in part for part in p.info["cmdline"] or () for m in markers):
                    mine[p.pid] = p
                    for child in p.children(recursive=True):
                        mine[child.pid] = child
            except psutil.Error:
                continue
        return list(mine.values())

    def task_processes(self, name: str) -> list[psutil.Process]:
        """The head's workers running the Ray task ``name`` (Ray titles a busy worker ``ray::NAME``)."""
        out = []
        for p in self.processes():
            try:
                if (p.cmdline() or [""])[0].startswith(f"ray::{name}"):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def stop(self) -> None:
        procs = self.processes()
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        # the raylet and the agents end within ~2 s of SIGTERM; the GCS server and the autoscaler's
        # monitor outlast any wait (measured: still there after 12 s), so the rest is killed after 3 s
        _, alive = psutil.wait_procs(procs, timeout=3)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=10)


def start_head(tmp: Path, cpus: int = 2, object_store_mib: int = 200) -> RayHead:
    """`ray start --head` on loopback, a free port, no dashboard, no usage reports; returns once it is up.

    (The tests' models are small: a 200 MiB object store is plenty and spares the machine's memory;
    benchmarks/cluster.py asks for more.)
    """
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **LOOPBACK_ENV, "RAY_TMPDIR": str(tmp)}
    head = RayHead(tmp, free_port(), free_port(), env)
    cmd = [
        RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(head.port),
        "--ray-client-server-port", str(head.client_port), "--dashboard-agent-listen-port", str(free_port()),
        "--metrics-export-port", str(free_port()), "--dashboard-port", str(free_port()), "--num-cpus", str(cpus), "--include-dashboard=false",
        "--disable-usage-stats", "--object-store-memory", str(object_store_mib * 2**20), "--temp-dir", str(tmp),
    ]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except BaseException:
        head.stop()
        raise
    if done.returncode != 0:
        head.stop()
        raise RuntimeError(f"ray start failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return head


@contextlib.contextmanager
def running_head(**kwargs):
    """A Ray head in a short temporary folder for the block; stopped after it, with nothing left running."""
    with short_tmp() as tmp:
        head = start_head(tmp, **kwargs)
        try:
            yield head
        finally:
            head.stop()
            assert head.processes() == [], "Ray processes were left running"


def wait_for(predicate, timeout: float = 60.0, every: float = 0.02):
    """Poll ``predicate`` until it returns something true (returned), or None at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None

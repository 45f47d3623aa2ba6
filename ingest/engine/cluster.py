"""Running an ingest's models on a Ray cluster: one Ray task per model, results back through Ray's object store.

The local pool (:mod:`.pool`) spreads one model's head groups over this machine's cores; this
backend spreads whole models over a cluster's. :func:`run_models` has the pool's shape: calls go
in, and each one's outcome comes out as soon as it completes, so the caller publishes every model
while the others still run. What a call computes is the caller's function (the pipeline's
``compute_model``: read the source on the worker, compute the model's tables, return them as
Arrow); this module only knows Ray — connecting, submitting, retrying, and telling a model's own
failure from a lost worker.

Ray is imported here only, and only when a cluster is asked for: ``import qkdb`` and an ingest
on one machine never load it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from qkdb.errors import ClusterError, InputError

INSTALL_HINT = "pip install 'qkdb[cluster]'"
ADDRESS_FORMS = "'local', 'auto', HOST:PORT or ray://HOST:PORT"

# Ray retries a task whose worker process or node died this many times before it reports the
# model lost. An exception raised by the task itself (bad input) is never retried: it would fail
# again the same way.
RETRIES = 2
# Tries of a Ray client's connection when the head fails to start its server for this client.
CLIENT_ATTEMPTS = 3

# Seconds to wait for a cluster's port to take a connection before saying it cannot be reached.
PROBE_SECONDS = 10.0


@dataclass
class ClusterCall:
    """One model's work: ``label`` names it until its result names the model (a path, or the model's name)."""

    label: str
    args: tuple


@dataclass
class ClusterOutcome:
    """What became of one :class:`ClusterCall`: the function's return value, or why there is none."""

    call: ClusterCall
    value: Any = None
    error: str | None = None  # the task raised, or its worker was lost after Ray's retries
    kind: str = "internal"  # the error's kind (qkdb.errors.EXIT_CODES)


def check_cluster_address(address: str) -> str:
    """``address`` if it is one of the forms ``--cluster`` takes, else an :class:`InputError` listing them."""
    text = address.strip()
    if text in ("local", "auto"):
        return text
    rest = text.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or "/" in rest or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--cluster {address!r}: give {ADDRESS_FORMS}")
    return text


def import_ray():
    """The ``ray`` module, or a one-line :class:`ClusterError` naming the extra that brings it."""
    try:
        import ray
    except ImportError as exc:
        # The machine's kind, not usage: the command line is right and runs once the extra is installed.
        raise ClusterError(f"--cluster needs Ray ({exc.name} is missing): {INSTALL_HINT}", kind="system") from None
    return ray


class RayCluster:
    """A connection to a Ray cluster for the duration of a ``with`` block.

    ``'local'`` starts a Ray instance in this process (with ``num_cpus`` CPUs, default all),
    stopped when the block ends; the other forms connect to a running cluster and leave it running.
    """

    def __init__(self, address: str, num_cpus: int | None = None):
        self.address = check_cluster_address(address)
        self.num_cpus = num_cpus
        self.ray = import_ray()

    @property
    def ray_version(self) -> str:
        return self.ray.__version__

    def __enter__(self) -> RayCluster:
        import logging

        ray = self.ray
        kwargs: dict[str, Any] = {
            # Workers' prints would reach this process's stdout, which carries data only.
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        if self.address == "local":
            # A local instance needs no address but loopback: Ray otherwise binds the machine's
            # network address. (Ray reads this when it picks the node's address; it is the switch
            # it uses on macOS and Windows, where clusters are off by default.) No usage reports.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            kwargs.update(address="local", include_dashboard=False, num_cpus=self.num_cpus)
        else:
            _probe(self.address)
            kwargs["address"] = self.address
        for attempt in range(CLIENT_ATTEMPTS):
            try:
                ray.init(**kwargs)
                break
            except ConnectionAbortedError as exc:
                # A Ray client's head starts one server process per client; on a loaded head that
                # start can time out and the client is told "Initialization failure from server".
                # The head itself answered (probed above), so another try is worth it.
                ray.shutdown()
                if attempt + 1 == CLIENT_ATTEMPTS or not self.address.startswith("ray://"):
                    raise ClusterError(f"cannot reach the Ray cluster at {self.address}: {_first_line(exc)} "
                                       f"({attempt + 1} attempts)", kind="network") from None
                time.sleep(2.0 * (attempt + 1))
            except (OSError, RuntimeError, ValueError) as exc:  # (ConnectionError and TimeoutError are OSErrors)
                raise ClusterError(f"cannot reach the Ray cluster at {self.address}: {_first_line(exc)}", kind="network") from None
        return self

    def __exit__(self, *exc_info) -> None:
        self.ray.shutdown()

    def run_models(self, fn: Callable, calls: Sequence[ClusterCall], *, retries: int = RETRIES,
                   name: str = "qkdb-ingest", num_gpus: float = 0) -> Iterator[ClusterOutcome]:
        """Run ``fn(*call.args)`` as one Ray task per call; yield each call's outcome as it completes.

        Each task asks for one CPU (and ``num_gpus`` GPUs: a capture's, ``qkdb sniff --cluster``) and
        computes its model in one process (a cluster has more models than a model has head groups
        worth spreading). ``fn`` must be importable on the workers: qkdb is installed there, at the
        driver's version. ``name`` prefixes the tasks' names. Closing the iterator early cancels the
        tasks still running.
        """
        ray = self.ray
        remote = ray.remote(fn)
        pending = {}
        for call in calls:
            # The task's name is its process title on the worker (`ray::qkdb-ingest:NAME`): what
            # `ray list tasks` and `ps` show.
            ref = remote.options(
                num_cpus=1, num_gpus=num_gpus, max_retries=retries, retry_exceptions=False, name=f"{name}:{call.label}",
            ).remote(*call.args)
            pending[ref] = call
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    call = pending.pop(ref)
                    yield self._outcome(ref, call, retries)
        finally:
            for ref in pending:  # closed early: an error on the driver, or Ctrl-C
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass

    def _outcome(self, ref, call: ClusterCall, retries: int) -> ClusterOutcome:
        exceptions = self.ray.exceptions
        lost = tuple(
            getattr(exceptions, name) for name in
            ("WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError", "OutOfMemoryError",
             "TaskUnschedulableError", "ActorDiedError")
            if hasattr(exceptions, name)
        )
        try:
            return ClusterOutcome(call, value=self.ray.get(ref))
        except lost as exc:
            # A node or process the cluster lost is worth another try later ("network"); memory it
            # ran out of is the machine's ("system"): the same model would run out again.
            kind = "system" if type(exc).__name__ == "OutOfMemoryError" else "network"
            return ClusterOutcome(call, error=f"worker lost after {retries} retries ({type(exc).__name__}: "
                                              f"{_first_line(exc)})", kind=kind)
        except exceptions.RayTaskError as exc:
            # The function raised something it does not turn into a result: a bug, shown as such.
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            return ClusterOutcome(call, error=f"failed on its worker: {type(cause).__name__}: {_first_line(cause)}")
        except exceptions.RayError as exc:
            # Anything else the cluster reports (a runtime environment that cannot be set up, a full
            # object store or disk, cancelled tasks): this model fails, the others go on.
            return ClusterOutcome(call, error=f"the cluster could not run it ({type(exc).__name__}: {_first_line(exc)})",
                                  kind="system")


def _probe(address: str, timeout: float = PROBE_SECONDS) -> None:
    """A :class:`ClusterError` ("network") unless ``address``'s port takes a TCP connection within ``timeout``.

    ``ray.init`` keeps retrying an address where nothing listens (minutes, with a log line every few
    seconds on stderr); a refused or silent port is said at once instead, in one line.
    """
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {why}", kind="network") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

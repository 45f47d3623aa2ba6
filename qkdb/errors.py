"""One error hierarchy for qkdb, and one exit code per kind of failure.

Every error a user can cause derives from :class:`QkdbError`; the CLI renders it once, as a
single line on stderr, and exits with the code of its *kind* — the same code in every command
(docs/cli.md has the table). The classes name the area that failed (a dataset, the registry, the
warehouse, the Hub, ...); the kind says what went wrong, so a script can tell "not found" from
"busy" from "the network" whatever the command. Each class has a usual kind; a raise site passes
``kind=`` where its failure is of another one. Library code raises these; it never prints.
"""

from __future__ import annotations

import errno
import os

# The kinds of failure and their exit codes (1 is a bug in qkdb: "internal").
EXIT_CODES = {
    "internal": 1,   # an unexpected error: a bug (the traceback with --debug)
    "usage": 2,      # a command line that cannot mean anything: unknown option, conflicting flags
    "input": 3,      # bad input: a malformed dataset, a value out of range, a failing SQL statement
    "not_found": 4,  # what was named does not exist: a model, a file, a figure, a warehouse, a branch
    "busy": 5,       # another process holds what is needed (a lock); try again later
    "network": 6,    # the Hugging Face Hub (or a cluster) cannot be reached or refused the request
    "system": 7,     # the machine: disk full, permission denied, read-only file system, name too long
}
INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class _ExitCode:
    # On an instance, the code of its kind; on a class, of the class's usual kind.
    def __get__(self, obj, cls) -> int:
        return EXIT_CODES[(obj if obj is not None else cls).kind]


class QkdbError(Exception):
    """Base class of every user-facing qkdb error.

    Parameters
    ----------
    message : str
        One line: what failed, where (the file, model or address) and, when it helps, what to do.
    kind : str, optional
        A key of :data:`EXIT_CODES`; default the class's usual kind.
    """

    kind = "input"

    def __init__(self, message: str = "", *, kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            if kind not in EXIT_CODES:
                raise ValueError(f"unknown error kind {kind!r}; one of {', '.join(EXIT_CODES)}")
            self.kind = kind

    exit_code = _ExitCode()


class UsageError(QkdbError):
    """A command line whose options contradict each other or lack a needed one."""

    kind = "usage"


class InputError(QkdbError):
    """A dataset on disk is missing, malformed or inconsistent (names the file and the problem)."""

    kind = "input"


class RegistryError(QkdbError):
    """A model name or its architecture facts are unknown or contradictory."""

    kind = "input"


class WarehouseError(QkdbError):
    """The warehouse home or catalog cannot be used (missing, locked, not writable, too new)."""

    kind = "system"


class QueryError(QkdbError):
    """A SQL statement failed or was refused (e.g. it would write)."""

    kind = "input"


class HubError(QkdbError):
    """Talking to the Hugging Face Hub failed (repo, branch, auth, offline, download)."""

    kind = "network"


class ChartError(QkdbError):
    """A figure cannot be built from what is in the warehouse."""

    kind = "input"


class ClusterError(QkdbError):
    """Running an ingest on a Ray cluster failed: the cluster cannot be reached, a worker was lost, Ray is missing."""

    kind = "network"


class SniffError(QkdbError):
    """Capturing queries and keys from a model failed."""

    kind = "input"


_OS_WORDS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENAMETOOLONG: "file name too long for this file system",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or folder",
}


def os_cause(exc: OSError) -> tuple[str, str]:
    """The kind and the plain words of an :class:`OSError` ("no space left on device", ...).

    Missing files are "not found"; everything else is the machine's ("system").
    """
    cause = _OS_WORDS.get(exc.errno) or exc.strerror or str(exc)
    return ("not_found" if exc.errno == errno.ENOENT else "system"), cause


def os_error_in_message(message: str, doing: str) -> QkdbError | None:
    """A machine fault that a library reported as text, as one line; None when there is none.

    DuckDB reports a full disk as ``Could not write file "/x/qk.duckdb.wal": No space left on
    device`` inside a transaction or I/O exception, not as an :class:`OSError`.
    """
    import re

    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.ENAMETOOLONG):
        if os.strerror(code) in message:
            path = re.search(r'"([^"]+)"', message)
            where = f"{path.group(1)}: " if path else ""
            return QkdbError(f"{where}{_OS_WORDS[code]} ({doing})", kind="system")
    return None


def from_os_error(exc: OSError, doing: str) -> QkdbError:
    """One line for an :class:`OSError` met while ``doing`` something (e.g. "writing the warehouse").

    The path first, then the cause and what was being done: "/x/y: no space left on device
    (qkdb ingest)".
    """
    kind, cause = os_cause(exc)
    where = exc.filename or ""
    return QkdbError(f"{str(where) + ': ' if where else ''}{cause} ({doing})", kind=kind)

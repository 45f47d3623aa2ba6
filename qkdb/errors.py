"""One error hierarchy for qkdb.

Every error a user can cause derives from :class:`QkdbError`; the CLI renders it once,
as a single line on stderr with the class's exit code, and never shows a traceback
unless ``--debug`` is given. Library code raises these; it never prints.
"""

from __future__ import annotations


class QkdbError(Exception):
    """Base class of every user-facing qkdb error."""

    exit_code = 1


class InputError(QkdbError):
    """A dataset on disk is missing, malformed or inconsistent (names the file and the problem)."""

    exit_code = 2


class RegistryError(QkdbError):
    """A model name or its architecture facts are unknown or contradictory."""

    exit_code = 2


class WarehouseError(QkdbError):
    """The warehouse home or catalog cannot be used (locked, not writable, too new)."""

    exit_code = 3


class QueryError(QkdbError):
    """A SQL statement failed or was refused (e.g. it would write)."""

    exit_code = 1


class HubError(QkdbError):
    """Talking to the Hugging Face Hub failed (repo, branch, auth, offline, download)."""

    exit_code = 4


class ChartError(QkdbError):
    """A figure cannot be built from what is in the warehouse."""

    exit_code = 5


class ClusterError(QkdbError):
    """Running an ingest on a Ray cluster failed: Ray is not installed, or the cluster cannot be reached."""


class SniffError(QkdbError):
    """Capturing queries and keys from a model failed."""

    exit_code = 6

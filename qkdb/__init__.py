"""qkdb: a DuckDB warehouse of the positional geometry of LLM attention queries and keys.

>>> import qkdb
>>> con = qkdb.connect()            # read-only, every view ready
>>> con.sql("from head_metrics limit 5")
"""

import importlib
from typing import TYPE_CHECKING

from qkdb.errors import QkdbError

if TYPE_CHECKING:  # what editors and type checkers see; at run time __getattr__ loads them
    from qkdb.api import IngestResult, ModelFailure, chart, connect, info, ingest, ingest_many, remove, version  # noqa: F401

__all__ = ["IngestResult", "ModelFailure", "QkdbError", "chart", "connect", "info", "ingest", "ingest_many", "remove",
           "version"]

# The API loads on first use: `import qkdb.<anything>` (the CLI's entry point, the ingest's worker
# processes) must not pay for numpy, pyarrow and DuckDB before it needs them.
_API = ("IngestResult", "ModelFailure", "chart", "connect", "info", "ingest", "ingest_many", "remove", "version")

# `qkdb.ingest` names both the ingest function and the (empty) package of the ingest's modules.
# Importing a package binds it on its parent, so the package is imported here, once, and unbound:
# `qkdb.ingest` is then always the function, whatever is imported later.
importlib.import_module("qkdb.ingest")
del globals()["ingest"]


def __getattr__(name: str):
    if name in _API:
        from qkdb import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    if name == "api":  # `import qkdb; qkdb.api.connect()` works as in a notebook one expects it to
        return importlib.import_module("qkdb.api")
    if name == "__version__":
        from qkdb._version import version

        return version()
    raise AttributeError(f"module 'qkdb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])

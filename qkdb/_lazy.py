"""Layer facades that load on first use: ``from qkdb.ingest import IngestOptions`` costs nothing else.

Each layer's ``__init__`` names what it offers the rest of qkdb (the CLI, the API) and where each
name lives; the module holding it is imported when the name is first asked for. So the facade
can list the whole layer while ``qkdb --help`` imports none of numpy, pyarrow or DuckDB.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def facade(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps a name to the module defining it.

    A name mapped to ``"module:" + path`` is that module itself.
    """

    def __getattr__(name: str):
        try:
            where = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        whole = where.startswith("module:")
        module = importlib.import_module(where.removeprefix("module:"))
        value = module if whole else getattr(module, name)
        importlib.import_module(package).__dict__[name] = value  # next time, a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__

"""Where the warehouse lives: ``--home``, else ``$QKDB_HOME``, else the platform's user data dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from qkdb.errors import WarehouseError

CATALOG = "qk.duckdb"


def resolve_home(home: str | os.PathLike | None = None) -> Path:
    """The absolute warehouse home for an explicit path, the environment, or the default."""
    if home is None:
        home = os.environ.get("QKDB_HOME") or platformdirs.user_data_dir("qkdb", appauthor=False)
    return Path(home).expanduser().resolve()


def catalog_path(home: Path) -> Path:
    return home / CATALOG


def ensure_writable(home: Path) -> Path:
    """Create the home if needed; a clear error when it cannot be written."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".write-probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise WarehouseError(f"warehouse home {home} is not writable ({exc.strerror or exc})") from exc
    return home

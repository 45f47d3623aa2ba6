"""Where the warehouse lives: ``--home``, else ``$QKDB_HOME``, else the platform's user data dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from qkdb.errors import WarehouseError

CATALOG = "qk.duckdb"
STORE = ".store"  # one folder per model, its `current` link naming the published version (store.py)


def resolve_home(home: str | os.PathLike | None = None) -> Path:
    """The absolute warehouse home for an explicit path, the environment, or the default."""
    if home is None:
        home = os.environ.get("QKDB_HOME") or platformdirs.user_data_dir("qkdb", appauthor=False)
    return Path(home).expanduser().resolve()


def catalog_path(home: Path) -> Path:
    return home / CATALOG


def ingested_models(home: Path) -> list[str]:
    """The published models, from the folder listing alone (no parquet, no DuckDB: cheap enough for any command)."""
    store = home / STORE
    if not store.is_dir():
        return []
    return sorted(p.name for p in store.iterdir() if (p / "current").is_symlink())


def ensure_writable(home: Path) -> Path:
    """Create the home if needed; a clear error when it cannot be written."""
    if home.exists() and not home.is_dir():
        raise WarehouseError(f"{home} is a file, not a warehouse home (--home or $QKDB_HOME)", kind="input")
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".write-probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        from qkdb.errors import os_cause

        raise WarehouseError(f"warehouse home {home} is not writable: {os_cause(exc)[1]}") from exc
    return home

"""What a warehouse holds, to compare before and after a refused or failed command."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import duckdb


def tree(home: Path, locks: bool = True) -> dict[str, tuple]:
    """Every entry below the home: symlinks by target, files by content hash, directories by name.

    ``locks=False`` leaves out the (empty) lock files a failed ingest may have created, which hold
    no data and are reused by the next one.
    """
    out = {}
    for dirpath, dirnames, filenames in os.walk(home):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(home))
            if not locks and rel.startswith(".locks/"):
                continue
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def rows(home: Path) -> dict[str, list]:
    """Every row of the tables an ingest writes, in a fixed order."""
    con = duckdb.connect(str(home / "qk.duckdb"), read_only=True)
    try:
        return {t: con.execute(f"select * from {t} order by all").fetchall()
                for t in ("models", "heads", "pca", "rotation", "ingest_runs")}
    finally:
        con.close()


def metric_differences(home_a: Path, home_b: Path) -> list[str]:
    """The tables whose rows differ between two warehouses (every versioned table; of ``models``, the facts only).

    What "the same numbers" means when the same data came by two routes (a folder and a Hub branch):
    only the provenance (``source``, ``location``, ``revision``) and the publish time may differ.
    """
    from qkdb.warehouse import TABLES

    queries = {t: f"select * from {t} order by all" for t, table in TABLES.items() if table.versioned and t != "models"}
    queries["models"] = "select * exclude (source, location, revision, ingested_at) from models order by all"
    a = duckdb.connect(str(home_a / "qk.duckdb"), read_only=True)
    b = duckdb.connect(str(home_b / "qk.duckdb"), read_only=True)
    try:
        return [t for t, sql in queries.items() if a.execute(sql).fetchall() != b.execute(sql).fetchall()]
    finally:
        a.close()
        b.close()

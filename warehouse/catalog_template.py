"""One built catalog per version of the definitions, copied as every new home's catalog.

Building a catalog binds ~40 finding views and writes ~900 comments: ~1.4 s of every new home's
first ingest (and of every test's fresh home). Only the table views name a home's files, and only
``qkdb_meta`` records the home; the finding views read the table views by name and are bound again
at each query. So the catalog is built once, for a home of its own, and kept in the user cache dir
under a key of everything it is built from (the catalog's fingerprint without a home, and DuckDB's
version, which writes the file). A new home's catalog is a copy of that file whose table views and
``qkdb_meta`` are then made the home's own (``catalog._rebase``: ~0.2 s). The result equals a
catalog built from nothing, view by view and comment by comment (tests/warehouse/test_catalog_template.py).
Anything that goes wrong here (no cache dir, a damaged file) leaves the catalog to be built in full.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

# In the template's qkdb_meta: its key. A catalog carrying it is a copy still to be made a home's own.
META_KEY = "template"


def key() -> str:
    """What the template is built from: the definitions (the fingerprint of no home) and DuckDB's version."""
    import duckdb

    from qkdb.warehouse.catalog import fingerprint

    h = hashlib.sha256(f"{fingerprint(Path('/'))}\n{duckdb.__version__}\n".encode())
    return h.hexdigest()[:24]


def folder() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("qkdb", appauthor=False)) / "catalog"


def ensure() -> tuple[Path, str] | None:
    """The template for these definitions (built now when there is none) and its key; None when it cannot be had."""
    import duckdb

    k = key()
    target = folder() / f"{k}.duckdb"
    if target.is_file():
        return target, k
    from qkdb.warehouse.catalog import _build, fingerprint, _write_schema_files
    from qkdb.warehouse.home import catalog_path

    try:
        with tempfile.TemporaryDirectory(prefix="qkdb-catalog-") as tmp:
            home = Path(tmp) / "home"
            home.mkdir()
            _write_schema_files(home)  # (the table views bind over the schema files)
            built = catalog_path(home)
            con = duckdb.connect(str(built))
            try:
                _build(con, home, fingerprint(home))
                con.execute("insert into qkdb_meta values (?, ?)", [META_KEY, k])
                con.execute("checkpoint")  # (everything in the one file: no write-ahead log beside it)
            finally:
                con.close()
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_atomically(built, target)
    except (OSError, duckdb.Error):
        return None
    return target, k


def copy_to(path: Path) -> str | None:
    """Put a copy of the template at ``path`` (a catalog not yet there); its key, or None (then nothing is written)."""
    got = ensure()
    if got is None:
        return None
    template, k = got
    try:
        _copy_atomically(template, path)
    except OSError:
        return None
    if _key_of(path) != k:  # (a damaged or foreign file in the cache: dropped, the catalog built in full)
        for f in (path, template):
            with contextlib.suppress(OSError):
                f.unlink()
        return None
    return k


def _key_of(path: Path) -> str | None:
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        got = con.execute("select value from qkdb_meta where key = ?", [META_KEY]).fetchall()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return got[0][0] if got else None


def _copy_atomically(src: Path, dst: Path) -> None:
    tmp = dst.parent / f".{dst.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)

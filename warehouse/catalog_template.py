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

The home's ``.schema/`` files (a zero-row parquet file per table, and the benchmark rows qkdb ships:
~0.6 s to write) depend on nothing of the home either: they are kept beside the template, with a
manifest of their digests, and copied.
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
# Beside the template: its home's .schema/ files, and in that folder the list of them with their digests.
SCHEMA_SUFFIX, MANIFEST = ".schema", "MANIFEST.tsv"


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
    schema = folder() / f"{k}{SCHEMA_SUFFIX}"
    if target.is_file() and (schema / MANIFEST).is_file():
        return target, k
    from qkdb.warehouse.catalog import SCHEMA_DIR, _build, _write_schema_files, fingerprint
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
            _keep_schema_files(home / SCHEMA_DIR, schema)
            _copy_atomically(built, target)
    except (OSError, duckdb.Error):
        return None
    return target, k


def copy_schema_files(home: Path) -> bool:
    """Put the template's ``.schema/`` files into ``home``, each replaced atomically; False when there is
    no template to copy them from, or a file of it is damaged (then nothing of it is copied)."""
    from qkdb.warehouse.catalog import SCHEMA_DIR

    got = ensure()
    if got is None:
        return False
    src = folder() / f"{got[1]}{SCHEMA_SUFFIX}"
    try:
        files = [(src / rel, digest) for rel, digest in
                 (line.split("\t") for line in (src / MANIFEST).read_text().splitlines())]
        blobs = [(f, f.read_bytes()) for f, _ in files]
        if any(hashlib.sha256(b).hexdigest() != d for (_, b), (_, d) in zip(blobs, files)):
            raise OSError("damaged")
    except (OSError, ValueError):  # (dropped: the next new home builds the template again)
        shutil.rmtree(src, ignore_errors=True)
        return False
    for f, data in blobs:
        dst = home / SCHEMA_DIR / f.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.parent / f".{dst.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, dst)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    return True


def _keep_schema_files(built: Path, target: Path) -> None:
    """Keep the files a build wrote under ``.schema/``, with their digests, as ``target`` (all or nothing)."""
    tmp = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        shutil.copytree(built, tmp)
        lines = [f"{f.relative_to(tmp).as_posix()}\t{hashlib.sha256(f.read_bytes()).hexdigest()}"
                 for f in sorted(tmp.rglob("*")) if f.is_file()]
        (tmp / MANIFEST).write_text("\n".join(lines) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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

"""Parquet tables on disk, published per model atomically.

Layout under the home::

    <table>/model=<m>            -> ../.store/<m>/current/<table>   (symlink, versioned tables)
    .store/<m>/current           -> v<timestamp>-<id>               (symlink swapped atomically)
    .store/<m>/v…/<table>/data.parquet
    ingest_runs/model=<m>/<run_id>.parquet                          (append-only history)
    .staging/<m>.<pid>.<id>/…                                       (an ingest in progress)

Readers resolve ``<table>/model=<m>/data.parquet`` through ``current``: swapping that one link
switches every table of the model at once, so a reader sees the old complete model or the new
complete one. Nothing is ever written inside a glob that queries read, except by rename.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from qkdb.errors import WarehouseError
from qkdb.warehouse.schema import TABLES, Table
from qkdb.warehouse.batches import CHUNK_ROWS, RowBuffer, empty_table

from qkdb.warehouse.home import STORE, ingested_models  # noqa: F401  (ingested_models: part of the store's API)

STAGING, LOCKS = ".staging", ".locks"
DATA = "data.parquet"


_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# A model name becomes folder names (`model=NAME`, `NAME.<pid>.<token>` while staging, `NAME.lock`):
# 200 characters leave room for those within the 255 bytes most file systems allow a name.
MAX_MODEL_NAME = 200


def is_model_name(model: str | None) -> bool:
    """Whether ``model`` is a name the warehouse could hold (its partition folders' rule; not its length)."""
    return bool(_MODEL_NAME.fullmatch(model or ""))


def check_model_name(model: str) -> str:
    if not is_model_name(model):
        raise WarehouseError(
            f"model name {model!r} is not usable as a partition: use letters, digits and . _ + -", kind="input"
        )
    if len(model) > MAX_MODEL_NAME:
        raise WarehouseError(
            f"model name {model[:40]}... is {len(model)} characters long: at most {MAX_MODEL_NAME} "
            "(it names folders, and file systems limit a name to 255 bytes)", kind="input"
        )
    return model


@contextlib.contextmanager
def _writing(path: Path):
    """Name the file in an I/O error: pyarrow's (a full disk, a quota) name none, and the user needs to know where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def model_lock(home: Path, model: str) -> FileLock:
    (home / LOCKS).mkdir(parents=True, exist_ok=True)
    return FileLock(str(home / LOCKS / f"{model}.lock"))


def acquire_model(home: Path, model: str, wait: float = 0.0) -> FileLock:
    """Hold the model's lock (one ingest or removal per model at a time)."""
    lock = model_lock(home, model)
    try:
        lock.acquire(timeout=wait if wait > 0 else 0, blocking=wait > 0)
    except Timeout:
        raise WarehouseError(
            f"another qkdb process is ingesting or removing model {model!r} in {home}; "
            "wait for it to finish (or pass --wait SECONDS)", kind="busy"
        ) from None
    return lock


class Staging:
    """A model version being written: one streaming parquet writer per table.

    Rows arrive one head at a time; a :class:`~qkdb.warehouse.batches.RowBuffer` holds them per
    table and hands them on as row groups of about ``ROW_GROUP_ROWS`` rows. One tiny row group per
    head would make every later query pay per-row-group overhead (measured: head_metrics over 21
    models, 4 s instead of 50 ms).
    """

    ROW_GROUP_ROWS = CHUNK_ROWS

    def __init__(self, home: Path, model: str):
        self.home, self.model = home, model
        self.dir = home / STAGING / f"{model}.{os.getpid()}.{uuid.uuid4().hex[:12]}"
        self.dir.mkdir(parents=True)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._adopted: set[str] = set()  # tables staged as whole files (adopt)
        self._buffer = RowBuffer(self.ROW_GROUP_ROWS, self._write_group)
        self.rows = self._buffer.rows  # rows staged, per table name

    def add(self, table: Table, columns: dict) -> None:
        """Stage rows given as a column dict (scalars broadcast, absent columns NULL; see ``to_batch``)."""
        self._buffer.add(table, columns)  # (checks the columns before the table's file is made)
        self._writer(table)

    def write(self, table: Table, batch: pa.RecordBatch | pa.Table) -> None:
        """Stage rows given as Arrow data that already has the table's schema."""
        self._writer(table)  # (a table of no batches at all still gets its file)
        self._buffer.write(table, batch)

    def adopt(self, table: Table, src: Path) -> None:
        """Stage a whole table of the model from a parquet file (a pulled model's, as its publisher wrote it).

        A file with exactly the table's schema is copied as it is: its bytes, and so its hash, stay
        the publisher's. One an older qkdb wrote, without columns added since, is read and given them
        as NULL (as the catalog's views show older partitions). A column this qkdb does not know (a
        newer qkdb's) is refused: dropping it would lose data without a word.
        """
        name = table.name
        if name in self._writers or name in self._adopted:
            raise ValueError(f"table {name} is already staged")
        try:
            got = pq.read_schema(src)
        except (OSError, pa.ArrowException) as exc:
            raise WarehouseError(f"{src}: not a readable parquet file ({exc})", kind="input") from None
        if got.remove_metadata().equals(table.arrow_schema):
            (self.dir / name).mkdir()
            with _writing(self.dir / name / DATA):
                shutil.copyfile(src, self.dir / name / DATA)
            self._adopted.add(name)
            return
        unknown = [n for n in got.names if n not in table.accepted_columns]
        if unknown:
            raise WarehouseError(
                f"{src}: column(s) {', '.join(unknown)} of table {name} are unknown to this qkdb (written by a newer "
                "one?): upgrade qkdb to read them", kind="input")
        data = pq.read_table(src)
        try:
            columns = [data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(len(data), f.type)
                       for f in table.arrow_schema]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise WarehouseError(f"{src}: table {name} does not fit this qkdb's schema ({exc})", kind="input") from None
        self.write(table, pa.Table.from_arrays(columns, schema=table.arrow_schema))

    def _writer(self, table: Table) -> pq.ParquetWriter:
        name = table.name
        if name not in self._writers:
            (self.dir / name).mkdir()
            self._writers[name] = pq.ParquetWriter(
                self.dir / name / DATA, table.arrow_schema, compression="zstd",
                use_dictionary=list(table.dictionary_columns),
            )
        return self._writers[name]

    def _write_group(self, table: Table, batches: list[pa.RecordBatch], n: int) -> None:
        """The buffer's sink: one row group, or several of about ``ROW_GROUP_ROWS`` for a big chunk.

        A chunk of heads' rows is one group (it passes the size by at most a head's rows). Rows given
        at once as a whole table (``write``: a model computed on a cluster's worker), twice the size
        or more, are split into groups of between one and two times the size: one group of millions
        of rows would leave DuckDB a single unit to scan such a file with.
        """
        writer = self._writer(table)
        groups = max(1, n // self.ROW_GROUP_ROWS)
        with _writing(self.dir / table.name / DATA):
            writer.write_table(pa.Table.from_batches(batches, schema=table.arrow_schema),
                               row_group_size=max(1, -(-n // groups)))

    def close(self) -> None:
        """Finish every file (empty tables get a zero-row file so the model's schema is complete)."""
        for table in TABLES.values():
            if table.versioned and table.name not in self._writers and table.name not in self._adopted:
                self.write(table, empty_table(table))
        for table in self._buffer.tables:
            self._buffer.flush(table)
        for name, w in self._writers.items():
            with _writing(self.dir / name / DATA):
                w.close()
            _fsync_file(self.dir / name / DATA)
            _fsync_dir(self.dir / name)
        self._writers.clear()
        for name in self._adopted:
            _fsync_file(self.dir / name / DATA)
            _fsync_dir(self.dir / name)
        _fsync_dir(self.dir)

    def discard(self) -> None:
        self._buffer.clear()
        for w in self._writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _replace_symlink(link: Path, target: str) -> None:
    tmp = link.parent / f".{link.name}.{uuid.uuid4().hex[:8]}.tmp"
    os.symlink(target, tmp)
    os.replace(tmp, link)


def publish(staging: Staging) -> str:
    """Make the staged version the model's current one, atomically; returns the version name.

    The swap of ``current`` is the single commit point. Table links are made before it: on a
    model's first publish they dangle until the swap, and DuckDB's globs skip dangling links, so
    a crash anywhere leaves either no trace visible to queries or the complete new version.
    """
    home, model = staging.home, staging.model
    store = home / STORE / model
    store.mkdir(parents=True, exist_ok=True)
    version = f"v{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    os.rename(staging.dir, store / version)
    _fsync_dir(store)
    for table in TABLES.values():
        if not table.versioned:
            continue
        tdir = home / table.name
        tdir.mkdir(exist_ok=True)
        link = tdir / f"model={model}"
        if not link.is_symlink():
            _replace_symlink(link, f"../{STORE}/{model}/current/{table.name}")
            _fsync_dir(tdir)
    pause("before_swap")
    _replace_symlink(store / "current", version)
    _fsync_dir(store)
    cleanup_model(home, model)
    return version


# Seconds to stop at a point of an ingest ("after_head": each head staged; "before_swap": the
# new version written, its switch not made yet), so that the crash-safety tests can SIGKILL it
# there. Empty outside tests, which fill it in the process they run (tests/test_reliability.py).
PAUSES: dict[str, float] = {}


def pause(point: str) -> None:
    delay = PAUSES.get(point)
    if delay:
        time.sleep(delay)


def append(home: Path, table: Table, model: str, name: str, data: pa.Table) -> Path:
    """Add one file to an append-only table (temp file outside the glob, then rename)."""
    return write_file(home / table.name / f"model={model}", f"{name}.parquet", data)


def write_file(folder: Path, name: str, data: pa.Table) -> Path:
    """Write ``folder/name`` as parquet atomically: a hidden temp file outside any ``*.parquet`` glob, fsync, rename."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    final = folder / name
    try:
        with _writing(final):
            pq.write_table(data, tmp, compression="zstd")
            _fsync_file(tmp)
            os.replace(tmp, final)
    except OSError:  # a full disk, a quota, ...: no half-written file stays behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(folder)
    return final


def copy_file(folder: Path, name: str, src: Path) -> Path:
    """Copy ``src`` to ``folder/name`` atomically, byte for byte (as :func:`write_file` writes one)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    final = folder / name
    try:
        with _writing(final):
            shutil.copyfile(src, tmp)
            _fsync_file(tmp)
            os.replace(tmp, final)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(folder)
    return final


def cleanup_model(home: Path, model: str) -> None:
    """Remove what a crashed or replaced ingest left (call with the model lock held)."""
    staging = home / STAGING
    if staging.is_dir():
        for d in staging.glob(f"{model}.*"):
            shutil.rmtree(d, ignore_errors=True)
    store = home / STORE / model
    if not store.is_dir():
        return
    current = os.readlink(store / "current") if (store / "current").is_symlink() else None
    for entry in store.iterdir():
        if entry.name == "current" or entry.name == current:
            continue
        if entry.is_symlink() or entry.is_file():
            entry.unlink(missing_ok=True)
        else:
            shutil.rmtree(entry, ignore_errors=True)


def current_file(home: Path, model: str, table: str) -> Path:
    """The parquet file of a versioned table in a model's current version (it may not exist)."""
    return home / STORE / model / "current" / table / DATA


def table_bytes(home: Path) -> dict[str, int]:
    """Bytes on disk of every table, over every ingested model (append-only tables: their history)."""
    sizes, models = {}, ingested_models(home)
    store = str(home / STORE)
    for name, table in TABLES.items():
        if table.versioned:
            # (paths as strings: pathlib's joins cost more than the stat calls, ~0.1 s on 467 models)
            total = 0
            for m in models:
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(os.path.join(store, m, "current", name, DATA)).st_size
            sizes[name] = total
        else:
            sizes[name] = sum(p.stat().st_size for p in (home / name).glob("*/*.parquet")) if (home / name).is_dir() else 0
    return sizes


def last_run(home: Path, model: str) -> dict | None:
    """Run id and parameters of a model's newest ``ingest_runs`` row, read straight from its files."""
    folder = home / "ingest_runs" / f"model={model}"
    best = None
    for f in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        # ParquetFile, not read_table: the latter imports pyarrow.dataset (~0.5 s) for one small file.
        # Timestamps compared as integers: turning them into datetimes imports pandas (~0.25 s).
        t = pq.ParquetFile(f).read(columns=["run_id", "parameters", "finished_at"])
        finished = t.column("finished_at").cast(pa.int64()).to_pylist()
        for i, when in enumerate(finished):
            if when is not None and (best is None or when > best[0]):
                best = (when, t.column("run_id")[i].as_py(), t.column("parameters")[i].as_py())
    return None if best is None else {"run_id": best[1], "parameters": best[2]}


def has_history(home: Path, model: str) -> bool:
    """Whether anything of the model is on disk: a published version or past runs."""
    return is_ingested(home, model) or (home / "ingest_runs" / f"model={model}").exists()


def is_ingested(home: Path, model: str) -> bool:
    return (home / STORE / model / "current").is_symlink()


def remove(home: Path, model: str) -> None:
    """Delete a model from every table (call with the model lock held).

    First every table is switched at once to an empty version, so readers never see some
    tables of the model without the others; then the files go.
    """
    store = home / STORE / model
    if (store / "current").is_symlink():
        empty = Staging(home, model)
        empty.close()
        name = f"removing-{uuid.uuid4().hex[:8]}"
        os.rename(empty.dir, store / name)
        _replace_symlink(store / "current", name)
    for table in TABLES.values():
        link = home / table.name / f"model={model}"
        if link.is_symlink():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
    shutil.rmtree(home / STORE / model, ignore_errors=True)
    cleanup_model(home, model)

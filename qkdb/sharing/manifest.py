"""``qkdb_warehouse.json``: what a published warehouse holds, model by model, and with what it was computed.

Built from the home's files alone, generically over the tables of ``warehouse.TABLES`` (a column or
a table added to the schema is published without a change here). Deterministic: the same models
with the same qkdb and DuckDB give the same bytes, so publishing again uploads nothing new.

Per model: the ingest's ``fingerprint`` (data, parameters, facts and qkdb version: two ingests with
the same fingerprint give the same numbers), a ``content`` hash of its files, every file with its
sha256 and size, the source dataset (kind, repo or path, revision, commit), the RoPE facts, the
model's row of ``models`` as a whole, the qkdb version and the parameters of the ingest that computed it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from qkdb import warehouse
from qkdb.errors import WarehouseError
from qkdb.sharing.layout import FORMAT, table_file

RUNS = "ingest_runs"


def _plain(value):
    """A parquet value as JSON: timestamps as ISO text, the rest as it is."""
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return [{k: _plain(v) for k, v in row.items()} for row in pq.ParquetFile(path).read().to_pylist()]


def runs(home: Path, model: str) -> list[tuple[Path, dict]]:
    """Every run-log file of ``model`` with its row, oldest first."""
    folder = home / RUNS / f"model={model}"
    out = []
    for f in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        for row in _rows(f):
            out.append((f, row))
    return sorted(out, key=lambda fr: fr[1].get("finished_at") or "")


def fingerprint_of(row: dict) -> str | None:
    try:
        return json.loads(row.get("parameters") or "{}").get("fingerprint")
    except ValueError:
        return None


def computing_run(home: Path, model: str) -> tuple[Path, dict] | None:
    """The run that computed the model's current version: the newest run that is not a pull of it.

    A pulled model's newest run is the pull, which records the publisher's parameters (and so its
    fingerprint); the publisher's own run came with it and is what a re-publish hands on, so that
    the files (and their hashes) stay those of the first publish.
    """
    found = runs(home, model)
    if not found:
        return None
    newest = found[-1]
    same = [fr for fr in found if fr[1].get("source") != "pull" and fingerprint_of(fr[1]) == fingerprint_of(newest[1])]
    return same[-1] if same else newest


def model_files(home: Path, model: str) -> dict[str, Path]:
    """Repo path -> local file of every table of ``model`` (versioned tables: its current version)."""
    store = warehouse.store
    files: dict[str, Path] = {}
    for name, table in warehouse.TABLES.items():
        if table.versioned:
            f = store.current_file(home, model, name)
            if f.exists():
                files[table_file(name, model)] = f
        elif name == RUNS:
            run = computing_run(home, model)
            if run is not None:
                files[table_file(name, model, run[0].name)] = run[0]
        else:  # (another append-only table: all of its history)
            folder = home / name / f"model={model}"
            for f in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
                files[table_file(name, model, f.name)] = f
    return files


ROPE_COLUMNS = ("nope_layers", "position_scaling")  # besides every models column whose name says rope


def model_entry(home: Path, model: str, files: dict[str, Path]) -> dict:
    """The manifest's record of one model (see the module's docstring)."""
    rows = _rows(warehouse.store.current_file(home, model, warehouse.MODELS.name))
    if not rows:
        raise WarehouseError(f"model {model} in {home} has no row in its models table (a damaged version?)", kind="input")
    row = {k: v for k, v in rows[0].items() if k != "model"}
    run = computing_run(home, model)
    run_row = run[1] if run is not None else {}
    try:
        parameters = json.loads(run_row.get("parameters") or "{}")
    except ValueError:
        parameters = {}
    from qkdb.ingest import hub_repo

    hashed = {path: {"sha256": hub_repo.file_sha256(f), "bytes": f.stat().st_size} for path, f in sorted(files.items())}
    content = content_hash({p: h["sha256"] for p, h in hashed.items()})
    rope = {k: row.get(k) for k in row if "rope" in k or k in ROPE_COLUMNS}
    return {
        "fingerprint": parameters.get("fingerprint"),
        "content": content,
        "heads": row.get("n_heads"),
        "files": hashed,
        "source": {"kind": row.get("source"), "dataset": row.get("location"), "revision": row.get("revision"),
                   "commit": run_row.get("commit")},
        "rope": rope,
        "facts": row,
        "run": {k: run_row.get(k) for k in ("run_id", "qkdb_version", "started_at", "finished_at", "heads_done",
                                             "heads_skipped", "cluster")},
        "qkdb_version": run_row.get("qkdb_version"),
        "parameters": parameters,
    }


def content_hash(hashes: dict[str, str]) -> str:
    """One hash of a model's files: of each repo path with its sha256, in path order."""
    return hashlib.sha256("".join(f"{p} {h}\n" for p, h in sorted(hashes.items())).encode()).hexdigest()


def build(home: Path, models: list[str], params: dict, files: dict[str, dict[str, Path]]) -> dict:
    """The manifest of ``models`` (``files``: each model's :func:`model_files`), with ``params`` the findings' params row."""
    import duckdb

    from qkdb._version import version

    return {
        "format": FORMAT,
        "tool": "qkdb publish",
        "qkdb_version": version(),
        "duckdb_version": duckdb.__version__,
        "tables": {
            name: {"versioned": t.versioned, "columns": {c.name: str(c.type) for c in t.columns}}
            for name, t in warehouse.TABLES.items()
        },
        "params": {k: _plain(v) for k, v in params.items()},
        "models": {m: model_entry(home, m, files[m]) for m in models},
    }


def dumps(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n").encode()

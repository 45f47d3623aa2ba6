"""``qkdb pull``: models of a published warehouse added to a home, as an ingest adds them.

Each model is published with the warehouse's own machinery (:mod:`qkdb.warehouse.store`): under its
lock, staged in full, switched in by one rename, so a reader sees the model whole or not at all; its
files are the publisher's, byte for byte, checked against the manifest's sha256. A model the home
already holds with the same data (the same ingest fingerprint, or the same files) is left as it
is; with other data it is refused unless ``force``, before anything is downloaded or written.
Everything comes through the Hugging Face cache, so once pulled, ``HF_HUB_OFFLINE=1`` pulls again.

The run log gets the publisher's run (how the numbers were computed) and one of its own (source
``pull``: the repo, the revision asked for, the commit), whose parameters are the publisher's, so
that an ingest of the same data with the same parameters and qkdb later knows the model is current.
The findings' intervals are recomputed once at the end; when the home then holds exactly the
published models, its findings are compared with the publisher's and the result said.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from qkdb import warehouse
from qkdb.errors import HubError, QkdbError, WarehouseError
from qkdb.sharing import manifest as manifests
from qkdb.sharing.layout import FINDINGS, FORMAT, MANIFEST

Progress = Callable[..., None]


@dataclass
class Pulled:
    """What :func:`pull` did. ``added``/``replaced``/``unchanged`` are model names; ``findings_match``
    is None when the home's models are not exactly the published ones (nothing to compare)."""

    repo: str
    revision: str
    commit: str
    home: Path
    origin: str  # "hub", or where an offline listing came from
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    findings_match: bool | None = None
    notes: list[str] = field(default_factory=list)


def parse_ref(ref: str) -> tuple[str, str | None]:
    """``owner/name[@revision]`` as (repo, revision or None)."""
    repo, _, revision = ref.partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise HubError(f"{ref!r} is not a Hub dataset repo: give owner/name, or owner/name@revision", kind="usage")
    return repo, revision or None


def _listing(repo: str, revision: str, endpoint, cache_dir, token):
    from qkdb.ingest import hub, hub_repo

    try:
        return hub.list_files(repo, revision, endpoint=endpoint, cache_dir=cache_dir, token=token)
    except HubError as exc:
        if exc.kind == "not_found" and str(exc).startswith("dataset repo "):  # (no such dataset: a model repo?)
            refused = hub_repo.not_a_dataset(repo, endpoint, token)
            if refused is not None:
                raise HubError(str(refused), kind="not_found") from None
        raise


def _read_manifest(repo: str, revision: str, commit: str, files: dict, endpoint, cache_dir, token) -> dict:
    from qkdb.ingest import hub_repo

    if MANIFEST not in files:
        raise HubError(
            f"{repo}@{revision} is not a published qkdb warehouse (no {MANIFEST}); a branch of captured vectors is "
            f"ingested instead: `qkdb ingest --repo {repo} --revision {revision}`", kind="input"
        )
    path = hub_repo.fetch(repo, commit, [MANIFEST], revision=revision, endpoint=endpoint, cache_dir=cache_dir,
                          token=token)[MANIFEST]
    try:
        man = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HubError(f"{repo}@{revision}: {MANIFEST} is not readable JSON ({exc})", kind="input") from None
    if not isinstance(man, dict) or not isinstance(man.get("models"), dict):
        raise HubError(f"{repo}@{revision}: {MANIFEST} has no models", kind="input")
    if int(man.get("format", 0)) > FORMAT:
        raise HubError(f"{repo}@{revision} was published by a newer qkdb ({man.get('qkdb_version')}, format "
                       f"{man.get('format')}; this qkdb reads {FORMAT}): upgrade qkdb", kind="input")
    return man


def _local_state(home: Path, model: str) -> tuple[str | None, str | None]:
    """The model's fingerprint (its newest run's) and content hash in ``home``; (None, None) when absent."""
    if not warehouse.store.is_ingested(home, model):
        return None, None
    found = manifests.runs(home, model)
    fp = manifests.fingerprint_of(found[-1][1]) if found else None
    from qkdb.ingest import hub_repo

    files = manifests.model_files(home, model)
    return fp, manifests.content_hash({p: hub_repo.file_sha256(f) for p, f in files.items()})


def pull(home: Path, repo: str, revision: str | None = None, *, models: list[str] | None = None, force: bool = False,
         wait: float = 0.0, endpoint: str | None = None, cache_dir=None, token=None,
         progress: Progress | None = None) -> Pulled:
    """Add the models of the warehouse published at ``repo``@``revision`` (default ``main``) to the home ``home``.

    Raises
    ------
    HubError
        The repo or revision does not exist (not_found; a model repo of that name is said), it is not a
        published warehouse (input), offline with nothing cached, a file whose bytes are not the
        manifest's (input).
    WarehouseError
        A model asked for that the repo does not hold (not_found); a model the home holds with other
        data, without ``force`` (input); another process ingesting the same model (busy).
    """
    from qkdb.ingest import hub_repo
    from qkdb.pipeline import refresh_intervals

    progress = progress or (lambda *a, **k: None)
    revision = revision or "main"
    commit, files, origin = _listing(repo, revision, endpoint, cache_dir, token)
    man = _read_manifest(repo, revision, commit, files, endpoint, cache_dir, token)
    published = man["models"]
    chosen = list(dict.fromkeys(models)) if models else sorted(published)
    unknown = [m for m in chosen if m not in published]
    if unknown:
        raise WarehouseError(f"{repo}@{revision} does not hold {', '.join(unknown)} (it holds {', '.join(sorted(published))})",
                             kind="not_found")
    for m in chosen:
        warehouse.store.check_model_name(m)
    if home.exists() and not home.is_dir():
        raise WarehouseError(f"{home} is a file, not a warehouse home (--home or $QKDB_HOME)", kind="input")
    result = Pulled(repo, revision, commit, home, origin)
    todo, conflicts = [], []
    for m in chosen:
        fp, content = _local_state(home, m)
        entry = published[m]
        if content is None:
            todo.append(m)
        elif (fp is not None and fp == entry.get("fingerprint")) or content == entry.get("content"):
            (todo if force else result.unchanged).append(m)
        elif force:
            todo.append(m)
        else:
            conflicts.append(m)
    if conflicts:
        raise WarehouseError(
            f"{home} already holds {', '.join(conflicts)} with other data than {repo}@{revision}: pass --force to "
            "replace them, or pull into another --home", kind="input"
        )
    paths = [p for m in todo for p in published[m]["files"]]
    progress("download", files=len(paths), bytes=sum(published[m]["files"][p]["bytes"] for m in todo for p in published[m]["files"]))
    local = hub_repo.fetch(repo, commit, paths, revision=revision, endpoint=endpoint, cache_dir=cache_dir, token=token)
    for m in todo:
        for p, want in published[m]["files"].items():
            if hub_repo.file_sha256(local[p]) != want["sha256"]:
                raise HubError(f"{repo}@{revision}: {p} is not the file the manifest names (sha256 differs): "
                               "a damaged download or repo; nothing of it was added", kind="input")
    if todo:  # (made only now: a pull that fails before leaves no empty home behind)
        warehouse.ensure_writable(home)
    for m in todo:
        present = warehouse.store.is_ingested(home, m)
        _publish_model(home, m, published[m], {p: local[p] for p in published[m]["files"]}, result, wait)
        (result.replaced if present else result.added).append(m)
        progress("model", model=m)
    if todo:
        progress("intervals")
        result.notes.extend(refresh_intervals(home))
    result.findings_match = _compare_findings(home, repo, revision, commit, files, published, endpoint, cache_dir, token)
    return result


def _publish_model(home: Path, model: str, entry: dict, files: dict[str, Path], result: Pulled, wait: float) -> None:
    """One model into the home, as an ingest publishes one: locked, staged whole, switched in one rename, logged."""
    store = warehouse.store
    started = dt.datetime.now(dt.timezone.utc)
    lock = store.acquire_model(home, model, wait)
    try:
        store.cleanup_model(home, model)
        warehouse.ensure_catalog(home)
        staging = store.Staging(home, model)
        try:
            runs = []
            for path, local in sorted(files.items()):
                table = warehouse.TABLES.get(path.split("/")[0])
                if table is None:
                    continue  # (a table this qkdb does not have: its manifest entry is kept for the record)
                if table.versioned:
                    staging.adopt(table, local)
                else:
                    runs.append((table, path.rsplit("/", 1)[1], local))
            staging.close()
            store.publish(staging)
        except BaseException:
            staging.discard()
            raise
        try:
            for table, name, local in runs:  # the publisher's run log, as it is
                store.copy_file(home / table.name / f"model={model}", name, local)
            _log_pull(home, model, entry, result, started)
        except OSError as exc:
            from qkdb.errors import from_os_error

            raise from_os_error(exc, f"{model} is added, but its ingest_runs rows were not all written") from exc
    finally:
        lock.release()


def _log_pull(home: Path, model: str, entry: dict, result: Pulled, started: dt.datetime) -> None:
    """The pull's own ingest_runs row (source 'pull'), with the publisher's parameters (and so its fingerprint)."""
    import pyarrow as pa

    from qkdb._version import version

    finished = dt.datetime.now(dt.timezone.utc)
    run_id = f"{finished.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    row = {
        "run_id": run_id, "source": "pull", "location": result.repo, "revision": result.revision,
        "commit": result.commit, "parameters": json.dumps(entry.get("parameters") or {}, sort_keys=True, default=str),
        "qkdb_version": version(), "started_at": started, "finished_at": finished,
        "heads_done": entry.get("heads"), "heads_skipped": 0, "skipped": "[]",
    }
    runs = warehouse.INGEST_RUNS
    batch = warehouse.to_batch(runs, {k: v for k, v in row.items() if k in runs.accepted_columns})
    warehouse.store.append(home, runs, model, run_id, pa.Table.from_batches([batch]))


def _compare_findings(home: Path, repo: str, revision: str, commit: str, files: dict, published: dict,
                      endpoint, cache_dir, token) -> bool | None:
    """Whether the home's findings are the publisher's, row for row (None: the home holds other models too, or fewer)."""
    import pyarrow.parquet as pq

    from qkdb.ingest import hub_repo

    if sorted(warehouse.store.ingested_models(home)) != sorted(published) or FINDINGS not in files:
        return None
    theirs_file = hub_repo.fetch(repo, commit, [FINDINGS], revision=revision, endpoint=endpoint,
                                 cache_dir=cache_dir, token=token)[FINDINGS]
    theirs = pq.read_table(theirs_file).to_pylist()
    con = warehouse.open_catalog(home, read_only=True)
    try:
        source = warehouse.findings_source(con)
        if source == "findings" and not warehouse.intervals_current(con):
            warehouse.ensure_current(con)
        ours = con.sql(f"select * from {source} order by id, scope").to_arrow_table().to_pylist()
    except QkdbError:
        return None
    finally:
        con.close()
    # (NaN is not NaN: compared through repr)
    return [{k: repr(v) for k, v in r.items()} for r in ours] == [{k: repr(v) for k, v in r.items()} for r in theirs]

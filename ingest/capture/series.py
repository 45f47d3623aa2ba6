"""A series of checkpoints in one command: ``qkdb sniff --model-path REPO --revision A --revision B …``.

Every revision is captured with the same options into ``OUT/<revision>`` (model name
``<name>-<revision>``), so the captures are **paired**: the heads and positions are drawn from the
seed, the config's head layout and the texts' lengths — never from the weights — so equal configs
and tokenizers give equal plans. That is checked before any weights load: every revision is planned
(its config and tokenizer only) and revisions whose plans differ are refused, naming them. A
capture made earlier is matched with ``--like`` instead (:mod:`qkdb.ingest.capture.like`).

Where: on this machine one revision after the other (each resumable on its own; a revision whose
folder already holds its capture of this plan is skipped), or on a Ray cluster (``--cluster``, the
machinery of ``qkdb ingest --cluster``: :class:`qkdb.ingest.engine.cluster.RayCluster`) as one task per
revision, each asking for a GPU when the cluster has them. A task captures into a working folder
on its worker (a retried task on the same node resumes there), returns the finished dataset's
files through Ray's object store, and the driver writes each into ``OUT/<revision>`` as it arrives.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from qkdb.errors import SniffError
from qkdb.ingest.capture.partial import PartialCapture
from qkdb.ingest.capture.sniff import SniffOptions, SniffResult, prepare, run
from qkdb.ingest.capture.sniff_model import slug
from qkdb.ingest.sources.layout import METADATA_FILE, read_metadata


@dataclass
class RevisionOutcome:
    """What became of one revision: its result (here), its metadata (from a worker), or why neither."""

    revision: str
    out: Path
    result: SniffResult | None = None
    metadata: dict | None = None
    notes: list[str] = field(default_factory=list)
    skipped: bool = False  # its folder already held this capture
    error: str | None = None
    kind: str = "internal"


def revision_folder(revision: str) -> str:
    """A revision's folder name: the revision, with what a path cannot hold replaced (``refs/pr/1`` → ``refs--pr--1``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "--", revision.replace("/", "--")).strip(".")
    return name or "revision"


def series_options(options: SniffOptions, revisions: list[str]) -> list[SniffOptions]:
    """One capture's options per revision (its own folder and model name)."""
    if options.model_ref().hub_id is None:
        what = options.gguf if options.gguf is not None else options.model_path
        raise SniffError(f"several --revision are checkpoints of a Hub model (owner/name); {what} is a local file or "
                         "folder, which holds one", kind="usage")
    if len(set(revisions)) != len(revisions):
        dup = sorted({r for r in revisions if revisions.count(r) > 1})
        raise SniffError(f"--revision {dup[0]} is given twice", kind="usage")
    folders = [revision_folder(r) for r in revisions]
    if len(set(folders)) != len(folders):
        raise SniffError(f"revisions {', '.join(revisions)} would share a folder name", kind="usage")
    out = []
    for rev, folder in zip(revisions, folders):
        name = f"{options.model_name}-{slug(rev)}" if options.model_name else None
        out.append(replace(options, model_revision=rev, out=Path(options.out) / folder, model_name=name))
    return out


def _complete(options: SniffOptions, plan_sha256: str) -> bool:
    """Whether the revision's folder already holds its capture of this plan (and no capture is in progress)."""
    out = Path(options.out)
    if not (out / METADATA_FILE).is_file() or PartialCapture(out).exists:
        return False
    meta = read_metadata(out)
    return ((meta.get("capture") or {}).get("plan_sha256") == plan_sha256
            and meta.get("model_revision") == options.model_revision)


def plan_series(runs: list[SniffOptions]) -> list:
    """Every revision planned without its weights; refused when the plans differ (the captures would not pair)."""
    preps = [prepare(o, plan_only=True) for o in runs]
    by_plan: dict[str, list[str]] = {}
    for o, p in zip(runs, preps):
        by_plan.setdefault(p.identity["plan_sha256"], []).append(str(o.model_revision))
    if len(by_plan) > 1:
        groups = "; ".join(", ".join(revs) for revs in by_plan.values())
        raise SniffError(f"the revisions do not draw the same heads and positions (their configs or tokenizers "
                         f"differ: {groups}): their captures would not be paired; capture them apart, or one --like "
                         "another")
    return preps


def sniff_series(options: SniffOptions, revisions: list[str], *, cluster: str | None = None,
                 num_cpus: int | None = None, progress: Callable | None = None) -> Iterator[RevisionOutcome]:
    """Capture every revision (see the module doc); yield each revision's outcome as soon as it is known."""
    progress = progress or (lambda *a, **k: None)
    runs = series_options(options, revisions)
    preps = plan_series(runs)
    todo = []
    for o, p in zip(runs, preps):
        if _complete(o, p.identity["plan_sha256"]):
            yield RevisionOutcome(str(o.model_revision), Path(o.out), metadata=read_metadata(o.out), skipped=True)
        else:
            o.check()  # (its folder: empty, its own partial capture, or --force)
            todo.append((o, p))
    if cluster is None:
        for o, _ in todo:
            progress("revision", revision=o.model_revision, out=o.out)
            try:
                result = run(prepare(o), progress)
            except SniffError as exc:
                yield RevisionOutcome(str(o.model_revision), Path(o.out), error=str(exc), kind=exc.kind)
                continue
            yield RevisionOutcome(str(o.model_revision), Path(o.out), result=result, metadata=result.metadata,
                                  notes=result.notes)
        return
    yield from _on_cluster(cluster, num_cpus, [o for o, _ in todo], progress)


def _on_cluster(address: str, num_cpus: int | None, runs: list[SniffOptions], progress) -> Iterator[RevisionOutcome]:
    from qkdb.ingest.engine.cluster import ClusterCall, RayCluster

    with RayCluster(address, num_cpus=num_cpus) as cluster:
        wants_gpu = not any(o.device == "cpu" or o.device == "mps" for o in runs)
        gpus = 1 if wants_gpu and float(cluster.ray.cluster_resources().get("GPU", 0)) >= 1 else 0
        by_label = {str(o.model_revision): o for o in runs}
        calls = [ClusterCall(label=str(o.model_revision), args=(o.record(),)) for o in runs]
        progress("cluster", tasks=len(calls), gpus_per_task=gpus)
        for outcome in cluster.run_models(capture_task, calls, name="qkdb-sniff", num_gpus=gpus):
            o = by_label[outcome.call.label]
            if outcome.error is not None:
                yield RevisionOutcome(outcome.call.label, Path(o.out), error=outcome.error, kind=outcome.kind)
                continue
            value = outcome.value
            if "error" in value:
                yield RevisionOutcome(outcome.call.label, Path(o.out), error=value["error"], kind=value["kind"])
                continue
            try:
                _write_capture(Path(o.out), value["files"], replace_out=o.force)
            except (SniffError, OSError) as exc:
                yield RevisionOutcome(outcome.call.label, Path(o.out), error=str(exc),
                                      kind=getattr(exc, "kind", "system"))
                continue
            yield RevisionOutcome(outcome.call.label, Path(o.out), metadata=value["metadata"], notes=value["notes"])


def capture_task(record: dict) -> dict:
    """One revision on a Ray worker: capture into a working folder there, return the dataset's files.

    A failure the capture reports (a refused model, a Hub that cannot be reached) comes back as
    ``{"error", "kind"}`` — the driver says it for that revision and the others go on.
    """
    key = f"{slug(str(record.get('model_path') or record.get('gguf')))}-{slug(str(record.get('model_revision')))}"
    work = Path(tempfile.gettempdir()) / "qkdb-sniff" / key
    work.mkdir(parents=True, exist_ok=True)
    options = SniffOptions.from_record(work / "capture", record, force=True)
    try:
        options.check()
        result = run(prepare(options))
    except SniffError as exc:
        return {"error": str(exc), "kind": exc.kind}
    out = Path(result.out)
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    shutil.rmtree(work, ignore_errors=True)
    return {"files": files, "metadata": result.metadata, "notes": result.notes}


def _write_capture(out: Path, files: dict[str, bytes], replace_out: bool) -> None:
    """Write a capture's files to ``out`` the way a local capture is published: complete, in one rename."""
    build = out.parent / f".{out.name}.arriving"
    if build.exists():
        shutil.rmtree(build)
    for rel, data in files.items():
        path = build / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if out.is_dir() and any(out.iterdir()):
        if not replace_out:
            shutil.rmtree(build)
            raise SniffError(f"{out}: folder is not empty (use --force to replace a previous capture)")
        old = out.parent / f".{out.name}.old"
        if old.exists():
            shutil.rmtree(old)
        os.replace(out, old)
        shutil.rmtree(old)
    elif out.is_dir():
        out.rmdir()
    os.replace(build, out)


__all__ = ["RevisionOutcome", "capture_task", "plan_series", "revision_folder", "series_options", "sniff_series"]

"""One ingest, end to end: a source's head groups through the engine into a model version, published atomically.

Data flows one way: the source yields head groups as their files become local; the engine turns
each group into rows, in worker processes; the rows are staged as the model's new version in the
warehouse; the version is published in one step; the run is logged; the findings' intervals are
recomputed. This module is the glue of the ingest layer and the warehouse layer, which never
import each other; it uses only their facades.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from qkdb import warehouse
from qkdb.ingest import (
    VALUE_BOUND, HeadSelection, check_rope, collage_heads, default_workers, discover, open_source, read_metadata,
    resolve_spec, run_groups, spec_notes, tune_ingest_process,
)
from qkdb.errors import InputError, QkdbError, from_os_error
from qkdb._version import version

Progress = Callable[..., None]


@dataclass
class IngestResult:
    model: str
    home: Path
    run_id: str | None
    heads_done: int
    heads_skipped: int
    skipped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unchanged: bool = False


@dataclass
class _Run:
    """What one ingest knows before its first head: its source, facts, options and fingerprint."""

    home: Path
    spec: object  # qkdb.ingest.ModelSpec
    options: object  # qkdb.ingest.IngestOptions
    source: object  # qkdb.ingest.Source
    kind: str  # ingest_runs.source
    fingerprint: str
    workers: int
    started: dt.datetime
    t0: float
    notes: list[str]


def fingerprint(data: str, spec, options) -> str:
    """Data, parameters, facts and version: an ingest with the same fingerprint would change nothing."""
    h = hashlib.sha256(data.encode())
    h.update(json.dumps(_parameters(spec, options), sort_keys=True, default=str).encode())
    h.update(repr(spec).encode())
    h.update(version().encode())
    return h.hexdigest()


def _parameters(spec, options) -> dict:
    return options.parameters(spec.rope_theta, spec.rope_pairing, spec.rope_scaling)


def run(path: Path | None, name: str | None, options, *, kind: str | None, home: Path,
        progress: Progress | None) -> IngestResult:
    """Plan, check and run one ingest (see :func:`qkdb.api.ingest`)."""
    started, t0 = dt.datetime.now(dt.timezone.utc), time.perf_counter()
    if path is not None:
        discover(path)  # a missing or empty dataset is the problem to report, before any model facts
    metadata = read_metadata(path) if path is not None else {}
    spec = resolve_spec(name, metadata, **options.facts())
    warehouse.store.check_model_name(spec.model)
    if options.rope_theta is not None or options.rope_scaling is not None:
        # RoPE given for the whole model replaces the capture's per-layer RoPE.
        from dataclasses import replace

        spec = replace(spec, layer_rope_theta=None, layer_rope_scaling=None)
    check_rope(spec, options)
    # Once the facts and parameters hold (contradictions are refused before anything starts), the
    # workers' start-up overlaps the planning and warehouse work below.
    workers = options.workers or default_workers()
    tune_ingest_process(workers)
    source = open_source(
        spec, HeadSelection.parse(options.heads), path=path, repo=options.repo, revision=options.revision,
        endpoint=options.endpoint, cache_dir=options.cache_dir, token=options.token,
    )
    home = warehouse.ensure_writable(home)
    fp = fingerprint(source.fingerprint(), spec, options)
    if not options.force and warehouse.store.is_ingested(home, spec.model):
        previous = warehouse.store.last_run(home, spec.model)
        if previous and json.loads(previous["parameters"]).get("fingerprint") == fp:
            return IngestResult(spec.model, home, previous["run_id"], 0, 0, unchanged=True)
    if progress is not None:
        source.report_to(progress, model=spec.model)
    notes = [f"ignored folder {p}" for p in source.ignored] + spec_notes(spec, options.complement)
    job = _Run(home, spec, options, source, kind or source.kind, fp, workers, started, t0, notes)
    return _publish(job, progress or (lambda *a, **k: None))


def _publish(job: _Run, progress: Progress) -> IngestResult:
    """Run the source's groups (yielded as their files arrive) through the engine and publish the model atomically."""
    store, spec, options = warehouse.store, job.spec, job.options
    planned = job.source.planned  # fixes the collage sample before any group arrives
    collage = collage_heads(planned, options)
    lock = store.acquire_model(job.home, spec.model, options.wait)
    staging = outcomes = None
    try:
        # Workers start on the first groups now: preparing the warehouse overlaps their work.
        outcomes = run_groups(job.source.groups(), spec, options, collage, job.workers)
        store.cleanup_model(job.home, spec.model)
        warehouse.ensure_catalog(job.home)
        staging = store.Staging(job.home, spec.model)
        progress("start", model=spec.model, total=len(planned))
        done, skipped, head_dim, bad_rows = _stage_heads(job, outcomes, staging, progress)
        published = dt.datetime.now(dt.timezone.utc)
        staging.add(warehouse.MODELS, _model_row(job, head_dim, done, published))
        staging.close()
        progress("publish", model=spec.model)
        store.publish(staging)
        staging = None
        for reason, dropped in bad_rows.items():
            if dropped:
                job.notes.append(_dropped_rows_note(reason, dropped))
        try:
            run_id = _log_run(job, published, done, skipped)
        except OSError as exc:  # a full disk after the publish: the model is in, say so
            raise from_os_error(exc, f"{spec.model} is published, but its ingest_runs row was not written") from exc
        progress("intervals", model=spec.model)
        job.notes.extend(refresh_intervals(job.home))
        progress("done", model=spec.model, heads=done, skipped=len(skipped))
        return IngestResult(
            spec.model, job.home, run_id, done, len(skipped), skipped, job.notes, time.perf_counter() - job.t0
        )
    finally:
        if outcomes is not None:
            outcomes.close()  # (an error: stops the pool)
        if staging is not None:
            staging.discard()
        lock.release()


def _stage_heads(job: _Run, outcomes, staging, progress: Progress):
    """Stage every head's rows as it completes; a bad head fails the ingest unless skip_bad_heads."""
    spec, options = job.spec, job.options
    done, skipped, head_dim = 0, [], None
    # reason -> file -> rows dropped: null rows always, rows with bad values with drop_bad_vectors
    bad_rows: dict[str, dict[str, int]] = {"null": {}, "bad": {}}
    for outcome in outcomes:
        if outcome.error is not None:
            if not options.skip_bad_heads:
                raise InputError(outcome.error)
            skipped.append((f"l{outcome.layer:02d}h{outcome.head:02d}", outcome.error))
            progress("head", model=spec.model, layer=outcome.layer, head=outcome.head, ok=False, reason=outcome.error)
            continue
        rows = outcome.rows
        for table_name, cols in rows.tables.items():
            staging.add(warehouse.TABLES[table_name], cols)
        head_dim = rows.tables["heads"]["head_dim"]
        job.notes.extend(rows.notes)
        bad_rows["bad"].update(rows.bad_rows_dropped)
        bad_rows["null"].update(rows.null_rows_dropped)
        done += 1
        progress("head", model=spec.model, layer=outcome.layer, head=outcome.head, ok=True)
        warehouse.store.pause("after_head")
    if done == 0:
        raise InputError(f"{job.source.location}: no head could be ingested ({len(skipped)} skipped)")
    return done, skipped, head_dim, bad_rows


def _log_run(job: _Run, published: dt.datetime, done: int, skipped: list) -> str:
    """Append the run's row to ingest_runs (its history, kept across re-ingests)."""
    import pyarrow as pa

    run_id = f"{published.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    params = {**_parameters(job.spec, job.options), "fingerprint": job.fingerprint, "spec": dict(vars(job.spec))}
    row = {
        "run_id": run_id, "source": job.kind, "location": job.source.location, "revision": job.source.revision,
        "commit": job.source.commit, "parameters": json.dumps(params, default=str, sort_keys=True),
        "qkdb_version": version(), "started_at": job.started, "finished_at": dt.datetime.now(dt.timezone.utc),
        "heads_done": done, "heads_skipped": len(skipped),
        "skipped": json.dumps([{"head": h, "reason": r} for h, r in skipped]),
    }
    batch = warehouse.to_batch(warehouse.INGEST_RUNS, row)
    warehouse.store.append(job.home, warehouse.INGEST_RUNS, job.spec.model, run_id, pa.Table.from_batches([batch]))
    return run_id


def _dropped_rows_note(reason: str, dropped: dict[str, int]) -> str:
    """One line for the rows an ingest dropped for one reason: how many, in which head files."""
    files = sorted(dropped, key=lambda f: (Path(f).parent.name, f))
    shown = ", ".join(f"{Path(f).parent.name} {dropped[f]}" for f in files[:12])
    more = f" and {len(files) - 12} more" if len(files) > 12 else ""
    total = sum(dropped.values())
    why = (
        "whose vector or position is null" if reason == "null"
        else f"whose vectors hold NaN, ±inf or values beyond ±{VALUE_BOUND:g} (--drop-bad-vectors)"
    )
    return (
        f"dropped {total} row{'s' if total != 1 else ''} {why}, counted in heads.n_dropped, in {len(files)} "
        f"file{'s' if len(files) != 1 else ''}: {shown}{more}"
    )


def _model_row(job: _Run, head_dim, n_heads, published) -> dict:
    spec, kind = job.spec, job.kind
    # (absent list columns are NULL: a [None] would make pyarrow import pandas in the parent)
    per_layer = {
        name: [list(value)] for name in ("layer_rope_theta", "layer_rope_scaling")
        if (value := getattr(spec, name)) is not None
    }
    return {
        **per_layer,
        "family": spec.family, "in_paper": spec.in_paper, "hf_model": spec.hf_model,
        "model_revision": spec.model_revision, "n_layers": spec.n_layers, "n_q_heads": spec.n_q_heads,
        "n_kv_heads": spec.n_kv_heads, "gqa_ratio": spec.gqa_ratio, "head_dim": head_dim,
        "rope": spec.rope, "rope_theta": spec.rope_theta,
        "rope_pairing": spec.rope_pairing if spec.rope != "none" else None, "rope_scaling": spec.rope_scaling,
        "position_scaling": spec.position_scaling,
        "nope_layers": [list(spec.nope_layers)], "series": spec.series, "series_order": spec.series_order,
        "phase": spec.phase, "step": spec.step, "source": kind, "location": job.source.location,
        "revision": job.source.revision or spec.dataset_revision if kind == "hub" else job.source.revision,
        "n_heads": n_heads, "b_method": job.options.b_method, "ingested_at": published,
    }


def refresh_intervals(home: Path) -> list[str]:
    """Recompute the findings' intervals after a publish or removal; a note when that could not be done.

    The model is published (or removed) either way: the findings view then reads the old intervals
    as out of date, and ``qkdb findings`` recomputes them for its session.
    """
    import duckdb
    from filelock import Timeout

    try:
        warehouse.refresh_intervals(home)
    except (Timeout, duckdb.Error, OSError, QkdbError) as exc:
        why = str(from_os_error(exc, "writing them")) if isinstance(exc, OSError) else str(exc)
        return [f"findings intervals not updated ({why}); `qkdb findings` computes them when it runs"]
    return []

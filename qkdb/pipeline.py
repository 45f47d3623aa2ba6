"""One ingest, end to end: a source's head groups through the engine into a model version, published atomically.

Data flows one way: the source yields head groups as their files become local; the engine turns
each group into rows, in worker processes; the rows are staged as the model's new version in the
warehouse; the version is published in one step; the run is logged; the findings' intervals are
recomputed. This module is the glue of the ingest layer and the warehouse layer, which never
import each other; it uses only their facades.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from qkdb import warehouse
from qkdb.ingest import (
    VALUE_BOUND, HeadSelection, capture_record, check_pre_rope, collage_heads, dataset_facts, default_workers, discover,
    largest_position, open_source, read_metadata, read_saver_state, recorded_facts_notes, registry, resolve_spec,
    plane_layout, run_groups, spec_notes, trained_context, tune_ingest_process,
)
from qkdb.errors import ClusterError, InputError, QkdbError, from_os_error
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

    home: Path | None  # (None on a cluster's worker: the driver publishes)
    spec: object  # qkdb.ingest.ModelSpec
    options: object  # qkdb.ingest.IngestOptions
    source: object  # qkdb.ingest.Source (a SourceFacts once back from a cluster's worker)
    kind: str  # ingest_runs.source
    fingerprint: str
    workers: int
    started: dt.datetime
    t0: float
    notes: list[str]
    cluster: str | None = None  # the Ray cluster's address, when the heads were computed on one
    ray_version: str | None = None
    capture: str | None = None  # models.capture: how the dataset says its vectors were captured (JSON)


def fingerprint(data: str, spec, options) -> str:
    """Data, parameters, facts and version: an ingest with the same fingerprint would change nothing."""
    h = hashlib.sha256(data.encode())
    h.update(json.dumps(_parameters(spec, options), sort_keys=True, default=str).encode())
    h.update(repr(spec).encode())
    h.update(version().encode())
    return h.hexdigest()


def _parameters(spec, options) -> dict:
    out = options.parameters(spec.rope_theta, spec.rope_pairing, spec.rope_scaling)
    # The facts the options gave, so that a later check of the model's RoPE (stale_models) resolves it as this run did.
    out["facts_given"] = {k: v for k, v in options.facts().items() if v is not None}
    return out


def _plan(path: Path | None, name: str | None, options, *, kind: str | None, home: Path | None,
          workers: int) -> _Run:
    """Resolve the facts, check them, open the source and fingerprint what it holds (where the data is read)."""
    started, t0 = dt.datetime.now(dt.timezone.utc), time.perf_counter()
    # A missing or empty dataset is the problem to report, before any model facts (and the walk is
    # done once: the source plans from it).
    found = discover(path) if path is not None else None
    metadata, listing = read_metadata(path) if path is not None else {}, None
    if path is None:  # a Hub branch: listed once here, with the qkdb_dataset.json a pushed capture carries
        from qkdb.ingest import hub  # (huggingface_hub: only for the Hub)

        listing = hub.branch_listing(name, options.repo, options.revision, endpoint=options.endpoint,
                                     cache_dir=options.cache_dir, token=options.token)
        metadata = listing.metadata if listing is not None else {}
    # qk-sniffer's own record of the capture: facts after the options, the registry and qkdb_dataset.json.
    # (A Hub branch's state names the model when no name is given, as a folder's does: the listing
    # reads it only then.)
    state = read_saver_state(path) if path is not None else (listing.state if listing is not None else None)
    recorded = dataset_facts(metadata, state)
    spec = resolve_spec(name, recorded, **options.facts())
    warehouse.store.check_model_name(spec.model)
    spec = plane_layout.reconcile_options(spec, options, metadata)
    spec = replace(spec, context_length=_context_length(spec, metadata, found))
    spec = trained_context.resolve(spec, options.trained_context)
    rope_notes = check_pre_rope(spec) + plane_layout.check_rope(spec, options)
    # Once the facts and parameters hold (contradictions are refused before anything starts), the
    # workers' start-up overlaps the planning and warehouse work below.
    tune_ingest_process(workers)
    source = open_source(
        spec, HeadSelection.parse(options.heads), path=path, repo=options.repo, revision=options.revision,
        endpoint=options.endpoint, cache_dir=options.cache_dir, token=options.token, discovery=found, listing=listing,
    )
    if state is None and hasattr(source, "saver_state"):  # a Hub branch's record of its capture: provenance
        state = source.saver_state()
    capture = capture_record(metadata, state)
    fp = fingerprint(source.fingerprint() + (capture or ""), spec, options)
    notes = ([f"ignored folder {p}" for p in source.ignored] + recorded_facts_notes(name, recorded, **options.facts())
             + spec_notes(spec, options.complement) + rope_notes
             + (trained_context.note(spec) if options.complement else []) + _layer_subset_note(spec, source.planned))
    return _Run(home, spec, options, source, kind or source.kind, fp, workers, started, t0, notes, capture=capture)


def _context_length(spec, metadata: dict, found) -> int | None:
    """The context length L plasticity's bins divide: the capture's, the registry's for its Hub captures, or the data's.

    A ``qkdb sniff`` capture records its texts' ``max_length``, a simulation its ``max_position``; the
    registry knows its Hub captures' (``registry.HUB_CONTEXT_LENGTH``); a local dataset without either
    gives its largest position + 1 (parquet statistics, no data read). None otherwise: each head then
    takes its own largest position + 1.
    """
    capture = metadata.get("capture") if isinstance(metadata.get("capture"), dict) else {}
    for key in ("max_length", "max_position"):
        value = capture.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    hub = registry.hub_context_length(spec)
    if hub is not None:
        return hub
    if found is not None:
        top = largest_position([hf.path for table in (found.queries, found.keys) for hf in table.values()])
        return None if top is None else top + 1
    return None


def _layer_subset_note(spec, planned) -> list[str]:
    """A note when the heads to ingest cover some of the model's layers only (its findings are then about those)."""
    layers = sorted({layer for layer, _ in planned})
    if not spec.n_layers or not layers or len(layers) >= spec.n_layers:
        return []
    shown = ", ".join(map(str, layers[:8])) + (", ..." if len(layers) > 8 else "")
    return [f"{spec.model}: {len(layers)} of its {spec.n_layers} layers have heads to ingest ({shown}): its findings "
            "and their intervals will be about those layers (docs/findings.md, \"A subset of layers\")"]


def run(path: Path | None, name: str | None, options, *, kind: str | None, home: Path,
        progress: Progress | None, refresh: bool = True) -> IngestResult:
    """Plan, check and run one ingest on this machine (see :func:`qkdb.api.ingest`)."""
    job = _plan(path, name, options, kind=kind, home=None, workers=options.workers or default_workers())
    new_home = not home.exists()
    job.home = warehouse.ensure_writable(home)
    try:
        return _run_planned(job, options, progress, refresh)
    except BaseException:
        if new_home:
            _remove_if_empty(job.home)
        raise


def _remove_if_empty(home: Path) -> None:
    """Remove a home this ingest created when it failed before any model landed: no empty warehouse left behind.

    Only while nothing else lives there (no model, no other ingest staging into it).
    """
    import shutil

    staging = home / warehouse.store.STAGING
    if warehouse.ingested_models(home) or (staging.is_dir() and any(staging.iterdir())):
        return
    shutil.rmtree(home, ignore_errors=True)


def _run_planned(job, options, progress: Progress | None, refresh: bool) -> IngestResult:
    if (not options.force and _last_fingerprint(job.home, job.spec.model) == job.fingerprint
            and not _rope_changed(job.home, job.spec)):
        previous = warehouse.store.last_run(job.home, job.spec.model)
        return IngestResult(job.spec.model, job.home, previous["run_id"], 0, 0, unchanged=True)
    if progress is not None:
        job.source.report_to(progress, model=job.spec.model)
    return _publish(job, progress or (lambda *a, **k: None), refresh)


def _rope_changed(home: Path, spec) -> bool:
    """Whether the model's published RoPE planes were computed with another layout than ``spec`` gives now.

    (Same data and parameters, but a newer qkdb reading facts it used to ignore: recompute.)
    """
    import pyarrow.parquet as pq

    from qkdb.staleness import MODEL_COLUMNS, rope_changed

    f = warehouse.store.current_file(home, spec.model, warehouse.MODELS.name)
    if not f.exists():
        return False
    table = pq.ParquetFile(f).read()
    row = {c: table.column(c)[0].as_py() if c in table.column_names else None for c in MODEL_COLUMNS}
    row["model"] = spec.model  # (the partition key: not a column of the file)

    def planes(model: str):
        pf = warehouse.store.current_file(home, model, "rope_planes")
        if not pf.exists():
            return []
        t = pq.ParquetFile(pf).read(columns=["layer", "j", "omega", "omega_source"])
        seen = {}
        for layer, j, omega, source in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            seen.setdefault((layer, j), (layer, j, omega, source))
        return sorted(seen.values())

    return rope_changed(spec, row, planes) is not None


def _last_fingerprint(home: Path, model: str) -> str | None:
    """The fingerprint of the model's published version (None when it has none)."""
    if not warehouse.store.is_ingested(home, model):
        return None
    previous = warehouse.store.last_run(home, model)
    return json.loads(previous["parameters"]).get("fingerprint") if previous else None


def _publish(job: _Run, progress: Progress, refresh: bool = True) -> IngestResult:
    """Run the source's groups (yielded as their files arrive) through the engine and publish the model atomically."""
    spec, options = job.spec, job.options
    planned = job.source.planned  # fixes the collage sample before any group arrives
    collage = collage_heads(planned, options)
    with _publishing(job, progress, refresh=refresh) as publication:
        # Workers start on the first groups now: preparing the warehouse overlaps their work.
        outcomes = run_groups(job.source.groups(), spec, options, collage, job.workers)
        try:
            staging = publication.stage()
            progress("start", model=spec.model, total=len(planned))
            return publication.commit(_stage_heads(job, outcomes, staging, progress))
        finally:
            outcomes.close()  # (an error: stops the pool)


@contextlib.contextmanager
def _publishing(job: _Run, progress: Progress, *, refresh: bool):
    """The frame of every publish of a model, computed here or on a cluster's worker: its lock held throughout.

    Waits up to ``options.wait`` for the model's lock (busy otherwise), and gives a
    :class:`_Publication` whose staging folder is discarded on any way out but its commit.

    Parameters
    ----------
    refresh
        Whether the commit refreshes the findings' intervals (a batch refreshes once at its end).
    """
    lock = warehouse.store.acquire_model(job.home, job.spec.model, job.options.wait)
    publication = _Publication(job, progress, refresh)
    try:
        _refuse_repeated_checkpoint(job.home, job.spec)
        yield publication
    finally:
        if publication.staging is not None:
            publication.staging.discard()
        lock.release()


def _refuse_repeated_checkpoint(home: Path, spec) -> None:
    """Refuse a checkpoint whose weights another checkpoint of its series already has (under another name).

    Some Hub step branches serve one checkpoint under several names (pythia #195, #205); a series
    holding both would show a training trajectory that is not one. Refused rather than flagged: the
    series views have no honest way to show a step that did not happen (docs/sniff.md).
    """
    if not spec.series or not spec.weights_sha256:
        return
    same = sorted(m for m, row in warehouse.published_model_rows(home).items()
                  if m != spec.model and row.get("series") == spec.series and row.get("weights_sha256") == spec.weights_sha256)
    if same:
        raise InputError(
            f"{spec.model}: its weights (sha256 {spec.weights_sha256}) are those of {', '.join(same)}, already "
            f"in series {spec.series}: one checkpoint under two names would read as a step of training that did "
            f"not happen; check which revision is mislabelled, and `qkdb remove` it if it is the one published"
        )


class _Publication:
    """One model's publish under its lock (:func:`_publishing`): its staging folder, then its commit."""

    def __init__(self, job: _Run, progress: Progress, refresh: bool) -> None:
        self.job, self.progress, self.refresh = job, progress, refresh
        self.staging = None  # (until it is published)

    def stage(self):
        """Remove what an earlier ingest left, make the catalog, and open the model's staging folder."""
        home, model = self.job.home, self.job.spec.model
        warehouse.store.cleanup_model(home, model)
        warehouse.ensure_catalog(home)
        self.staging = warehouse.store.Staging(home, model)
        return self.staging

    def commit(self, staged: _Staged) -> IngestResult:
        """Add the model's row, publish the staged version in one step, log the run, refresh the intervals if asked."""
        job, progress, staging = self.job, self.progress, self.staging
        published = dt.datetime.now(dt.timezone.utc)
        staging.add(warehouse.MODELS, _model_row(job, staged.head_dim, staged.done, published))
        staging.close()
        progress("publish", model=job.spec.model)
        warehouse.store.publish(staging)
        for reason, dropped in staged.bad_rows.items():
            if dropped:
                job.notes.append(_dropped_rows_note(reason, dropped))
        try:
            run_id = _log_run(job, published, staged.done, staged.skipped)
        except OSError as exc:  # a full disk after the publish: the model is in, say so
            raise from_os_error(exc, f"{job.spec.model} is published, but its ingest_runs row was not written") from exc
        self.staging = None
        if self.refresh:
            progress("intervals", model=job.spec.model)
            job.notes.extend(refresh_intervals(job.home))
        progress("done", model=job.spec.model, heads=staged.done, skipped=len(staged.skipped))
        return _result(job, run_id, staged)


@dataclass
class _Staged:
    """What staging a model's heads came to (the rows themselves are in the staging or the Arrow tables)."""

    done: int
    skipped: list[tuple[str, str]]
    head_dim: int | None
    bad_rows: dict[str, dict[str, int]]  # reason ('null', 'bad') -> file -> rows dropped


def _result(job: _Run, run_id: str, staged: _Staged) -> IngestResult:
    return IngestResult(
        job.spec.model, job.home, run_id, staged.done, len(staged.skipped), staged.skipped, job.notes,
        time.perf_counter() - job.t0,
    )


# -- on a Ray cluster: each model computed by a task on a worker, published here -------------------


@dataclass
class SourceFacts:
    """What the model's row and the run log record of a source, as plain values (sent back from a worker)."""

    kind: str
    location: str
    revision: str | None
    commit: str | None


@dataclass
class ModelFailure:
    """A model that was not published: what it was asked as (its name, else its path) and why.

    ``attempted`` is False for a model a batch did not start, having stopped before it (see
    :func:`qkdb.api.ingest_many`).
    """

    model: str
    error: QkdbError
    attempted: bool = True


@dataclass
class _Computed:
    """A model computed on a cluster's worker: its run (facts, fingerprint, notes) and its tables as Arrow."""

    job: _Run
    staged: _Staged | None = None
    tables: dict | None = None  # table name -> compressed Arrow IPC bytes (warehouse.pack_tables); None when unchanged
    bytes_read: int = 0  # the head files the worker read (after downloading them, for the Hub)
    seconds: float = 0.0  # on the worker, from planning to the last head
    unchanged: bool = False


def compute_model(path: str | None, name: str | None, options, kind: str | None,
                  previous: dict[str, str]) -> _Computed | ModelFailure:
    """One Ray task: read a model's source on this worker, compute its tables, return them as Arrow.

    ``path`` must exist on the worker's node; a Hub source downloads into the node's HF cache.
    ``previous`` maps each published model to its fingerprint: a model whose data, parameters
    and version are unchanged is not computed again (unless ``options.force``). Bad input is
    returned as a :class:`ModelFailure` (Ray does not retry it); anything else raises.
    """
    label = name or path or "?"
    try:
        job = _plan(Path(path) if path is not None else None, name, options, kind=kind, home=None, workers=1)
        label = job.spec.model
        if not options.force and previous.get(label) == job.fingerprint:
            return _Computed(_detach(job), unchanged=True)
        collage = collage_heads(job.source.planned, options)
        counted = _Counted(job.source.groups())
        rows = warehouse.ArrowRows()
        staged = _stage_heads(job, run_groups(counted, job.spec, options, collage, 1), rows, lambda *a, **k: None)
        tables = warehouse.pack_tables(rows.tables())  # (compressed: what crosses the network)
        return _Computed(_detach(job), staged, tables, counted.bytes, time.perf_counter() - job.t0)
    except QkdbError as exc:
        return ModelFailure(label, exc)
    except OSError as exc:  # (the worker's disk: one line, as on this machine)
        return ModelFailure(label, from_os_error(exc, f"reading {label} on a Ray worker"))


class _Counted:
    """A source's groups, counting the bytes of the head files they bring."""

    def __init__(self, groups):
        self.groups, self.bytes = groups, 0

    def __iter__(self):
        for group in self.groups:
            for f in (group.key, *group.queries):
                self.bytes += f.path.stat().st_size
            yield group


def _detach(job: _Run) -> _Run:
    """The run without its live source (a Hub client, a plan of local paths): what the driver needs of it."""
    from dataclasses import replace

    s = job.source
    # (nor a Hub token: the result goes through Ray's object store, and the driver never needs it)
    return replace(job, options=job.options.updated(token=None),
                   source=SourceFacts(job.kind, s.location, s.revision, s.commit))


def run_on_cluster(targets: list[tuple[Path | None, str | None]], options, *, kind: str | None, home: Path,
                   address: str, progress: Progress | None,
                   on_result: Callable[[IngestResult | ModelFailure], None] | None = None,
                   ) -> list[IngestResult | ModelFailure]:
    """Ingest several models on a Ray cluster: one task per model; each published here as it arrives.

    The driver (this process) owns the warehouse: it publishes every model exactly as an ingest
    on this machine does, each atomically under its lock. A model that fails (bad input, a worker
    lost after Ray's retries) is a :class:`ModelFailure` and never published in part; the others
    go on. Progress events: ``cluster`` (``done``, ``failed``, ``total``, ``bytes_read``,
    ``bytes_received``; after a computed model also its ``worker_seconds``, ``model_bytes_read``,
    ``model_bytes_received`` and ``publish_seconds``), and ``publish``/``done`` per model.
    ``on_result`` is called with each model's outcome once it is published or failed.

    Only the targets' own run logs are read to skip unchanged models (see :func:`_target_models`),
    and the tasks are sent no Hub token their workers can get themselves (see :func:`_task_options`).
    """
    from qkdb.ingest import RayCluster

    progress = progress or (lambda *a, **k: None)
    out: list[IngestResult | ModelFailure] = []
    # (a missing Ray or an unreachable cluster fails before the warehouse is touched)
    with RayCluster(address, num_cpus=options.workers) as cluster:
        home = warehouse.ensure_writable(home)
        previous = {} if options.force else _published_fingerprints(home, _target_models(targets))
        calls = _cluster_calls(targets, options, kind, previous, cluster.address)
        counts = {"done": 0, "failed": 0, "total": len(calls), "bytes_read": 0, "bytes_received": 0}
        progress("cluster", **counts)
        # (closed on any way out, Ctrl-C included: the tasks still running are cancelled)
        with contextlib.closing(cluster.run_models(compute_model, calls)) as outcomes:
            for outcome in outcomes:
                result = outcome.value
                if outcome.error is not None:
                    # (the model's name is ModelFailure.model: the CLI puts it before the message)
                    result = ModelFailure(outcome.call.label, ClusterError(outcome.error, kind=outcome.kind))
                timing = {}
                if isinstance(result, _Computed):
                    received = sum(len(data) for data in (result.tables or {}).values())
                    counts["bytes_read"] += result.bytes_read
                    counts["bytes_received"] += received
                    timing = {"worker_seconds": result.seconds, "model_bytes_read": result.bytes_read,
                              "model_bytes_received": received}
                    t0 = time.perf_counter()
                    model = result.job.spec.model
                    try:
                        result = _publish_computed(result, home, cluster, progress)
                    except QkdbError as exc:
                        result = ModelFailure(model, exc)
                    except OSError as exc:  # a full disk: this model fails, those published stay reported
                        result = ModelFailure(model, from_os_error(exc, f"publishing {model}"))
                    timing["publish_seconds"] = time.perf_counter() - t0
                out.append(result)
                if on_result is not None:
                    on_result(result)
                counts["failed" if isinstance(result, ModelFailure) else "done"] += 1
                # (the per-model figures are what benchmarks/cluster.py scales to a real cluster)
                progress("cluster", model=getattr(result, "model", None), **counts, **timing)
    if any(isinstance(r, IngestResult) and not r.unchanged for r in out):
        progress("intervals", model=None)
        notes = refresh_intervals(home)  # once for the batch, not once per model
        for r in out:
            if isinstance(r, IngestResult) and not r.unchanged:
                r.notes.extend(notes)
    return out


def _cluster_calls(targets: list[tuple[Path | None, str | None]], options, kind: str | None,
                   previous: dict[str, str], address: str) -> list:
    """One :class:`~qkdb.ingest.ClusterCall` per target: its label and the arguments its task is sent."""
    from qkdb.ingest import ClusterCall

    options = _task_options(options, address)
    return [
        ClusterCall(name or (str(path) if path is not None else "?"),
                    (str(path) if path is not None else None, name, options, kind, previous))
        for path, name in targets
    ]


def _task_options(options, address: str):
    """The options sent with every task: without a Hub token the workers can get themselves.

    The task's arguments are pickled into its spec, which Ray's dashboard and state API can show.
    The default token (None: huggingface_hub's ``HF_TOKEN`` or stored login, resolved on each
    worker) and ``True``/``False`` carry no secret. A token given as a string is sent, since the
    driver cannot know what a remote node holds, except to ``'local'``: a Ray instance started by
    this process, whose workers inherit its environment and home, so resolve the same token here.
    """
    token = options.token
    if isinstance(token, str) and address == "local":
        from huggingface_hub import get_token

        try:
            here = get_token()
        except Exception:  # noqa: BLE001 - (an OIDC exchange that fails): then the token is sent
            here = None
        if here == token:
            return options.updated(token=None)
    return options


def _target_models(targets: list[tuple[Path | None, str | None]]) -> list[str] | None:
    """The models a batch publishes, as far as this machine can tell; None when it cannot tell them all.

    A target's name is given, or for a path without one, its dataset's ``qkdb_dataset.json`` names
    it when that path is readable here (a path may exist only on the cluster's nodes).
    """
    names = []
    for path, name in targets:
        if not name and path is not None:
            try:
                name = dataset_facts(read_metadata(path), read_saver_state(path)).get("model")
            except (QkdbError, OSError):
                name = None
        if not isinstance(name, str) or not name:
            return None
        names.append(name)
    return names


def _published_fingerprints(home: Path, models: list[str] | None = None) -> dict[str, str]:
    """The fingerprints of the published versions of ``models`` (None: of every ingested model).

    Only those models' run logs are read: another model's, however large or damaged, is not.
    """
    out = {}
    for model in warehouse.store.ingested_models(home) if models is None else dict.fromkeys(models):
        try:
            warehouse.store.check_model_name(model)
        except QkdbError:  # (its task says why, naming it)
            continue
        fp = _last_fingerprint(home, model)
        if fp is not None:
            out[model] = fp
    return out


def _publish_computed(computed: _Computed, home: Path, cluster, progress: Progress) -> IngestResult:
    """Publish a model a worker computed, exactly as one computed here: staged, committed in one step, logged."""
    from dataclasses import replace

    # (t0 was the worker's clock: the result's seconds are the worker's plus the publish here)
    job = replace(computed.job, home=home, cluster=cluster.address, ray_version=cluster.ray_version,
                  t0=time.perf_counter() - computed.seconds)
    store, model = warehouse.store, job.spec.model
    if computed.unchanged:
        previous = store.last_run(home, model)
        return IngestResult(model, home, previous["run_id"] if previous else None, 0, 0, unchanged=True)
    with _publishing(job, progress, refresh=False) as publication:  # (run_on_cluster refreshes for the batch)
        staging = publication.stage()
        for name, table in warehouse.unpack_tables(computed.tables).items():
            staging.write(warehouse.TABLES[name], table)
        return publication.commit(computed.staged)


def _stage_heads(job: _Run, outcomes, staging, progress: Progress) -> _Staged:
    """Stage every head's rows as it completes; a bad head fails the ingest unless skip_bad_heads.

    ``staging`` is the warehouse's Staging, or (on a cluster's worker) an ArrowRows that holds them.
    """
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
    return _Staged(done, skipped, head_dim, bad_rows)


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
        "cluster": job.cluster, "ray_version": job.ray_version,
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
    planes = head_dim and job.options.complement
    layouts = plane_layout.layout_columns(plane_layout.model_layouts(spec, head_dim)) if planes else {}
    for name in ("rope_inv_freq", "layer_rope_inv_freq"):
        if layouts.get(name) is not None:
            per_layer[name] = [layouts.pop(name)]
        layouts.pop(name, None)
    return {
        **per_layer,
        **layouts,
        "attention_scale": spec.attention_scale,
        "family": spec.family, "in_paper": spec.in_paper, "hf_model": spec.hf_model,
        "model_revision": spec.model_revision, "n_layers": spec.n_layers, "n_q_heads": spec.n_q_heads,
        "n_kv_heads": spec.n_kv_heads, "gqa_ratio": spec.gqa_ratio, "head_dim": head_dim,
        "rope": spec.rope, "rope_theta": spec.rope_theta,
        "rope_pairing": spec.rope_pairing if spec.rope != "none" else None, "rope_scaling": spec.rope_scaling,
        "position_scaling": spec.position_scaling, "pre_rope": spec.pre_rope, "weights_sha256": spec.weights_sha256,
        "input_kind": spec.input_kind, "nope_layers": [list(spec.nope_layers)], "series": spec.series, "series_order": spec.series_order,
        "trained_context": spec.trained_context, "trained_context_source": spec.trained_context_source,
        "phase": spec.phase, "step": spec.step, "source": kind, "location": job.source.location,
        "revision": job.source.revision or spec.dataset_revision if kind == "hub" else job.source.revision,
        "n_heads": n_heads, "b_method": job.options.b_method, "capture": job.capture, "ingested_at": published,
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

"""The small public Python API: ``connect``, ``ingest``, ``remove``, ``info``.

The CLI is a thin layer over these functions; notebooks use them directly.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from qkdb.errors import InputError, QkdbError, RegistryError
from qkdb.ingest.sources import registry
from qkdb.ingest.metrics.complement import MAX_FIT
from qkdb.ingest.engine.pool import collage_heads, default_workers, plan_groups, run_groups
from qkdb.ingest.sources.layout import METADATA_FILE, VALUE_BOUND, discover, read_metadata
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.sources.registry import ModelSpec
from qkdb.ingest.sources.select import HeadSelection
from qkdb.ingest.engine.runtime import start_workers
from qkdb.warehouse import intervals, store
from qkdb.warehouse.batches import to_batch
from qkdb.warehouse.catalog import ensure_catalog, open_catalog, refresh_intervals
from qkdb.warehouse.home import catalog_path, ensure_writable, resolve_home
from qkdb.warehouse.schema import INGEST_RUNS, MODELS, TABLES

if TYPE_CHECKING:  # (at run time, imported where used: an ingest need not wait ~0.1 s for it)
    import duckdb

Progress = Callable[..., None]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _v

    try:
        return _v("qkdb")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


def connect(home: str | os.PathLike | None = None, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to the warehouse catalog with every table and finding view ready.

    Parameters
    ----------
    home : path, optional
        Warehouse home; default ``$QKDB_HOME`` or the platform's user data dir.
    read_only : bool
        Open the catalog read-only (the default; many readers can share it).
    """
    return open_catalog(resolve_home(home), read_only=read_only)


def ensure_intervals(con: duckdb.DuckDBPyConnection) -> bool:
    """Recompute the findings' intervals for this connection if they do not match what it sees.

    They are computed whenever models are published, so this does nothing unless an ingest is
    still running or was interrupted, or the connection changed what the findings read (e.g. a
    params view of its own). Returns True when it recomputed them.
    """
    return intervals.ensure_current(con)


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


_METADATA_FACTS = {f.name for f in fields(ModelSpec)} - {"model", "in_registry"}


def resolve_spec(name: str | None, metadata: dict, **overrides) -> ModelSpec:
    """Model facts: options win over the registry, the registry over the dataset's metadata.

    Head counts that contradict each other — a ``gqa_ratio`` that is not ``n_q_heads / n_kv_heads``,
    whichever of the options, the registry and ``qkdb_dataset.json`` each number comes from, or a
    ``qkdb_dataset.json`` whose ratio differs from the registry's for a registry model — are a
    :class:`RegistryError` naming the numbers and their sources, raised before any work is done.
    """
    name = name or metadata.get("model")
    if not name:
        raise RegistryError("give the model's name with --model (the dataset has no qkdb_dataset.json naming it)")
    registered = registry.find(name)
    facts = {k: v for k, v in metadata.items() if k in _METADATA_FACTS and v is not None}
    for f in registry.HEAD_COUNTS:
        if f in facts and (not isinstance(facts[f], int) or isinstance(facts[f], bool)):
            raise InputError(f"{METADATA_FILE}: {f} must be an integer, got {facts[f]!r}")
    given = {k: v for k, v in overrides.items() if v is not None}
    facts = _metadata_facts(facts)
    if registered is not None:
        base, base_origin = registered, "the registry"
        if metadata.get("source") == "sniff":
            # The registry wins, except on what a qkdb sniff capture records about its own vectors
            # (the registry's entries describe the Hub's captures).
            captured = _metadata_facts({k: metadata.get(k) for k in _CAPTURE_FACTS})
            base = replace(base, **{k: captured[k] if captured[k] is not None else _SPEC_DEFAULTS[k]
                                    for k in _CAPTURE_FACTS})
    else:
        base, base_origin = ModelSpec(model=name).with_overrides(**facts), METADATA_FILE
    # Where each head count comes from, for the messages (a ratio derived from the counts: from theirs).
    origin = {f: base_origin for f in registry.HEAD_COUNTS if getattr(base, f) is not None}
    origin.update({f: flag for f, flag in registry.HEAD_COUNTS.items() if f in given})
    spec = base.with_overrides(**given)
    if spec.gqa_ratio is not None and "gqa_ratio" not in origin:
        origin["gqa_ratio"] = "n_q_heads / n_kv_heads"
    registry.check_head_counts(spec, origin)
    if registered is not None:
        _check_dataset_counts(spec, facts, given)
    missing = spec.missing_facts()
    if missing:
        close = registry.suggest(name)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise RegistryError(
            f"unknown model {name!r}: not in the registry, so give its facts with {', '.join(missing)} "
            f"(and --family).{hint}"
        )
    return spec


# Facts a dataset's qkdb_dataset.json records about its own vectors, which the registry cannot know.
_CAPTURE_FACTS = ("rope", "layer_rope_theta", "layer_rope_scaling", "position_scaling")
_SPEC_DEFAULTS = {f.name: f.default for f in fields(ModelSpec)}


def _metadata_facts(facts: dict) -> dict:
    """``qkdb_dataset.json`` values in the types of :class:`ModelSpec` (tuples, JSON text)."""
    facts = dict(facts)

    def as_json(v):
        return v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True)

    for key in ("nope_layers", "layer_rope_theta"):
        if isinstance(facts.get(key), list):
            facts[key] = tuple(facts[key])
    if isinstance(facts.get("layer_rope_scaling"), list):
        facts["layer_rope_scaling"] = tuple(as_json(v) for v in facts["layer_rope_scaling"])
    for key in ("rope_scaling", "position_scaling"):
        if isinstance(facts.get(key), (dict, list)):
            facts[key] = as_json(facts[key])
    rope = facts.get("rope")
    if rope is not None and rope not in ("rotary", "none"):
        raise InputError(f"{METADATA_FILE}: rope must be 'rotary' or 'none', got {rope!r}")
    return facts


def _check_dataset_counts(spec: ModelSpec, facts: dict, given: dict) -> None:
    """Refuse a registry model whose dataset records another GQA ratio than the registry's.

    The registry's facts win over ``qkdb_dataset.json``, but the key folders of a captured dataset
    follow the ratio it records (stated, or ``n_q_heads / n_kv_heads``): where the two differ and
    no ``--gqa-ratio`` settles it, queries would be paired by a mapping the capture did not use.
    Counts that differ at the same ratio (a small simulation under a registry name) pair correctly.
    """
    if "gqa_ratio" in given:
        return
    q, kv = facts.get("n_q_heads"), facts.get("n_kv_heads")
    theirs = facts.get("gqa_ratio") or (q // kv if q and kv and q > 0 and kv > 0 and q % kv == 0 else None)
    if theirs is None or spec.gqa_ratio is None or theirs == spec.gqa_ratio:
        return

    def counts(n_q, n_kv) -> str:
        return f" (n_q_heads / n_kv_heads = {n_q} / {n_kv})" if n_q and n_kv else ""

    raise RegistryError(
        f"model {spec.model}: the dataset's {METADATA_FILE} gives gqa_ratio={theirs}{counts(q, kv)}, the registry "
        f"gqa_ratio={spec.gqa_ratio}{counts(spec.n_q_heads, spec.n_kv_heads)}; the key folders follow the "
        "capture's ratio: give the right one with --gqa-ratio (and --n-q-heads, --n-kv-heads)"
    )


def _check_rope(options: IngestOptions, spec: ModelSpec) -> None:
    """Refuse an unusable RoPE scaling (the model's or a layer's) once, up front, rather than once per head."""
    from qkdb.ingest.metrics.rope_planes import rope_frequencies

    if not options.complement or spec.rope == "none":
        return
    if options.rope_theta is not None:
        rope_frequencies(2, options.rope_theta, options.rope_scaling)
    for theta, scaling in set(zip(spec.layer_rope_theta or (), spec.layer_rope_scaling or ())):
        if theta is not None:
            rope_frequencies(2, theta, scaling)


def spec_notes(spec: ModelSpec, options: IngestOptions) -> list[str]:
    """What the user should know about the model's positional encoding before reading its metrics (once each)."""
    notes = []
    if spec.rope == "none" and options.complement:
        notes.append(
            f"{spec.model} has no rotary position embedding (rope: none): no RoPE planes are computed "
            "(rope_planes has no rows for it), its layers count as NoPE layers (heads.is_nope) and the "
            "findings about RoPE layers leave it out; rotation.omega comes from the complement pairs"
        )
    for entry in json.loads(spec.position_scaling or "[]"):
        if not entry.get("removed", False):
            kind = "queries" if entry.get("kind") == "q" else "keys"
            notes.append(
                f"{spec.model}: its {kind} carry a position-dependent factor that is not RoPE "
                f"({entry.get('type')}: {entry.get('formula')}); the positional metrics of the {kind} include "
                "it (models.position_scaling)"
            )
    return notes


def _files_fingerprint(groups) -> str:
    """Identifies the local files an ingest reads (path, size, modification time)."""
    h = hashlib.sha256()
    for g in groups:
        for f in (g.key, *g.queries):
            st = f.path.stat()
            h.update(f"{f.path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _fingerprint(data: str, spec: ModelSpec, options: IngestOptions) -> str:
    """Data, parameters, facts and version: an ingest with the same fingerprint would change nothing."""
    h = hashlib.sha256(data.encode())
    h.update(json.dumps(options.as_dict(), sort_keys=True, default=str).encode())
    h.update(repr(spec).encode())
    h.update(version().encode())
    return h.hexdigest()


def last_run(home: Path, model: str) -> dict | None:
    """Run id and parameters of the newest ingest_runs row of a model, read straight from its parquet files."""
    folder = home / INGEST_RUNS.name / f"model={model}"
    files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    best = None
    for f in files:
        # ParquetFile, not read_table: the latter imports pyarrow.dataset (~0.5 s) for one small file.
        # Timestamps compared as integers: turning them into datetimes imports pandas (~0.25 s).
        t = pq.ParquetFile(f).read(columns=["run_id", "parameters", "finished_at"])
        finished = t.column("finished_at").cast(pa.int64()).to_pylist()
        for i, when in enumerate(finished):
            if when is not None and (best is None or when > best[0]):
                best = (when, t.column("run_id")[i].as_py(), t.column("parameters")[i].as_py())
    return None if best is None else {"run_id": best[1], "parameters": best[2]}


def ingest(
    path: str | os.PathLike | None = None,
    model: str | None = None,
    *,
    repo: str | None = None,
    revision: str | None = None,
    heads: str | None = None,
    family: str | None = None,
    gqa_ratio: int | None = None,
    n_layers: int | None = None,
    n_q_heads: int | None = None,
    n_kv_heads: int | None = None,
    rope_theta: float | None = None,
    rope_pairing: str | None = None,
    rope_scaling: str | dict | None = None,
    max_vectors: int | None = None,
    n_components: int = 10,
    b_method: str = "eig",
    points: int = 512,
    collage: tuple[tuple[int, int], ...] = (),
    complement: bool = True,
    fit_rows: int | None = MAX_FIT,
    seed: int = 0,
    skip_bad_heads: bool = False,
    drop_bad_vectors: bool = False,
    workers: int | None = None,
    force: bool = False,
    wait: float = 0.0,
    source: str | None = None,
    home: str | os.PathLike | None = None,
    progress: Progress | None = None,
    endpoint: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
) -> IngestResult:
    """Compute every metric of a sniffed-qk dataset and publish it to the warehouse as one model.

    Parameters
    ----------
    path : path, optional
        Local dataset root in the sniffed-qk layout (SPEC §3.1). Without it the data comes from
        the Hugging Face Hub: ``repo`` (default the registry's ``viktoroo/sniffed-qk``) at
        ``revision`` (default the model's registry branch), downloading only the files needed.
    model : str, optional
        Registry name or a new name (then give ``gqa_ratio`` and ``n_layers``); default the
        dataset's ``qkdb_dataset.json``.
    heads : str, optional
        Selection like ``"0-3"`` (layers), ``"5"`` or ``"l03h07,l05h01"``.
    skip_bad_heads : bool
        Ingest the other heads when one cannot be (bad file, too few vectors, ...); each skipped
        head and the reason are recorded in ``ingest_runs.skipped``.
    drop_bad_vectors : bool
        Drop the rows whose vector holds NaN, ±inf or a value beyond ±65504 (``VALUE_BOUND``,
        values no attention head produces), counting them in ``heads.n_dropped``, instead of
        refusing the file (see docs/reliability.md).
    fit_rows : int or None
        Pooled vectors per head (a seeded subsample, Q and K in proportion) for the per-vector
        statistics of the ``complement`` and ``rope_planes`` tables; None uses every vector. The
        cost of that stage grows with it, its noise floor shrinks as ``1/sqrt(fit_rows/2)``.
    force : bool
        Re-ingest even when the same data was already ingested with the same parameters.
    endpoint, cache_dir, token
        Hub endpoint, huggingface_hub cache and token (defaults: huggingface_hub's own).

    Returns
    -------
    IngestResult
    """
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    if path is None and not model:
        raise RegistryError("give --model NAME (ingested from the Hub) or --path DIR (a local dataset)")
    workers = workers or default_workers()
    path = Path(path) if path is not None else None
    metadata = read_metadata(path) if path is not None and path.is_dir() else {}
    spec = resolve_spec(
        model, metadata, family=family, gqa_ratio=gqa_ratio, n_layers=n_layers,
        n_q_heads=n_q_heads, n_kv_heads=n_kv_heads, rope_theta=rope_theta, rope_pairing=rope_pairing,
        rope_scaling=json.dumps(rope_scaling, sort_keys=True) if isinstance(rope_scaling, dict) else rope_scaling,
    )
    store.check_model_name(spec.model)
    if rope_theta is not None or rope_scaling is not None:
        # RoPE given for the whole model replaces the capture's per-layer RoPE.
        spec = replace(spec, layer_rope_theta=None, layer_rope_scaling=None)
    try:
        options = IngestOptions(
            n_components=n_components, b_method=b_method, max_vectors=max_vectors, points=points,
            collage_heads=tuple(collage), complement=complement, fit_rows=fit_rows, seed=seed,
            skip_bad_heads=skip_bad_heads, drop_bad_vectors=drop_bad_vectors, rope_theta=spec.rope_theta,
            rope_pairing=spec.rope_pairing, rope_scaling=spec.rope_scaling,
        )
    except ValueError as exc:  # a parameter out of range is the caller's input, not a bug
        raise InputError(str(exc)) from None
    # Once the facts and parameters hold (contradictions are refused before anything starts), the
    # workers' start-up overlaps the discovery and warehouse work below.
    start_workers(workers)
    _check_rope(options, spec)
    selection = HeadSelection.parse(heads)
    hub_source = None
    if path is not None:
        discovery = discover(path)
        groups = plan_groups(discovery, spec.gqa_ratio, selection)
        planned = [(q.layer, q.head) for g in groups for q in g.queries]
        data_id, ignored = _files_fingerprint(groups), discovery.ignored
        source = source or (metadata.get("source") if metadata.get("source") in ("simulate", "sniff") else "path")
        location, revision, commit = str(path.resolve()), None, None
    else:
        from qkdb.ingest.sources import hub

        hub_source = hub.open_source(
            repo, revision, spec, selection, endpoint=endpoint, cache_dir=cache_dir, token=token
        )
        planned, data_id, ignored = hub_source.planned, hub_source.fingerprint(), hub_source.ignored
        source = source or "hub"
        location, revision, commit = hub_source.repo, hub_source.revision, hub_source.commit
    home_dir = ensure_writable(resolve_home(home))
    fp = _fingerprint(data_id, spec, options)
    previous = None if force else last_run(home_dir, spec.model)
    if previous and store.is_ingested(home_dir, spec.model):
        if json.loads(previous["parameters"]).get("fingerprint") == fp:
            return IngestResult(spec.model, home_dir, previous["run_id"], 0, 0, unchanged=True)
    if hub_source is not None:
        if progress is not None:
            hub_source.report_to(progress, model=spec.model)
        groups = hub_source.groups()  # yields each group as soon as its files are in the cache
    return _ingest_groups(
        home_dir, spec, options, groups, source=source, location=location,
        revision=revision, commit=commit, fingerprint=fp, workers=workers, wait=wait,
        progress=progress, started=started, t0=t0,
        notes=[f"ignored folder {p}" for p in ignored] + spec_notes(spec, options),
        planned=planned,
    )


def _ingest_groups(
    home: Path, spec: ModelSpec, options: IngestOptions, groups, *, source: str, location: str,
    revision: str | None, commit: str | None, fingerprint: str, workers: int, wait: float,
    progress: Progress | None, started: dt.datetime, t0: float, notes: list[str],
    planned: list[tuple[int, int]],
) -> IngestResult:
    """Run groups (a list, or an iterator yielding them as their files arrive) and publish atomically.

    ``planned`` lists every (layer, head) the groups will hold; it fixes the collage sample
    before any group arrives.
    """
    progress = progress or (lambda *a, **k: None)
    total = len(planned)
    collage = collage_heads(planned, options)
    lock = store.acquire_model(home, spec.model, wait)
    staging = outcomes = None
    try:
        # Workers start on the first groups now: preparing the warehouse overlaps their work.
        outcomes = run_groups(groups, spec, options, collage, workers)
        store.cleanup_model(home, spec.model)
        ensure_catalog(home)
        staging = store.Staging(home, spec.model)
        progress("start", model=spec.model, total=total)
        done, skipped, d = 0, [], None
        bad_rows: dict[str, int] = {}  # file -> rows dropped for bad values (drop_bad_vectors)
        for outcome in outcomes:
            name = f"l{outcome.layer:02d}h{outcome.head:02d}"
            if outcome.error is not None:
                if not options.skip_bad_heads:
                    raise InputError(outcome.error)
                skipped.append((name, outcome.error))
                progress("head", model=spec.model, layer=outcome.layer, head=outcome.head, ok=False,
                         reason=outcome.error)
                continue
            rows = outcome.rows
            for table_name, cols in rows.tables.items():
                staging.add(TABLES[table_name], cols)
            d = rows.tables["heads"]["head_dim"]
            notes.extend(rows.notes)
            bad_rows.update(rows.bad_rows_dropped)
            done += 1
            progress("head", model=spec.model, layer=outcome.layer, head=outcome.head, ok=True)
            store.pause_for_tests("QKDB_TEST_HEAD_DELAY")
        if done == 0:
            raise InputError(f"{location}: no head could be ingested ({len(skipped)} skipped)")
        if bad_rows:
            notes.append(_bad_rows_note(bad_rows))
        published = dt.datetime.now(dt.timezone.utc)
        staging.add(MODELS, _model_row(spec, source, location, revision, d, done, options, published))
        staging.close()
        progress("publish", model=spec.model)
        store.publish(staging)
        staging = None
        run_id = f"{published.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        params = {**options.as_dict(), "fingerprint": fingerprint, "spec": {k: v for k, v in vars(spec).items()}}
        run = {
            "run_id": run_id, "source": source, "location": location, "revision": revision, "commit": commit,
            "parameters": json.dumps(params, default=str, sort_keys=True), "qkdb_version": version(),
            "started_at": started, "finished_at": dt.datetime.now(dt.timezone.utc),
            "heads_done": done, "heads_skipped": len(skipped),
            "skipped": json.dumps([{"head": h, "reason": r} for h, r in skipped]),
        }
        store.append(home, INGEST_RUNS, spec.model, run_id, pa.Table.from_batches([to_batch(INGEST_RUNS, run)]))
        progress("intervals", model=spec.model)
        notes.extend(_refresh_intervals(home))
        progress("done", model=spec.model, heads=done, skipped=len(skipped))
        return IngestResult(
            spec.model, home, run_id, done, len(skipped), skipped, notes, time.perf_counter() - t0
        )
    finally:
        if outcomes is not None:
            outcomes.close()  # (an error: stops the pool)
        if staging is not None:
            staging.discard()
        lock.release()


def _bad_rows_note(bad_rows: dict[str, int]) -> str:
    """One line for every row --drop-bad-vectors dropped: how many, in which head files."""
    files = sorted(bad_rows, key=lambda f: (Path(f).parent.name, f))
    shown = ", ".join(f"{Path(f).parent.name} {bad_rows[f]}" for f in files[:12])
    more = f" and {len(files) - 12} more" if len(files) > 12 else ""
    total = sum(bad_rows.values())
    return (
        f"dropped {total} row{'s' if total != 1 else ''} whose vectors hold NaN, ±inf or values beyond "
        f"±{VALUE_BOUND:g} (--drop-bad-vectors; counted in heads.n_dropped), in {len(files)} "
        f"file{'s' if len(files) != 1 else ''}: {shown}{more}"
    )


def _model_row(spec: ModelSpec, source, location, revision, head_dim, n_heads, options, published) -> dict:
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
        "phase": spec.phase, "step": spec.step, "source": source, "location": location,
        "revision": revision or spec.dataset_revision if source == "hub" else revision,
        "n_heads": n_heads, "b_method": options.b_method, "ingested_at": published,
    }


def remove(model: str, home: str | os.PathLike | None = None, wait: float = 0.0) -> bool:
    """Delete a model from the warehouse; False when it was not there."""
    home_dir = resolve_home(home)
    store.check_model_name(model)
    if not store.is_ingested(home_dir, model) and not (home_dir / INGEST_RUNS.name / f"model={model}").exists():
        return False
    lock = store.acquire_model(home_dir, model, wait)
    try:
        store.remove(home_dir, model)
    finally:
        lock.release()
    _refresh_intervals(home_dir)
    return True


def _refresh_intervals(home: Path) -> list[str]:
    """Recompute the findings' intervals after a publish or removal; a note when that could not be done.

    The model is published (or removed) either way: the findings view then reads the old intervals
    as out of date, and ``qkdb findings`` recomputes them for its session.
    """
    import duckdb
    from filelock import Timeout

    try:
        refresh_intervals(home)
    except (Timeout, duckdb.Error, OSError, QkdbError) as exc:
        return [f"findings intervals not updated ({exc}); `qkdb findings` computes them when it runs"]
    return []


def info(home: str | os.PathLike | None = None) -> dict:
    """Facts about the warehouse: paths, sizes per table, models, library versions."""
    import platform

    import duckdb
    import numpy
    import pyarrow

    home_dir = resolve_home(home)
    sizes = {}
    for name in TABLES:
        total = 0
        for model in store.ingested_models(home_dir):
            folder = home_dir / store.STORE / model / "current" / name
            total += sum(p.stat().st_size for p in folder.glob("*.parquet")) if folder.is_dir() else 0
        if name == INGEST_RUNS.name and (home_dir / name).is_dir():
            total = sum(p.stat().st_size for p in (home_dir / name).glob("*/*.parquet"))
        sizes[name] = total
    cat = catalog_path(home_dir)
    return {
        "home": str(home_dir),
        "catalog": str(cat),
        "catalog_bytes": cat.stat().st_size if cat.exists() else 0,
        "models": store.ingested_models(home_dir),
        "table_bytes": sizes,
        "versions": {
            "qkdb": version(), "duckdb": duckdb.__version__, "pyarrow": pyarrow.__version__,
            "numpy": numpy.__version__, "python": platform.python_version(),
        },
    }


def models_overview(home: str | os.PathLike | None = None) -> pa.Table:
    """The registry plus every ingested model, with whether and when each was ingested."""
    home_dir = resolve_home(home)
    ingested: dict[str, dict] = {}
    for model in store.ingested_models(home_dir):
        f = home_dir / store.STORE / model / "current" / MODELS.name / store.DATA
        rows = pq.read_table(f).to_pylist() if f.exists() else []
        if rows:
            ingested[model] = rows[0]
    out = []
    for spec in registry.load_registry():
        row = ingested.pop(spec.model, None)
        out.append(_overview_row(spec.model, spec.family, spec.n_layers, spec.n_q_heads, spec.n_kv_heads,
                                 spec.gqa_ratio, spec.head_dim, spec.rope_theta, spec.series, True, row))
    for model, row in sorted(ingested.items()):
        out.append(_overview_row(model, row["family"], row["n_layers"], row["n_q_heads"], row["n_kv_heads"],
                                 row["gqa_ratio"], row["head_dim"], row["rope_theta"], row["series"], False, row))
    return pa.Table.from_pylist(out)


def _overview_row(model, family, n_layers, n_q, n_kv, gqa, head_dim, theta, series, in_registry, row) -> dict:
    return {
        "model": model, "family": family, "n_layers": n_layers, "n_q_heads": n_q, "n_kv_heads": n_kv,
        "gqa_ratio": gqa, "head_dim": head_dim, "rope_theta": theta, "series": series,
        "in_registry": in_registry, "ingested": row is not None,
        "heads": row["n_heads"] if row else None,
        "source": row["source"] if row else None,
        "ingested_at": row["ingested_at"] if row else None,
    }

"""The small public Python API: ``connect``, ``ingest``, ``remove``, ``info``, ``models_overview``, ``chart``, ``import_benchmarks``.

The CLI is a thin layer over these functions; notebooks use them directly. Heavy layers load when
a function needs them, so importing this module stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from qkdb import warehouse
from qkdb.errors import InputError, QkdbError, UsageError
from qkdb._version import version

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from qkdb.ingest import IngestOptions
    from qkdb.pipeline import IngestResult, ModelFailure

Progress = Callable[..., None]

__all__ = ["IngestResult", "ModelFailure", "benchmarks_connection", "chart", "connect", "ensure_intervals", "import_benchmarks",
           "info", "ingest", "ingest_many", "map_benchmark_model", "refresh_findings", "models_overview", "publish", "pull",
           "remove", "version"]


def __getattr__(name: str):
    if name in ("IngestResult", "ModelFailure"):  # (the pipeline loads numpy and pyarrow: only when asked for)
        from qkdb import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'qkdb.api' has no attribute {name!r}")


def connect(home: str | os.PathLike | None = None, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to the warehouse catalog with every table and finding view ready.

    Parameters
    ----------
    home : path, optional
        Warehouse home; default ``$QKDB_HOME`` or the platform's user data dir.
    read_only : bool
        Open the catalog read-only (the default; many readers can share it).
    """
    return warehouse.open_catalog(warehouse.resolve_home(home), read_only=read_only)


def ensure_intervals(con: duckdb.DuckDBPyConnection) -> bool:
    """Recompute the findings' intervals for this connection if they do not match what it sees.

    They are computed whenever models are published, so this does nothing unless an ingest is
    still running or was interrupted, or the connection changed what the findings read (e.g. a
    params view of its own). Returns True when it recomputed them.
    """
    if warehouse.intervals_current(con):  # the common case, checked without loading numpy
        return False
    return warehouse.ensure_current(con)


def ingest(
    path: str | os.PathLike | None = None,
    model: str | None = None,
    *,
    options: IngestOptions | None = None,
    source: str | None = None,
    home: str | os.PathLike | None = None,
    progress: Progress | None = None,
    cluster: str | None = None,
    refresh_findings: bool = True,
    **option_values,
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
        dataset's ``qkdb_dataset.json`` (a local one, or the one at the root of the Hub branch
        ``revision`` names: a capture pushed by ``qkdb sniff --push-to-hub``).
    options : qkdb.ingest.IngestOptions, optional
        Every option of the ingest in one object (what the CLI passes).
    **option_values
        The same options by name, over ``options``: e.g. ``heads="0-3"``, ``gqa_ratio=4``,
        ``fit_rows=512``, ``drop_bad_vectors=True``, ``workers=2``, ``force=True``, ``repo=...``,
        ``revision=...``, ``cache_dir=...`` (the fields of :class:`qkdb.ingest.IngestOptions`,
        each documented there).
    source : str, optional
        What ``ingest_runs.source`` records (default: the source's kind, e.g. ``'path'``, ``'hub'``).
    home : path, optional
        Warehouse home (default ``$QKDB_HOME`` or the platform's user data dir).
    progress : callable, optional
        Called as ``progress(event, **info)`` ('start', 'download', 'head', 'publish', 'intervals',
        'done'; every event names its ``model``).
    cluster : str, optional
        Compute the model on a Ray cluster (extra ``cluster``): ``'local'`` (a Ray instance started
        in this process), ``'auto'``, ``'HOST:PORT'`` or ``'ray://HOST:PORT'``; the warehouse stays
        here. A ``path`` must exist on the worker's node. See :func:`ingest_many` and docs/cluster.md.
    refresh_findings : bool, default True
        Recompute the findings' intervals after the publish (seconds on a large warehouse). A batch
        of ingests passes False and calls :func:`refresh_findings` once at its end, as
        :func:`ingest_many` does; until then the findings read the old intervals as out of date.

    Returns
    -------
    IngestResult

    Raises
    ------
    TypeError
        An option name :class:`~qkdb.ingest.IngestOptions` does not have.
    qkdb.errors.QkdbError
        Bad input (an option out of range, a dataset that cannot be read, contradictory facts),
        the Hub, or the warehouse: one message saying what and where; the warehouse is unchanged.
    """
    from qkdb import pipeline
    from qkdb.ingest import IngestOptions

    try:
        options = (options or IngestOptions()).updated(**option_values) if option_values else (options or IngestOptions())
    except ValueError as exc:  # a parameter out of range is the caller's input, not a bug
        raise InputError(str(exc)) from None
    if path is None and not model and options.revision is None:
        raise UsageError("give --model NAME (ingested from the Hub), --path DIR (a local dataset), or --repo REPO "
                         "--revision BRANCH (a branch pushed by `qkdb sniff --push-to-hub`)")
    if cluster is not None:
        (result,) = ingest_many([(path, model)], options=options, source=source, home=home, progress=progress,
                                cluster=cluster)
        if isinstance(result, pipeline.ModelFailure):
            error = result.error
            raise type(error)(f"{result.model}: {error}", kind=error.kind) from error
        return result
    return pipeline.run(
        Path(path) if path is not None else None, model, options, kind=source,
        home=warehouse.resolve_home(home), progress=progress, refresh=refresh_findings,
    )


def ingest_many(
    targets: Iterable[tuple[str | os.PathLike | None, str | None]],
    *,
    cluster: str | None = None,
    options: IngestOptions | None = None,
    source: str | None = None,
    home: str | os.PathLike | None = None,
    progress: Progress | None = None,
    on_result: Callable[[IngestResult | ModelFailure], None] | None = None,
    **option_values,
) -> list[IngestResult | ModelFailure]:
    """Ingest several models, each published atomically on its own; only an unreachable Hub stops the batch, here.

    On this machine the models run one after the other. A failure of kind ``"network"`` (the Hub
    cannot be reached, or is offline without the files) stops the batch there: every later model
    would fail the same way, each after its own retries. The models after it are not attempted;
    each is returned as a :class:`ModelFailure` with ``attempted=False`` whose error (a
    :class:`~qkdb.errors.HubError` of kind ``"network"``) says so and names the model that could
    not reach the Hub. Any other failure is that model's alone and the batch goes on.

    On a cluster the tasks run side by side on nodes that reach the Hub each on their own: one
    node's network failure says nothing of the others', and the tasks already submitted run
    anyway, so every model is attempted and every failure reported.

    Parameters
    ----------
    targets : iterable of (path, model)
        One pair per model, as :func:`ingest` takes them: a local dataset (``path``, its model
        named by ``model`` or its ``qkdb_dataset.json``) or a model from the Hub (``path`` None).
    cluster : str, optional
        Run one Ray task per model on this cluster (``'local'``, ``'auto'``, ``'HOST:PORT'``,
        ``'ray://HOST:PORT'``; extra ``cluster``). Each task reads its source on its worker (the
        Hub into that node's HF cache; a ``path`` must exist on that node), computes the model's
        tables and returns them through Ray's object store; this process publishes each model as
        it arrives and records the address and Ray's version in ``ingest_runs``. Without it the
        models are ingested here one after the other, each with the local worker pool.
    options, source, home, progress, **option_values
        As for :func:`ingest`; ``progress`` also gets ``'cluster'`` events (``done``, ``failed``,
        ``total``, ``bytes_read``, ``bytes_received``) on a cluster.
    on_result : callable, optional
        Called with each model's :class:`IngestResult` or :class:`ModelFailure` as soon as it is
        known, before the next model starts here (on a cluster, as each task's result is published),
        then with each model not attempted.

    Returns
    -------
    list of IngestResult or ModelFailure
        One per target, in the order they finished, the models not attempted last; a
        :class:`ModelFailure` holds the model's name (its path when its name could not be read)
        and the error. Nothing of it was published. The findings' intervals are recomputed once,
        at the end of the batch (also when a model failed); a note saying why they could not be
        is added to the ``notes`` of every model the batch published.
    """
    from qkdb import pipeline
    from qkdb.ingest import IngestOptions

    try:
        options = (options or IngestOptions()).updated(**option_values) if option_values else (options or IngestOptions())
    except ValueError as exc:
        raise InputError(str(exc)) from None
    targets = [(Path(p) if p is not None else None, m) for p, m in targets]
    for p, m in targets:
        if p is None and not m:
            raise UsageError("give a model name (ingested from the Hub) or a path (a local dataset) for every model")
    on_result = on_result or (lambda outcome: None)
    if cluster is not None:
        return pipeline.run_on_cluster(targets, options, kind=source, home=warehouse.resolve_home(home),
                                       address=cluster, progress=progress, on_result=on_result)
    out: list = []
    try:
        for i, (p, m) in enumerate(targets):
            try:
                outcome = ingest(p, m, options=options, source=source, home=home, progress=progress,
                                 refresh_findings=False)
            except QkdbError as exc:
                outcome = pipeline.ModelFailure(m or str(p), exc)
            out.append(outcome)
            on_result(outcome)
            if isinstance(outcome, pipeline.ModelFailure) and outcome.error.kind == "network":
                for rest in _not_attempted(targets[i + 1:], outcome):
                    out.append(rest)
                    on_result(rest)
                break
    finally:  # (also on Ctrl-C: the models published so far are in the findings)
        published = [r for r in out if isinstance(r, pipeline.IngestResult) and not r.unchanged]
        if published:
            notes = refresh_findings(home)  # once for the batch, not once per model
            for r in published:
                r.notes.extend(notes)
    return out


def _not_attempted(targets: list, stop: ModelFailure) -> list[ModelFailure]:
    """The models after a network failure, as failures saying they were not attempted and why."""
    from qkdb.errors import HubError
    from qkdb.pipeline import ModelFailure

    why = f"not attempted: {stop.model} could not reach the Hub ({stop.error})"
    return [ModelFailure(m or str(p), HubError(why, kind="network"), attempted=False) for p, m in targets]


def refresh_findings(home: str | os.PathLike | None = None) -> list[str]:
    """Recompute the findings' intervals and stored rows for the warehouse as it is now.

    Every ingest and removal does it; call it after ingests made with ``refresh_findings=False``.
    Returns notes (empty when done; else why it could not be, the findings then recompute the
    intervals when they are next read).
    """
    from qkdb.pipeline import refresh_intervals

    return refresh_intervals(warehouse.resolve_home(home))


def remove(model: str, home: str | os.PathLike | None = None, wait: float = 0.0) -> bool:
    """Delete a model from the warehouse; False when it was not there."""
    from qkdb.pipeline import refresh_intervals

    store, home_dir = warehouse.store, warehouse.resolve_home(home)
    store.check_model_name(model)
    if not store.has_history(home_dir, model):
        return False
    lock = store.acquire_model(home_dir, model, wait)
    try:
        store.remove(home_dir, model)
    finally:
        lock.release()
    refresh_intervals(home_dir)
    return True


def info(home: str | os.PathLike | None = None) -> dict:
    """Facts about the warehouse: paths, sizes per table, models, library versions.

    Brings the catalog up to date first when there is one (a home copied or moved elsewhere gets
    views that read its own files).
    """
    import platform
    from importlib.metadata import version as dist_version

    import duckdb

    store, home_dir = warehouse.store, warehouse.resolve_home(home)
    sizes = store.table_bytes(home_dir)
    cat = warehouse.catalog_path(home_dir)
    if cat.exists():
        # A copied or moved home's catalog still names the old place: rebuilt here, so that plain
        # DuckDB reads this home's files after `qkdb info` (docs/sharing.md). A current one costs one read.
        warehouse.ensure_catalog(home_dir)
    models = store.ingested_models(home_dir)
    return {
        "home": str(home_dir),
        "catalog": str(cat),
        "catalog_bytes": cat.stat().st_size if cat.exists() else 0,
        "models": models,
        # model -> what changed in its RoPE facts and the command that recomputes it (none: {})
        "stale": {s.model: f"{s.change}; `{s.command}` recomputes it" for s in stale_models(home_dir)} if models else {},
        "table_bytes": sizes,
        "versions": {
            "qkdb": version(), "duckdb": duckdb.__version__, "pyarrow": dist_version("pyarrow"),
            # (from their metadata: importing them would cost `qkdb info` ~0.3 s)
            "numpy": dist_version("numpy"), "python": platform.python_version(),
        },
    }


def stale_models(home: str | os.PathLike | None = None, con: duckdb.DuckDBPyConnection | None = None) -> list:
    """Ingested models whose RoPE facts changed since their ingest (:mod:`qkdb.staleness`), with what recomputes each."""
    from qkdb.staleness import stale_models as find

    home_dir = warehouse.resolve_home(home)
    if con is not None:
        return find(con, home_dir)
    own = connect(home_dir)
    try:
        warehouse.snapshot_models(own, home_dir)  # (every model's row from one file)
        return find(own, home_dir)
    finally:
        own.close()


def layer_subset_notes(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per model whose ingested layers are a subset of its layers (view ``ingested_layers``).

    Its findings and their intervals are about those layers only; the line says which.
    """
    return [r[0] for r in con.execute("select note from ingested_layers where subset order by model").fetchall()]


def models_overview(home: str | os.PathLike | None = None) -> pa.Table:
    """The registry plus every ingested model, with whether and when each was ingested."""
    import pyarrow as pa

    return pa.Table.from_pylist(models_overview_rows(home))


def models_overview_rows(home: str | os.PathLike | None = None) -> list[dict]:
    """:func:`models_overview`'s rows as dicts (what ``qkdb models`` prints, without building Arrow arrays)."""
    from qkdb.ingest import registry

    home_dir = warehouse.resolve_home(home)
    ingested = warehouse.published_model_rows(home_dir)
    out = []
    for spec in registry.load_registry():
        row = ingested.pop(spec.model, None)
        if row is None:
            out.append(_overview_row(spec.model, spec.family, spec.n_layers, spec.n_q_heads, spec.n_kv_heads,
                                     spec.gqa_ratio, spec.head_dim, spec.rope_theta, spec.rope_scaling,
                                     spec.rope_scaling_source, spec.series, True, None))
            continue
        # An ingested model shows the facts it was ingested with (a simulation under a registry
        # name, a capture of another config); the registry's, where they differ, beside them.
        differ = [f"{f}={_fact(getattr(spec, f))}" for f in _OVERVIEW_FACTS
                  if getattr(spec, f) is not None and _fact(getattr(spec, f)) != _fact(row.get(f))]
        # The scaling's source is the registry's only where the ingested scaling is the registry's.
        same_scaling = _same_scaling(spec.rope_scaling, row.get("rope_scaling"))
        if not same_scaling:
            differ.append(f"rope_scaling={_fact(spec.rope_scaling) if spec.rope_scaling is not None else 'none'}")
        source = spec.rope_scaling_source if same_scaling else f"the dataset ({row.get('source') or 'ingested'})"
        out.append(_overview_row(spec.model, row["family"], row["n_layers"], row["n_q_heads"], row["n_kv_heads"],
                                 row["gqa_ratio"], row["head_dim"], row["rope_theta"], row.get("rope_scaling"),
                                 source, spec.series, True, row, ", ".join(differ) or None))
    for model, row in sorted(ingested.items()):
        out.append(_overview_row(model, row["family"], row["n_layers"], row["n_q_heads"], row["n_kv_heads"],
                                 row["gqa_ratio"], row["head_dim"], row["rope_theta"], row.get("rope_scaling"),
                                 None, row["series"], False, row))
    return out


_OVERVIEW_FACTS = ("family", "n_layers", "n_q_heads", "n_kv_heads", "gqa_ratio", "head_dim", "rope_theta")


def _same_scaling(a, b) -> bool:
    """Whether two RoPE scalings (dicts, JSON text or None) are the same."""
    import json

    def parsed(v):
        if isinstance(v, str):
            try:
                return json.loads(v)
            except ValueError:
                return v
        return v
    return parsed(a) == parsed(b)


def _fact(v):
    return f"{v:g}" if isinstance(v, float) else v


def _overview_row(model, family, n_layers, n_q, n_kv, gqa, head_dim, theta, scaling, scaling_source, series,
                  in_registry, row, registry_differs=None) -> dict:
    return {
        "model": model, "family": family, "n_layers": n_layers, "n_q_heads": n_q, "n_kv_heads": n_kv,
        "gqa_ratio": gqa, "head_dim": head_dim, "rope_theta": theta,
        # the registry's RoPE scaling as its seed capture ran it (the ingested one for other models)
        "rope_scaling": scaling, "rope_scaling_source": scaling_source, "series": series,
        "in_registry": in_registry, "ingested": row is not None,
        "heads": row["n_heads"] if row else None,
        "source": row["source"] if row else None,
        "ingested_at": row["ingested_at"] if row else None,
        # the registry's facts where the ingested model's differ (None: they agree, or not ingested)
        "registry_differs": registry_differs,
    }


def chart(name: str, con: duckdb.DuckDBPyConnection | None = None, *, home: str | os.PathLike | None = None, **options):
    """A seed figure as an Altair chart (names: ``qkdb chart --list``); displays inline in notebooks.

    ``con`` is a warehouse connection (default: a read-only one of ``home``, closed afterwards).
    The options are those of :func:`qkdb.charts.chart` (``models``, ``series``, ``head``, ``configure``).
    """
    from qkdb.charts import chart as build

    if con is not None:
        return build(name, con, **options)
    own = connect(home)
    try:
        return build(name, own, **options)
    finally:
        own.close()


def publish(repo: str, *, branch: str = "main", models: Iterable[str] | None = None, private: bool = False,
            prune: bool = False, force: bool = False, figures: bool = True, wait: float = 0.0,
            home: str | os.PathLike | None = None, endpoint: str | None = None, token: str | bool | None = None,
            progress: Progress | None = None):
    """Publish the warehouse's models to a Hugging Face dataset repo, in one commit (docs/sharing.md).

    Uploads the models' tables (never raw vectors: the warehouse has none), a manifest
    (``qkdb_warehouse.json``), the findings and a dataset card with a few figures. Files the branch
    already holds are not uploaded again: publishing unchanged models makes no commit.

    Parameters
    ----------
    repo : str
        ``owner/name`` of the dataset repo (made if it does not exist; ``private`` then).
    branch : str
        The branch to publish to (made from the default branch if it does not exist). It holds exactly
        the models published afterwards: models it held that are left out are refused unless ``prune``.
    models : iterable of str, optional
        Which models (default: every ingested model).
    force : bool
        Write over a branch that holds something other than a qkdb warehouse.
    figures : bool
        Render the card's figures.
    endpoint, token
        The Hub (default ``HF_ENDPOINT``) and the token (default the stored login or ``HF_TOKEN``; it
        needs write access).

    Returns
    -------
    qkdb.sharing.publish.Published
    """
    from qkdb.sharing.publish import publish as run

    return run(warehouse.resolve_home(home), repo, branch, models=list(models) if models else None, private=private,
               prune=prune, force=force, figures=figures, wait=wait, endpoint=endpoint, token=token, progress=progress)


def pull(repo: str, revision: str | None = None, *, models: Iterable[str] | None = None, force: bool = False,
         wait: float = 0.0, home: str | os.PathLike | None = None, endpoint: str | None = None,
         cache_dir: str | os.PathLike | None = None, token: str | bool | None = None,
         progress: Progress | None = None):
    """Add the models of a warehouse published with :func:`publish` to this warehouse (docs/sharing.md).

    Each model is added as an ingest adds one: atomically, under its lock; one already here with the
    same data is left as it is, one with other data is refused unless ``force``. Files come through
    the Hugging Face cache (``cache_dir``), so ``HF_HUB_OFFLINE=1`` works once they have been pulled.

    Parameters
    ----------
    repo : str
        ``owner/name`` of the dataset repo; ``revision`` a branch, tag or commit (default ``main``).
    models : iterable of str, optional
        Which of its models (default: all).

    Returns
    -------
    qkdb.sharing.pull.Pulled
        With ``findings_match`` telling whether the findings here are the publisher's, row for row
        (None when this warehouse holds other models than the published ones).
    """
    from qkdb.sharing.pull import pull as run

    return run(warehouse.resolve_home(home), repo, revision, models=list(models) if models else None, force=force,
               wait=wait, endpoint=endpoint, cache_dir=cache_dir, token=token, progress=progress)


def benchmarks_connection(home: str | os.PathLike | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only connection that sees the benchmark tables (the shipped scores need no import).

    A home without a catalog is not created: the connection is then an in-memory database with the
    shipped scores and the views (no model, nothing imported).
    """
    where = warehouse.resolve_home(home)
    if where.exists() and not where.is_dir():
        from qkdb.errors import WarehouseError

        raise WarehouseError(f"{where} is a file, not a warehouse home (--home or $QKDB_HOME)", kind="input")
    if not warehouse.catalog_path(where).is_file():
        return warehouse.benchmarks_memory_connection()
    warehouse.ensure_catalog(where)
    return warehouse.open_catalog(where, read_only=True)


def import_benchmarks(paths: Iterable[str | os.PathLike], home: str | os.PathLike | None = None) -> dict:
    """Import LongBench-Pro summaries (files or folders) and CSVs of ``benchmark_scores`` or ``benchmark_models``.

    Every file is read before anything is stored: a file that does not parse raises
    :class:`~qkdb.errors.InputError` naming it and the field, and the warehouse stays as it was.
    Rows replace stored rows of the same run (benchmark, model, mode, budget, k) or mapping
    (model, benchmark); importing a file again changes nothing. Returns what was read and stored.
    """
    scores, models, files = warehouse.read_benchmark_files(list(paths))
    if not files:
        raise UsageError("nothing to import: give LongBench-Pro summary files, folders of them, or CSV files")
    where = warehouse.resolve_home(home)
    warehouse.ensure_catalog(where)
    stored = warehouse.store_benchmarks(where, {"benchmark_scores": scores, "benchmark_models": models})
    notes = refresh_findings(where)
    con = benchmarks_connection(where)
    try:
        notes += warehouse.unmapped_notes(con, [(r["benchmark"], r["bench_model"]) for r in scores])
    finally:
        con.close()
    return {"files": files, "stored": stored, "notes": notes,
            "runs": sorted({(r["benchmark"], r["bench_model"], r["mode"]) for r in scores})}


def map_benchmark_model(model: str, bench_model: str, *, benchmark: str = "longbench-pro", match_kind: str,
                        note: str | None = None, home: str | os.PathLike | None = None) -> dict:
    """Say which benchmarked model a captured model stands for (a ``benchmark_models`` row; replaces one for the same model and benchmark).

    ``match_kind`` is 'exact' (the scored checkpoint is the captured one), 'base_vs_instruct' or 'other'.
    Raises :class:`~qkdb.errors.InputError` (not found) when ``bench_model`` has no scores on
    ``benchmark``, naming the close names; the notes say when ``model`` is not ingested and which
    mapping (the registry's or an earlier one) this replaces.
    """
    row = warehouse.benchmark_model_row(model, benchmark, bench_model, match_kind, note)
    where = warehouse.resolve_home(home)
    con = benchmarks_connection(where)
    try:
        # Refused before anything is written: a benchmarked model without scores (a typo) would
        # silently drop the captured model from every fit.
        said = warehouse.check_mapping(con, row)
    finally:
        con.close()
    warehouse.ensure_catalog(where)
    stored = warehouse.store_benchmarks(where, {"benchmark_models": [row]})
    return {"row": row, "stored": stored, "notes": said + refresh_findings(where)}

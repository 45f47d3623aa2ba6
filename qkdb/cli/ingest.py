"""`qkdb ingest`: compute the metrics of a dataset and publish them as a model."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, note
from qkdb.cli.progress import ingest_progress
from qkdb.errors import HubError, InputError, QkdbError, UsageError
from qkdb.ingest import FIT_ROWS, FREQUENCY_PAIRS, PLASTICITY_PAIRS, PLASTICITY_QUERIES, IngestOptions


def _count_or_all(text: str, flag: str, what: str, minimum: int) -> int | None:
    """A count option that also takes 'all' (None): --fit-rows, --plasticity-queries, --frequency-pairs."""
    if text.strip().lower() == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < minimum:
        raise InputError(f"{flag} takes a number of {what} (at least {minimum}) or 'all', not {text!r}")
    return n


def _parse_collage(text: Optional[str]) -> tuple[tuple[int, int], ...]:
    from qkdb.ingest import HeadSelection

    if not text:
        return ()
    sel = HeadSelection.parse(text)
    if sel.layers:
        raise InputError("--collage-heads takes heads like l03h07 (or 3.7), not layers")
    return tuple(sorted(sel.heads))


@app.command()
def ingest(
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", help="Registry name (from the Hub unless --path), or a new name (with --family, --gqa-ratio, --n-layers). Repeatable.")] = None,
    path: Annotated[Optional[list[Path]], typer.Option("--path", "-p", help="Local dataset root in the sniffed-qk layout. Repeatable: each is one model, named by its qkdb_dataset.json (or --model with one path).")] = None,
    series: Annotated[Optional[str], typer.Option("--series", help="Every checkpoint of a registry training series, from the Hub.")] = None,
    all_models: Annotated[bool, typer.Option("--all", help="Every registry model that has a branch on the Hub.")] = False,
    repo: Annotated[Optional[str], typer.Option("--repo", help="Hub dataset repo (default: the registry's, viktoroo/sniffed-qk).")] = None,
    revision: Annotated[Optional[str], typer.Option("--revision", help="Hub branch or commit (default: the model's registry branch). Alone (with --repo), a branch pushed by `qkdb sniff --push-to-hub`: its qkdb_dataset.json names the model.")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir", help="huggingface_hub cache (default: its own, shared with other HF tools).")] = None,
    heads: Annotated[Optional[str], typer.Option("--heads", help="Only these layers (0-3, 5) or heads (l03h07,l05h01).")] = None,
    family: Annotated[Optional[str], typer.Option(help="Model family (for models not in the registry).")] = None,
    gqa_ratio: Annotated[Optional[int], typer.Option("--gqa-ratio", help="Query heads per KV head.")] = None,
    n_layers: Annotated[Optional[int], typer.Option("--n-layers", help="Number of layers (for depth).")] = None,
    n_q_heads: Annotated[Optional[int], typer.Option("--n-q-heads", help="Query heads per layer.")] = None,
    n_kv_heads: Annotated[Optional[int], typer.Option("--n-kv-heads", help="KV heads per layer.")] = None,
    rope_theta: Annotated[Optional[float], typer.Option("--rope-theta", help="RoPE base (else the registry's; fitted when unknown). A capture's recorded frequencies win: an option that contradicts them is refused.")] = None,
    rope_pairing: Annotated[Optional[str], typer.Option("--rope-pairing", help="'half' (rotate-half, default) or 'interleaved'; must agree with a pairing the capture established.")] = None,
    rope_scaling: Annotated[Optional[str], typer.Option("--rope-scaling", help="RoPE scaling as transformers JSON, e.g. '{\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 8192}'.")] = None,
    trained_context: Annotated[Optional[int], typer.Option("--trained-context", help="The model's trained context in tokens (L_train of frequency_usage's critical plane; the original length for scaled RoPE). Default: the capture's config, the rope_scaling's original length, or the registry's.")] = None,
    max_vectors: Annotated[Optional[int], typer.Option("--max-vectors", help="Seeded subsample of at most N vectors per file.")] = None,
    components: Annotated[int, typer.Option("--components", help="Principal components stored per head.")] = 10,
    b_method: Annotated[str, typer.Option("--b-method", help="Axis b: 'eig' (seeds' code) or 'mean_diff' (thesis text).")] = "eig",
    points: Annotated[int, typer.Option("--points", help="Sampled points per kind and head for scatter figures.")] = 512,
    collage_heads: Annotated[Optional[str], typer.Option("--collage-heads", help="Extra heads (l03h07,…) whose complement scores are stored.")] = None,
    no_complement: Annotated[bool, typer.Option("--no-complement", help="Skip complement pairs and RoPE planes.")] = False,
    fit_rows: Annotated[str, typer.Option("--fit-rows", help="Vectors per head (seeded, Q and K in proportion) for the complement and RoPE-plane statistics, or 'all'. Fewer is faster and noisier.")] = str(FIT_ROWS),
    no_plasticity: Annotated[bool, typer.Option("--no-plasticity", help="Skip attention plasticity and the recency check (tables plasticity*, recency; docs/plasticity.md).")] = False,
    plasticity_pairs: Annotated[int, typer.Option("--plasticity-pairs", help="Key pairs drawn per position bin for plasticity.")] = PLASTICITY_PAIRS,
    frequency_pairs: Annotated[str, typer.Option("--frequency-pairs", help="Causal (t, s) pairs of one text per head for frequency_usage (seeded), or 'all'.")] = str(FREQUENCY_PAIRS),
    plasticity_queries: Annotated[str, typer.Option("--plasticity-queries", help="Queries per bin the empirical plasticity estimator compares with every pair (seeded), or 'all'. More is slower and less noisy.")] = str(PLASTICITY_QUERIES),
    seed: Annotated[int, typer.Option(help="Seed for subsampling and points.")] = 0,
    skip_bad_heads: Annotated[bool, typer.Option("--skip-bad-heads", help="Ingest the other heads when one is bad; record why.")] = False,
    drop_bad_vectors: Annotated[bool, typer.Option("--drop-bad-vectors", help="Drop rows whose vector holds NaN, ±inf or a value beyond ±65504 (counted in heads.n_dropped) instead of refusing the file.")] = False,
    workers: Annotated[Optional[int], typer.Option("--workers", "-j", help="Worker processes (default: cores); with --cluster local, the local Ray instance's CPUs.")] = None,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="Run one Ray task per model on a Ray cluster: 'local' (start one here), 'auto', HOST:PORT or ray://HOST:PORT (extra 'cluster'; docs/cluster.md). The warehouse stays on this machine.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Re-ingest even if these files were already ingested.")] = False,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for another ingest of the same model.")] = 0.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    home: HomeOption = None,
) -> None:
    """Ingest sniffed-qk data (a local folder or the Hugging Face Hub): compute every metric per head and publish each model atomically."""
    targets = _models_to_ingest(model, path, series, all_models, repo, cache_dir, revision)
    if cluster is not None:
        from qkdb.ingest import check_cluster_address

        cluster = check_cluster_address(cluster)
    try:
        options = IngestOptions(
            repo=repo, revision=revision, heads=heads, cache_dir=cache_dir, family=family, gqa_ratio=gqa_ratio,
            n_layers=n_layers, n_q_heads=n_q_heads, n_kv_heads=n_kv_heads, rope_theta=rope_theta,
            rope_pairing=rope_pairing, rope_scaling=rope_scaling, trained_context=trained_context,
            frequency_pairs=_count_or_all(frequency_pairs, "--frequency-pairs", "pairs", 1), max_vectors=max_vectors, n_components=components,
            b_method=b_method, points=points, collage=_parse_collage(collage_heads), complement=not no_complement,
            fit_rows=_count_or_all(fit_rows, "--fit-rows", "vectors", 2), seed=seed, skip_bad_heads=skip_bad_heads, plasticity=not no_plasticity,
            plasticity_pairs=plasticity_pairs, plasticity_queries=_count_or_all(plasticity_queries, "--plasticity-queries", "queries", 2),
            drop_bad_vectors=drop_bad_vectors, workers=workers, force=force, wait=wait,
        )
    except ValueError as exc:  # an option out of range is the user's input
        raise InputError(str(exc)) from None
    if len(targets) == 1 and cluster is None:
        with ingest_progress(quiet) as progress:
            result = api.ingest(*targets[0], options=options, home=home, progress=progress)
        _report(result)
        return
    # Several models (--series, --all, several --path), or any on a cluster: api.ingest_many's
    # policy (on this machine a Hub that cannot be reached stops the batch; on a cluster every
    # model is attempted), each model said as it finishes, the intervals refreshed once at the end.
    batch = _Batch(quiet, cluster is not None)
    try:
        with batch.display() as progress:
            api.ingest_many(targets, cluster=cluster, options=options, home=home, progress=progress,
                            on_result=batch.outcome)
    finally:  # (the refresh's notes, also when the batch ended on an interrupt)
        for line in batch.refresh_notes():
            note(f"note: {line}")
    if batch.stopped is not None:  # once, with the models left undone (those that failed before it too)
        undone = [n for n, _ in batch.failed] + [batch.stopped.model] + batch.not_attempted
        raise HubError(f"{batch.stopped.error}; not ingested: {', '.join(undone)}", kind="network")
    _fail_if(batch.failed, len(targets))


class _Batch:
    """The CLI's side of a batch of ingests: a progress display per model (one for the whole batch on a
    cluster, whose progress counts models) and each model's outcome said as soon as it is known."""

    def __init__(self, quiet: bool, on_cluster: bool) -> None:
        self.quiet, self.on_cluster = quiet, on_cluster
        self.failed: list[tuple[str, QkdbError]] = []
        self.stopped: api.ModelFailure | None = None  # the network failure that stopped the batch
        self.not_attempted: list[str] = []
        self._published: list[tuple[api.IngestResult, int]] = []  # (result, its notes already said)
        self._current = None  # this model's display (on one machine)
        self._progress = None

    @contextlib.contextmanager
    def display(self):
        if self.on_cluster:
            with ingest_progress(self.quiet) as progress:
                yield progress
            return
        try:
            yield self._event
        except BaseException as exc:  # (Ctrl-C: the display ends as a failed model's does)
            self._close(exc)
            raise
        self._close(None)

    def _event(self, event: str, **info) -> None:
        if self._current is None:  # a model's first event opens its display
            self._current = ingest_progress(self.quiet)
            self._progress = self._current.__enter__()
        self._progress(event, **info)

    def _close(self, error: BaseException | None) -> None:
        """End this model's display as its ingest ended (an error leaves no final progress lines)."""
        if self._current is not None:
            current, self._current = self._current, None
            current.__exit__(type(error) if error is not None else None, error, None)

    def outcome(self, outcome) -> None:
        if isinstance(outcome, api.ModelFailure):
            self._close(outcome.error)
            if not outcome.attempted:
                self.not_attempted.append(outcome.model)
            elif outcome.error.kind == "network" and not self.on_cluster:
                self.stopped = outcome  # (said once, at the end, with the models not ingested)
            else:
                note(f"error: {outcome.model}: {outcome.error}")
                self.failed.append((outcome.model, outcome.error))
            return
        self._close(None)
        _report(outcome)
        if not outcome.unchanged:
            self._published.append((outcome, len(outcome.notes)))

    def refresh_notes(self) -> list[str]:
        """The notes the batch's refresh of the findings' intervals added (the same on every model it published)."""
        if not self._published:
            return []
        result, said = self._published[-1]
        return result.notes[said:]


def _fail_if(failed: list[tuple[str, QkdbError]], total: int) -> None:
    """One error for the models that failed, of the first failure's kind (its exit code)."""
    if failed:
        raise QkdbError(
            f"{len(failed)} of {total} models failed: {', '.join(n for n, _ in failed)}", kind=failed[0][1].kind
        )


def _models_to_ingest(model, paths, series, all_models, repo, cache_dir, revision=None) -> list[tuple[Path | None, str | None]]:
    """(path, model name) per model to ingest: a None path is the Hub, a None name the dataset's own."""
    chosen = sum(bool(x) for x in (model, series, all_models))
    if chosen > 1:
        raise UsageError("give one of --model, --series or --all")
    paths = list(paths or [])
    if series or all_models:
        if paths:
            raise UsageError("--series and --all ingest from the Hub; use --model with --path")
        from qkdb.ingest import hub, registry

        if series:
            return [(None, s.model) for s in registry.series_models(series)]

        branches, _ = hub.list_branches(repo or hub.DEFAULT_REPO, cache_dir=cache_dir)
        return [(None, m) for m in hub.models_on_hub(branches)]
    if len(paths) > 1:
        if model:
            raise UsageError("with several --path, each dataset's qkdb_dataset.json names its model: --model goes with one --path")
        return [(p, None) for p in paths]
    if model:
        if paths and len(model) > 1:
            raise UsageError("one --model per --path")
        return [(paths[0] if paths else None, m) for m in model]
    if not paths:
        if revision is not None:  # a branch of its own: its qkdb_dataset.json (a pushed capture) names the model
            return [(None, None)]
        raise UsageError("give --model NAME (from the Hub), --path DIR, --series NAME or --all")
    return [(paths[0], None)]  # the dataset's qkdb_dataset.json names it


def _report(result: api.IngestResult) -> None:
    if result.unchanged:
        note(f"{result.model}: already ingested from these files with these parameters (use --force to redo)")
        return
    for line in result.notes:
        note(f"note: {line}")
    for head, reason in result.skipped:
        note(f"skipped {head}: {reason}")
    note(
        f"ingested {result.model}: {result.heads_done} heads"
        + (f", {result.heads_skipped} skipped" if result.heads_skipped else "")
        + f" in {result.seconds:.1f}s into {result.home}"
    )

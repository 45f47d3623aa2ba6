"""Planning and running an ingest: GQA groups of heads, each key file read once.

A :class:`HeadGroup` is one key head and the query heads that read it. Groups are consumed
lazily (a Hub source yields one as soon as its files are local), processed in worker processes
with one BLAS thread each, and their rows streamed to the caller: memory stays bounded by a few
groups whatever the model size.
"""

from __future__ import annotations

import functools
import math
import os
import random
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

from threadpoolctl import threadpool_limits

from qkdb.errors import QkdbError
from qkdb.ingest.engine.head import HeadContext, HeadRows, compute_head, prepare
from qkdb.ingest.engine.plane_layout import RopeLayout, layer_layout, trained_frequencies
from qkdb.ingest.engine.pre_rope import layer_rotation
from qkdb.ingest.sources.layout import read_head
from qkdb.ingest.sources.plan import HeadGroup
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.sources.registry import ModelSpec
from qkdb.ingest.engine.runtime import keep_freed_memory, mp_context, start_workers


@dataclass
class HeadOutcome:
    layer: int
    head: int
    rows: HeadRows | None = None
    error: str | None = None


def collage_heads(heads: list[tuple[int, int]], options: IngestOptions) -> set[tuple[int, int]]:
    """The heads whose complement scores go into `points`: the seeds' random.Random(42) sample plus any asked for."""
    chosen = set(random.Random(42).sample(sorted(heads), min(options.n_collage, len(heads))))
    return chosen | set(options.collage)


def _context(spec: ModelSpec, layer: int, head: int, kv_head: int, collage: bool, head_dim: int) -> HeadContext:
    n_layers = spec.n_layers or (layer + 1)
    depth = layer / (n_layers - 1) if n_layers > 1 else 0.0
    return HeadContext(
        layer=layer,
        head=head,
        kv_head=kv_head,
        depth=depth,
        depth_bin=min(9, int(math.floor(10 * depth))),
        is_nope=layer in spec.nope_layers or spec.rope == "none",
        collage=collage,
        rope_planes=spec.rope != "none",
        rope=_layer_layout(spec, layer, head_dim),
        context_length=spec.context_length,
        trained_context=spec.trained_context,
        omega_trained=_trained_frequencies(spec, layer, head_dim),
        input_kind=spec.input_kind,
        **_logits_of(spec, layer),
    )


def _logits_of(spec: ModelSpec, layer: int) -> dict:
    """The layer's scaling and softcap from the capture's normaliser record, when its logits can be taken."""
    for entry_layer, scaling, softcap in spec.attention_logits or ():
        if entry_layer == layer:
            return {"scaling": scaling, "softcap": softcap}
    return {}


@functools.lru_cache(maxsize=256)
def _layer_rotation(spec: ModelSpec, layer: int, head_dim: int):
    return layer_rotation(spec, layer, head_dim)


@functools.lru_cache(maxsize=256)
def _layer_layout(spec: ModelSpec, layer: int, head_dim: int) -> RopeLayout | None:
    return layer_layout(spec, layer, head_dim)  # once per layer and worker, not per head


@functools.lru_cache(maxsize=256)
def _trained_frequencies(spec: ModelSpec, layer: int, head_dim: int) -> tuple[float, ...] | None:
    return trained_frequencies(spec, layer, head_dim)


def process_group(
    group: HeadGroup, spec: ModelSpec, options: IngestOptions, collage: frozenset[tuple[int, int]]
) -> list[HeadOutcome]:
    """All query heads of one group: the key file is read and reduced to moments once."""
    try:
        data = read_head(group.key.path)
        rotate = _layer_rotation(spec, group.layer, data.vectors.shape[1]) if spec.pre_rope else None
        k = prepare(data, str(group.key.path), options, (group.layer, group.kv_head, 1), rotate, spec.sinks_below)
    except QkdbError as exc:
        return [HeadOutcome(q.layer, q.head, error=str(exc)) for q in group.queries]
    out = []
    for qf in group.queries:
        try:
            q = prepare(read_head(qf.path), str(qf.path), options, (qf.layer, qf.head, 0), rotate, spec.sinks_below)
            ctx = _context(spec, qf.layer, qf.head, group.kv_head, (qf.layer, qf.head) in collage, q.moments.d)
            out.append(HeadOutcome(qf.layer, qf.head, rows=compute_head(q, k, ctx, options)))
        except QkdbError as exc:
            out.append(HeadOutcome(qf.layer, qf.head, error=str(exc)))
    return out


def _init_worker() -> None:
    # First, so that a worker forked as the ingest dies does not linger. (Imported here: the
    # module belongs in the fork server and its workers, not in the ingest's own process.)
    from qkdb.ingest.engine.fork_server import bind_worker

    bind_worker()
    # Worker processes share the cores: one BLAS thread each avoids oversubscription. scipy is
    # imported first so that its own BLAS library is loaded, and limited, too.
    import scipy.linalg  # noqa: F401

    threadpool_limits(1)
    keep_freed_memory()


def _pool(workers: int) -> ProcessPoolExecutor:
    start_workers(workers)  # (normally already running: this makes sure it starts single-threaded)
    return ProcessPoolExecutor(workers, mp_context=mp_context(), initializer=_init_worker)


def run_groups(
    groups: Iterable[HeadGroup],
    spec: ModelSpec,
    options: IngestOptions,
    collage: set[tuple[int, int]],
    workers: int = 1,
) -> Iterator[HeadOutcome]:
    """Process groups (lazily consumed) and yield each head's outcome as it completes.

    With several workers the pool is started and the first groups are submitted before this
    returns, so that whatever the caller prepares next overlaps their work. Exhaust or ``close()``
    the iterator: closing it shuts the pool down.
    """
    frozen = frozenset(collage)
    if workers <= 1:
        return _in_process(groups, spec, options, frozen)
    outcomes = _in_pool(groups, spec, options, frozen, workers)
    next(outcomes)  # runs up to its first submissions
    return outcomes


def _in_process(groups, spec, options, frozen) -> Iterator[HeadOutcome]:
    # In this process too, one BLAS thread: on 128 × 128 matrices more threads only contend.
    # (Set once: each change costs ~2 ms; the caller's code between heads uses no BLAS.)
    import scipy.linalg  # noqa: F401  (load its BLAS so that the limit applies to it)

    with threadpool_limits(1):
        for group in groups:
            yield from process_group(group, spec, options, frozen)


def _in_pool(groups, spec, options, frozen, workers) -> Iterator[HeadOutcome | None]:
    """Yields None once the first groups are submitted, then every outcome."""
    in_flight: set[Future] = set()
    limit = 2 * workers  # bounded look-ahead keeps memory flat
    it = iter(groups)
    exhausted = False

    def fill() -> None:
        nonlocal exhausted
        while not exhausted and len(in_flight) < limit:
            try:
                group = next(it)
            except StopIteration:
                exhausted = True
                break
            in_flight.add(pool.submit(process_group, group, spec, options, frozen))

    with _pool(workers) as pool:
        try:
            fill()
            yield None
            while in_flight:
                done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield from fut.result()
                fill()
        finally:
            for fut in in_flight:  # closed early (an error, or the caller gave up): drop what waits
                fut.cancel()


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))

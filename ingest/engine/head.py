"""Every per-head computation: from one query file and its key file to warehouse rows."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from qkdb.errors import InputError
from qkdb.ingest.sources.layout import HeadData, screen_values, within_bound
from qkdb.ingest.metrics.attention_mass import bin_attention_mass, query_masses, text_attention_mass, text_extents
from qkdb.ingest.metrics.complement import complement_pairs
from qkdb.ingest.metrics.frequency_usage import frequency_usage
from qkdb.ingest.metrics.moments import Moments, moments, pool, t_is_constant
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.metrics.pca import combined_pca, qk_accuracy
from qkdb.ingest.metrics.plasticity import ESTIMATORS, KeyIndex, head_plasticity
from qkdb.ingest.metrics.points import sample_points
from qkdb.ingest.metrics.recency import KeyPrefix, head_recency
from qkdb.ingest.metrics.rope_planes import rope_planes, strongest_plane
from qkdb.ingest.metrics.rotation import planar_rotation
from qkdb.ingest.engine.plane_layout import RopeLayout


@dataclass
class KindData:
    """One file's vectors after validation and subsampling, with their moments."""

    data: HeadData
    moments: Moments
    source: str  # file path, for error messages
    bad_rows_dropped: int = 0  # rows dropped for values no head produces (drop_bad_vectors)
    texts: np.ndarray | None = None  # the distinct example ids of its vectors (None: the file has none)
    # Every row, the sink candidates a sampled capture kept (--keep-first) included: attention mass
    # reads these; None when ``data`` is every row already
    with_sinks: HeadData | None = None
    # What a key file's query heads share (GQA), built by the first that needs it: name -> object
    derived: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass
class HeadContext:
    """Facts about the head that do not come from its vectors."""

    layer: int
    head: int
    kv_head: int
    depth: float
    depth_bin: int
    is_nope: bool
    collage: bool  # store complement scores in `points`
    # False for a model without rotary embeddings: no frequencies exist, the RoPE-plane stage is skipped
    rope_planes: bool = True
    # The layer's RoPE layout (plane_layout.layer_layout); None: no RoPE planes for this head
    rope: RopeLayout | None = None
    # The context length L plasticity's bins divide (tokens); None: the head's largest position + 1
    context_length: int | None = None
    # L_train (tokens) and, where they are not the applied ones, the frequencies trained over it
    # (frequency_usage, SPEC §4.8); None: unknown / the applied ones
    trained_context: int | None = None
    omega_trained: tuple[float, ...] | None = None
    # The layer's attention scaling and logit softcap, when the capture's normaliser can be used with
    # the stored vectors (attention_mass); None: no attention mass for this head
    scaling: float | None = None
    softcap: float | None = None
    input_kind: str = "natural"  # what the captured texts were (capture.texts.kind)


@dataclass
class HeadRows:
    """Rows for each warehouse table produced by one head (column -> array or scalar)."""

    layer: int
    head: int
    tables: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # file -> rows dropped for values no head produces; the caller sums them into one message
    # (a key file serves several query heads: keyed by file, it is counted once)
    bad_rows_dropped: dict[str, int] = field(default_factory=dict)
    null_rows_dropped: dict[str, int] = field(default_factory=dict)  # file -> rows with a null vector or position


def prepare(data: HeadData, source: str, options: IngestOptions, rng_key: tuple[int, ...],
            rotate=None, sinks_below: int = 0) -> KindData:
    """Validate and subsample one file's vectors, then take their moments (once per file).

    ``rotate(vectors, positions)``, for a pre-RoPE capture (:mod:`.pre_rope`), turns the stored
    vectors into what attention received, after their values are screened and before anything is
    computed from them.

    Values no attention head produces (NaN, ±inf, beyond ±VALUE_BOUND) are refused with an
    :class:`InputError` naming the file, or their rows dropped with ``options.drop_bad_vectors``.
    A clean file costs no extra pass over its vectors: finite column sums from the reader prove its
    values finite, and its moments prove them within the bound (:func:`within_bound`); every row is
    tested only when one of these fails, or when a subsample's moments would not cover every row.
    """
    n = len(data.positions)
    subsample = options.max_vectors is not None and n > options.max_vectors
    dropped = 0
    if data.vector_sum is None or subsample or rotate is not None:
        data, dropped = screen_values(data, source, drop=options.drop_bad_vectors)
        n = len(data.positions)
        subsample = options.max_vectors is not None and n > options.max_vectors
    if subsample:
        rng = np.random.default_rng((options.seed, *rng_key))
        idx = np.sort(rng.choice(n, size=options.max_vectors, replace=False))
        data = HeadData(
            data.vectors[idx],
            data.positions[idx],
            None if data.example_id is None else data.example_id[idx],
            data.n_dropped,
            data.sliding_window,
            screened=data.screened,
            lse=None if data.lse is None else data.lse[idx],
        )
        n = options.max_vectors
    if rotate is not None:
        # (screened above: a rotation keeps values no head produces out, and the column sums are new)
        data = replace(data, vectors=rotate(data.vectors, data.positions), vector_sum=None)
    with_sinks = None
    if sinks_below > 0 and (data.positions < sinks_below).any():
        # A sampled capture kept positions 0..sinks_below-1 of every text for attention mass: its
        # position policy never drew them, and counted with the rest they would weigh a fifth of a
        # small capture's vectors (token 0's key an outlier among them). Every other metric reads the
        # policy's sample alone.
        with_sinks, data = data, _rows(data, data.positions >= sinks_below)
        n = len(data.positions)
    _check_enough(n, source, options)
    # Finite values too large for any head may still overflow their squares here; they then fail
    # within_bound and are found by screen_values. Nothing of that may reach the user as a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        m = moments(data.vectors, data.positions, total=data.vector_sum)
    if not data.screened and not within_bound(m.mean, m.cov, m.n):
        data, dropped = screen_values(data, source, drop=options.drop_bad_vectors)
        if dropped:
            _check_enough(len(data.positions), source, options)
            m = moments(data.vectors, data.positions)
    if t_is_constant(m):
        # The metrics would be NULL (SPEC §4), but a file whose positions never change is a broken
        # capture: say so rather than publish a head without any position signal.
        raise InputError(
            f"{source}: all {m.n} vectors have position {data.positions[0]:g}; nothing about position can be measured"
        )
    texts = None if data.example_id is None else np.unique(data.example_id)
    if with_sinks is not None and not with_sinks.screened:  # (the sink candidates pass the same screen)
        with_sinks, _ = screen_values(with_sinks, source, drop=options.drop_bad_vectors)
    return KindData(data, m, source, dropped, texts, with_sinks)


def _rows(data: HeadData, keep: np.ndarray) -> HeadData:
    """The rows ``keep`` selects (the column sums, true of every row, are not kept)."""
    return replace(data, vectors=data.vectors[keep], positions=data.positions[keep],
                   example_id=None if data.example_id is None else data.example_id[keep],
                   lse=None if data.lse is None else data.lse[keep], vector_sum=None)


def _check_enough(n: int, source: str, options: IngestOptions) -> None:
    if n < options.min_vectors:
        raise InputError(f"{source}: {n} usable vectors, fewer than the minimum {options.min_vectors}")


def compute_head(q: KindData, k: KindData, ctx: HeadContext, options: IngestOptions) -> HeadRows:
    """PCA, rotation (and the complement stage) of one query head and its key head."""
    if q.moments.d != k.moments.d:
        raise InputError(
            f"{q.source}: head_dim {q.moments.d} differs from its key head's {k.moments.d} ({k.source})"
        )
    rows = HeadRows(ctx.layer, ctx.head)
    rows.bad_rows_dropped = {kd.source: kd.bad_rows_dropped for kd in (q, k) if kd.bad_rows_dropped}
    rows.null_rows_dropped = {
        kd.source: kd.data.n_dropped - kd.bad_rows_dropped for kd in (q, k) if kd.data.n_dropped > kd.bad_rows_dropped
    }
    pca = combined_pca(q.moments, k.moments, options.n_components)
    rot = planar_rotation(q.moments, k.moments, options.b_method)
    if rot.note:
        rows.notes.append(f"l{ctx.layer:02d}h{ctx.head:02d}: {rot.note}; rotation metrics are NULL")

    Q, K = q.data.vectors, k.data.vectors
    # Q vs K separability on the first two canonical PCs.
    V2 = pca.components[:2]
    acc = qk_accuracy(Q, K, q.moments, k.moments, V2) if V2.shape[0] == 2 else np.nan

    t_all = np.concatenate([q.data.positions, k.data.positions])
    rows.tables["heads"] = {
        "layer": ctx.layer,
        "head": ctx.head,
        "kv_head": ctx.kv_head,
        "head_dim": q.moments.d,
        "n_q": q.moments.n,
        "n_k": k.moments.n,
        "n_dropped": q.data.n_dropped + k.data.n_dropped,
        "position_min": int(t_all.min()),
        "position_max": int(t_all.max()),
        "n_texts": None if q.texts is None or k.texts is None else int(np.union1d(q.texts, k.texts).size),
        "sliding_window": q.data.sliding_window,
        "depth": ctx.depth,
        "depth_bin": ctx.depth_bin,
        "is_nope": ctx.is_nope,
        **pca.head,
        "qk_accuracy_pc01": acc,
    }
    n_pc = len(pca.columns["pc"])
    rows.tables["pca"] = {"layer": np.full(n_pc, ctx.layer), "head": np.full(n_pc, ctx.head), **pca.columns}
    rows.tables["rotation"] = {
        "layer": ctx.layer,
        "head": ctx.head,
        **rot.columns,
        "b_method": options.b_method if rot.b is not None else None,
    }
    # Complement pairs, RoPE planes, omega and scatter points (SPEC §4.3–4.4).
    def stream(purpose: int) -> np.random.Generator:
        # One seeded stream per use: a head's sample does not depend on which stages ran.
        return np.random.default_rng((options.seed, purpose, ctx.layer, ctx.head))

    t_q, t_k = q.data.positions, k.data.positions
    d = q.moments.d
    scores_fn = None
    if options.complement:
        pooled = pool(q.moments, k.moments)
        rope = comp = None
        # (a model without RoPE: no rows, said once per model by the ingest, not once per head)
        if ctx.rope is not None:
            rope = rope_planes(
                Q, t_q, K, t_k, **ctx.rope.planes_kwargs(), max_fit=options.fit_rows, rng=stream(52),
                cov=pooled.cov,
            )
            rows.tables["rope_planes"] = {"layer": ctx.layer, "head": ctx.head, **rope}
            _frequency_usage(q, k, ctx, options, rope, rows, stream(55))
        elif ctx.rope_planes and d % 2:
            rows.notes.append(f"l{ctx.layer:02d}h{ctx.head:02d}: head_dim {d} is odd; no RoPE planes")
        if rot.a is not None and rot.b is not None:
            given = rope is not None and rope["omega_source"][0] == "given"
            comp, scores_fn = complement_pairs(
                Q, t_q, K, t_k, rot.a, rot.b, rope_omegas=rope["omega"] if given else None,
                max_fit=options.fit_rows, rng=stream(51), mu=pooled.mean, cov=pooled.cov, basis=rot.complement,
            )
            rows.tables["complement"] = {"layer": ctx.layer, "head": ctx.head, **comp}
        omega, omega_r2 = strongest_plane(
            rope, comp, n_q=len(t_q), n_k=len(t_k), position_range=float(t_all.max() - t_all.min()),
        )
        rows.tables["rotation"]["omega"] = omega
        rows.tables["rotation"]["omega_r_squared"] = omega_r2
    if options.plasticity:
        _plasticity(q, k, ctx, options, rot.columns.get("bias_strength"), rows, stream(54))
    _attention_mass(q, k, ctx, rows)
    if options.points:
        rows.tables["points"] = {
            "layer": ctx.layer,
            "head": ctx.head,
            **sample_points(
                Q, t_q, q.data.example_id, K, t_k, k.data.example_id, mu=pca.mean,
                pc0=pca.components[0], pc1=pca.components[1] if len(pca.components) > 1 else None,
                a=rot.a, b=rot.b, n=options.points, rng=stream(53),
                complement_scores_fn=scores_fn if ctx.collage else None,
            ),
        }
    return rows


def _frequency_usage(q: KindData, k: KindData, ctx: HeadContext, options: IngestOptions, rope: dict,
                     rows: HeadRows, rng: np.random.Generator) -> None:
    """Which planes the head's logits are built from (SPEC §4.8): RoPE layers only (a NoPE layer's
    planes do not turn, so their frequencies mean nothing there), over causal pairs of one text."""
    if ctx.is_nope:
        return
    if q.data.example_id is None or k.data.example_id is None:
        rows.notes.append(f"l{ctx.layer:02d}h{ctx.head:02d}: no example_id, so no texts: no frequency usage")
        return
    fitted = rope["omega_source"][0] == "fitted"
    got = frequency_usage(
        q.data.vectors, q.data.positions, q.data.example_id, k.data.vectors, k.data.positions, k.data.example_id,
        pairing=ctx.rope.pairing, rotary_dims=ctx.rope.dims, rotary_offset=ctx.rope.offset, omega=rope["omega"],
        radius_q=rope["radius_q"], radius_k=rope["radius_k"], omega_trained=ctx.omega_trained,
        # (fitted frequencies are 13-51% off below a turn: no critical plane from them)
        trained_context=None if fitted else ctx.trained_context, n_pairs=options.frequency_pairs, rng=rng,
    )
    if got is not None:
        rows.tables["frequency_usage"] = {"layer": ctx.layer, "head": ctx.head, **got}


def _attention_mass(q: KindData, k: KindData, ctx: HeadContext, rows: HeadRows) -> None:
    """Attention mass from the captured normaliser (docs/attention.md): only for a query file with ``lse``
    whose logits the stored vectors give (``ctx.scaling``), with the texts of its rows."""
    qd, kd = q.with_sinks or q.data, k.with_sinks or k.data  # (every row: the sink candidates too)
    if qd.lse is None or ctx.scaling is None or qd.example_id is None or kd.example_id is None:
        return
    per = query_masses(qd.vectors, qd.positions, qd.example_id, qd.lse, kd.vectors,
                       kd.positions, kd.example_id, scaling=ctx.scaling, softcap=ctx.softcap,
                       window=qd.sliding_window)
    # (how far each text reaches: a text shorter than its last position bin weighs only what it has)
    extent = text_extents([qd.example_id, kd.example_id], [qd.positions, kd.positions])
    got = bin_attention_mass(per, qd.positions, int(extent[1].max()))
    n = len(got["bin"])
    rows.tables["attention_mass"] = {"layer": np.full(n, ctx.layer), "head": np.full(n, ctx.head),
                                     "input_kind": ctx.input_kind, **got}
    texts = text_attention_mass(per["token0"], qd.positions, qd.example_id, extent=extent)
    n = len(texts["bin"])
    rows.tables["attention_mass_text"] = {"layer": np.full(n, ctx.layer), "head": np.full(n, ctx.head),
                                          "input_kind": ctx.input_kind, **texts}


def _plasticity(q: KindData, k: KindData, ctx: HeadContext, options: IngestOptions, bias_strength,
                rows: HeadRows, rng: np.random.Generator) -> None:
    """Plasticity (every estimator, by bin and in 2-D) and the recency check of one head (SPEC §4.5).

    Both need to know which text each vector comes from (a key pair is of one text; a query's
    slope is over its own text's keys): files without ``example_id`` get neither, said once per head.
    """
    if q.data.example_id is None or k.data.example_id is None:
        rows.notes.append(f"l{ctx.layer:02d}h{ctx.head:02d}: no example_id, so no texts: no plasticity or recency")
        return
    t_q, t_k = q.data.positions, k.data.positions
    length = ctx.context_length
    if length is None:
        length = int(max(t_q.max(), t_k.max())) + 1
    length = max(int(length), 10)
    if "key_index" not in k.derived:
        k.derived["key_index"] = KeyIndex.of(t_k, k.data.example_id)
    got = head_plasticity(q.data.vectors, t_q, k.data.vectors, t_k, k.data.example_id, length, rng,
                          window=q.data.sliding_window, max_pairs=options.plasticity_pairs,
                          max_queries=options.plasticity_queries, keys=k.derived["key_index"])
    n_est = len(ESTIMATORS)
    rows.tables["plasticity"] = {
        "layer": np.full(n_est, ctx.layer), "head": np.full(n_est, ctx.head), "estimator": list(ESTIMATORS),
        "context_length": np.full(n_est, length),
        **{c: np.array([got["summary"][e][c] for e in ESTIMATORS]) for c in
           ("ap_overall", "ap_first20", "ap_last20", "ap_drop", "ap_retention", "n_pairs")},
        "gauss_gap": np.full(n_est, got["gauss_gap"]), "notes": [got["notes"]] * n_est,
    }
    bins = got["bins"]
    n = len(bins) * n_est
    rows.tables["plasticity_profile"] = {
        "layer": np.full(n, ctx.layer), "head": np.full(n, ctx.head),
        "estimator": [e for e in ESTIMATORS for _ in bins],
        "bin_kind": [b.bin.kind for _ in ESTIMATORS for b in bins],
        "bin": np.array([b.bin.index for _ in ESTIMATORS for b in bins], np.int64),
        "lo": np.array([b.bin.lo for _ in ESTIMATORS for b in bins], np.int64),
        "hi": np.array([b.bin.hi for _ in ESTIMATORS for b in bins], np.int64),
        "tau": np.array([b.tau for _ in ESTIMATORS for b in bins], np.float64),
        "n_q": np.array([b.n_q for _ in ESTIMATORS for b in bins], np.int64),
        "n_pairs": np.array([b.n_pairs for _ in ESTIMATORS for b in bins], np.int64),
        "ap": np.array([b.ap[e] for e in ESTIMATORS for b in bins], np.float64),
    }
    cells = got["map"]
    rows.tables["plasticity_2d"] = {
        "layer": np.full(len(cells), ctx.layer), "head": np.full(len(cells), ctx.head),
        "key_distance_bin": np.array([c[0] for c in cells], np.int64),
        "query_distance_bin": np.array([c[1] for c in cells], np.int64),
        "n_pairs": np.array([c[2] for c in cells], np.int64), "ap": np.array([c[3] for c in cells], np.float64),
    }
    if "key_prefix" not in k.derived:
        k.derived["key_prefix"] = KeyPrefix.of(k.data.vectors, t_k, k.data.example_id)
    rec = head_recency(q.data.vectors, t_q, q.data.example_id, None, None, None,
                       None if bias_strength is None or not np.isfinite(bias_strength) else float(bias_strength),
                       keys=k.derived["key_prefix"])
    rows.tables["recency"] = {"layer": ctx.layer, "head": ctx.head, **rec}

"""Which RoPE frequencies a head's logits are built from (SPEC §4.8) — table ``frequency_usage``.

The logit of query ``t`` and key ``s`` (before the scale) is a sum over the head's 2-D RoPE planes,
``q·k = Σ_j c_j + c_rest`` with ``c_j = q^(j) · k^(j)``, plus the dot product of the dims RoPE leaves
alone (partial rotary). RoPE turns both halves of plane ``j`` by ``ω_j t`` and ``ω_j s``, so ``c_j``
sees ``ω_j (t − s)``, and a rotation of plane ``j`` shared by the query and the key leaves it as it
is. Barbero et al. (2025) read which planes carry the logits; Liu et al. (2023) name the plane that
does not finish a turn within the trained context (the critical dimension, here its plane).

Everything is over a seeded sample of causal pairs ``(t, s)``, ``s ≤ t``, drawn uniformly among the
pairs of one text the capture holds (every pair when there are fewer): one gather of the sampled
rows, then products summed per plane. float64 throughout.
"""

from __future__ import annotations

import math

import numpy as np

from qkdb.ingest.metrics.rope_planes import plane_coordinates

# Causal pairs per head (SPEC §4.8; IngestOptions.frequency_pairs's default, which the CLI reads without numpy)
PAIRS = 4096

PLANE_COLUMNS = (
    "j", "omega", "omega_trained", "logit_mean", "logit_abs", "logit_share", "bound_share", "turns_trained",
    "critical_plane", "low_band", "nonrotating_dims", "nonrotating_share", "low_band_share", "low_band_excess",
    "n_pairs", "trained_context",
)


def causal_pairs(t_q: np.ndarray, ex_q: np.ndarray, t_k: np.ndarray, ex_k: np.ndarray, n_pairs: int | None,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Row indices of a uniform sample of the causal pairs of one text: query ``i``, key ``k`` with
    ``ex_k[k] == ex_q[i]`` and ``t_k[k] <= t_q[i]``; every pair when there are at most ``n_pairs``
    (or ``n_pairs`` is None).

    Returns
    -------
    qi, ki : ndarray of int64
        The pairs' query and key rows, in the order of the query rows.
    total : int
        How many causal pairs there are in all.
    """
    t_q, t_k = np.asarray(t_q, np.int64), np.asarray(t_k, np.int64)
    ex_q, ex_k = np.asarray(ex_q), np.asarray(ex_k)
    empty = np.zeros(0, np.int64)
    if not len(t_q) or not len(t_k):
        return empty, empty, 0
    order = np.lexsort((t_k, ex_k))  # keys by text, then position
    texts, first, rank_k = np.unique(ex_k[order], return_index=True, return_inverse=True)
    rank_q = np.searchsorted(texts, ex_q)
    found = rank_q < len(texts)
    found[found] = texts[rank_q[found]] == ex_q[found]
    # One sorted key of (text, position): the keys a query sees are one run of the keys' order.
    lo = min(int(t_k.min()), int(t_q.min()))
    span = max(int(t_k.max()), int(t_q.max())) - lo + 1
    key_code = rank_k.astype(np.int64) * span + (t_k[order] - lo)
    query_code = np.where(found, rank_q, 0).astype(np.int64) * span + (t_q - lo)
    start = np.where(found, first[np.minimum(rank_q, len(texts) - 1)], 0).astype(np.int64)
    end = np.searchsorted(key_code, query_code, side="right")
    count = np.where(found, np.maximum(end - start, 0), 0).astype(np.int64)
    cum = np.cumsum(count)
    total = int(cum[-1])
    if total == 0:
        return empty, empty, 0
    if n_pairs is None or total <= n_pairs:
        picks = np.arange(total, dtype=np.int64)
    else:
        picks = np.sort(rng.choice(total, size=n_pairs, replace=False)).astype(np.int64)
    qi = np.searchsorted(cum, picks, side="right")
    ki = start[qi] + picks - (cum[qi] - count[qi])
    return qi.astype(np.int64), order[ki].astype(np.int64), total


def plane_logits(Q: np.ndarray, K: np.ndarray, qi: np.ndarray, ki: np.ndarray, *, pairing: str, rotary_dims: int,
                 rotary_offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's logit parts: ``c_j`` of every plane ``(pairs, r/2)`` and the non-rotating dims' ``(pairs,)``."""
    # One elementwise product of the gathered rows; each plane's part is the sum of its two columns.
    P = np.take(np.asarray(Q, dtype=np.float64), qi, axis=0)
    P *= np.take(np.asarray(K, dtype=np.float64), ki, axis=0)
    d, J = P.shape[1], rotary_dims // 2
    lo, hi = rotary_offset, rotary_offset + rotary_dims
    if pairing == "half":  # (views: the planes' coordinates are two runs of columns)
        c = P[:, lo:lo + J] + P[:, lo + J:hi]
    else:
        re, im = plane_coordinates(rotary_dims, pairing)
        c = P[:, re + lo] + P[:, im + lo]
    c_rest = P[:, :lo].sum(axis=1) + P[:, hi:].sum(axis=1) if rotary_dims < d else np.zeros(len(qi))
    return c, c_rest


def critical_plane(turns_trained: np.ndarray, omega: np.ndarray) -> int | None:
    """The first plane, in order of falling frequency, with less than one turn in the trained context (Liu et al.'s
    critical dimension / 2); None when every plane turns at least once (or nothing is known)."""
    below = np.flatnonzero(np.isfinite(turns_trained) & (turns_trained < 1.0))
    if not below.size:
        return None
    return int(below[np.argmax(omega[below])])


def frequency_usage(
    Q: np.ndarray,
    t_q: np.ndarray,
    ex_q: np.ndarray,
    K: np.ndarray,
    t_k: np.ndarray,
    ex_k: np.ndarray,
    *,
    pairing: str,
    rotary_dims: int,
    rotary_offset: int,
    omega: np.ndarray,
    radius_q: np.ndarray,
    radius_k: np.ndarray,
    omega_trained: np.ndarray | None = None,
    trained_context: int | None = None,
    n_pairs: int | None = PAIRS,
    rng: np.random.Generator,
) -> dict[str, np.ndarray] | None:
    """The ``frequency_usage`` rows of one head: one per RoPE plane ``j < r/2``.

    Parameters
    ----------
    Q, K : ndarray of shape (n_q, d), (n_k, d)
        Post-RoPE query vectors and the vectors of their key head.
    t_q, ex_q, t_k, ex_k : ndarray
        Token positions and text (example) ids of the rows.
    pairing, rotary_dims, rotary_offset
        The layer's RoPE layout (:func:`~qkdb.ingest.metrics.rope_planes.plane_coordinates`): planes cover
        dims ``[rotary_offset, rotary_offset + rotary_dims)``; the other dims are the non-rotating part.
    omega : ndarray of shape (r/2,)
        The planes' frequencies as applied (``rope_planes.omega``).
    radius_q, radius_k : ndarray of shape (r/2,)
        Mean ``|z|`` of each plane over Q and over K (``rope_planes``): ``bound_share``.
    omega_trained : ndarray of shape (r/2,), optional
        The frequencies the model was trained with over ``trained_context`` (the base ones for
        scaled RoPE); default ``omega``.
    trained_context : int, optional
        ``L_train`` in tokens; None: ``turns_trained``, ``critical_plane`` and the low band are NaN.
    n_pairs : int or None
        Causal pairs to sample (None: every pair).
    rng : numpy.random.Generator

    Returns
    -------
    dict or None
        The columns of :data:`PLANE_COLUMNS`, one entry per plane (the per-head and per-layer values
        repeated on each); None when the capture holds no causal pair.
    """
    qi, ki, total = causal_pairs(t_q, ex_q, t_k, ex_k, n_pairs, rng)
    if not len(qi):
        return None
    d = np.asarray(Q).shape[1]
    c, c_rest = plane_logits(Q, K, qi, ki, pairing=pairing, rotary_dims=rotary_dims, rotary_offset=rotary_offset)
    J = rotary_dims // 2
    n = len(qi)
    logit_mean = c.sum(axis=0) / n
    logit_abs = np.abs(c).sum(axis=0) / n
    rest_abs = float(np.abs(c_rest).sum() / n)
    whole = float(logit_abs.sum()) + rest_abs
    share = logit_abs / whole if whole > 0 else np.full(J, np.nan)
    rest_share = rest_abs / whole if whole > 0 else math.nan
    bound = np.asarray(radius_q, np.float64) * np.asarray(radius_k, np.float64)
    bound_share = bound / bound.sum() if np.isfinite(bound).all() and bound.sum() > 0 else np.full(J, np.nan)

    omega = np.asarray(omega, dtype=np.float64)
    trained = omega if omega_trained is None else np.asarray(omega_trained, dtype=np.float64)
    if trained_context is not None and trained_context > 0:
        turns = trained * float(trained_context) / (2.0 * math.pi)
    else:
        turns = np.full(J, np.nan)
    crit = critical_plane(turns, trained)
    low = np.isfinite(turns) & (turns < 1.0)
    if crit is None:
        low_share = low_excess = math.nan
    else:
        low_share = float(share[low].sum())
        # Every 2-D plane of the head alike, the non-rotating dims counted as (d - r)/2 planes: a
        # partial-rotary head's 96 plain dims weigh as 48 planes would, not as one.
        uniform = low.sum() / (d / 2.0)
        low_excess = low_share / uniform
    return {
        "j": np.arange(J, dtype=np.int32),
        "omega": omega,
        "omega_trained": trained,
        "logit_mean": logit_mean,
        "logit_abs": logit_abs,
        "logit_share": share,
        "bound_share": bound_share,
        "turns_trained": turns,
        "critical_plane": [None] * J if crit is None else np.full(J, crit, dtype=np.int32),
        "low_band": low,
        "nonrotating_dims": np.full(J, d - rotary_dims, dtype=np.int32),
        "nonrotating_share": np.full(J, rest_share),
        "low_band_share": np.full(J, low_share),
        "low_band_excess": np.full(J, low_excess),
        "n_pairs": np.full(J, n, dtype=np.int64),
        "trained_context": [None] * J if trained_context is None else np.full(J, int(trained_context), dtype=np.int64),
    }

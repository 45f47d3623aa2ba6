"""A seeded sample of each head's vectors, projected for scatter figures (SPEC §4.4) — table ``points``.

Figures render from the warehouse alone, never from raw vectors: per head up to ``n`` query and
``n`` key vectors are drawn without replacement (the same generator state gives the same sample)
and stored with their canonical PC0/PC1 projections (pooled mean removed), their raw coordinates
on the drift and separation axes a and b, and, for the collage heads, their complement SVD scores.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

N_SCORES = 60  # c0 … c59: 30 complement pairs


def sample_indices(n_rows: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of ``min(n, n_rows)`` rows drawn without replacement."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n >= n_rows:
        return np.arange(n_rows)
    return np.sort(rng.choice(n_rows, size=n, replace=False))


def sample_points(
    Q: np.ndarray,
    t_q: np.ndarray,
    ex_q: np.ndarray | None,
    K: np.ndarray,
    t_k: np.ndarray,
    ex_k: np.ndarray | None,
    *,
    mu: np.ndarray,
    pc0: np.ndarray,
    pc1: np.ndarray | None,
    a: np.ndarray | None,
    b: np.ndarray | None,
    n: int = 512,
    rng: np.random.Generator,
    complement_scores_fn: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The ``points`` rows of one head: its query sample first, then its key sample.

    Parameters
    ----------
    Q, K : ndarray of shape (n_q, d), (n_k, d)
    t_q, t_k : ndarray
        Token positions.
    ex_q, ex_k : ndarray or None
        Example ids (None when the files have none: stored as NULL).
    mu : ndarray of shape (d,)
        Pooled mean of ``[Q; K]`` (removed before projecting on the PCs).
    pc0, pc1 : ndarray of shape (d,)
        Canonical (sign-fixed) principal directions; ``pc1`` None when d = 1.
    a, b : ndarray of shape (d,) or None
        Drift and separation axes; None when the head's rotation metrics are undefined.
    n : int
        Vectors sampled per kind (all of them when a kind has fewer).
    rng : numpy.random.Generator
        Draws the sample: the query indices first, then the key indices.
    complement_scores_fn : callable, optional
        ``X → (m, 2·pairs)`` complement scores (from :func:`~qkdb.ingest.metrics.complement.complement_pairs`);
        fills ``c0 …``; columns it does not fill are left out (stored as NULL). None leaves them all out.
    """
    Q = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    iq = sample_indices(Q.shape[0], n, rng)
    ik = sample_indices(K.shape[0], n, rng)
    X = np.concatenate([Q[iq], K[ik]])
    m = X.shape[0]
    m_q = len(iq)

    def ids(ex, idx):
        if ex is None:  # the file has no example_id column: NULL
            return np.full(len(idx), None, dtype=object)
        return np.asarray(ex)[idx].astype(np.int32)

    ex = [ids(ex_q, iq), ids(ex_k, ik)]
    if any(e.dtype == object for e in ex):
        ex = [e.astype(object) for e in ex]
    example_id = np.concatenate(ex)

    def raw(v):
        return X @ np.asarray(v, dtype=np.float64) if v is not None else np.full(m, np.nan)

    centred = X - np.asarray(mu, dtype=np.float64)
    cols: dict[str, np.ndarray] = {
        "idx": np.arange(m, dtype=np.int32),
        "kind": np.array(["q"] * m_q + ["k"] * (m - m_q), dtype=object),
        "position": np.concatenate([np.asarray(t_q)[iq], np.asarray(t_k)[ik]]).astype(np.int64),
        "example_id": example_id,
        "pc0": centred @ np.asarray(pc0, dtype=np.float64),
        "pc1": centred @ np.asarray(pc1, dtype=np.float64) if pc1 is not None else np.full(m, np.nan),
        "a": raw(a),
        "b": raw(b),
    }
    scores = np.asarray(complement_scores_fn(X), dtype=np.float64) if complement_scores_fn is not None else None
    # Absent score columns are left out, not NaN-filled: the table writer stores them as NULL,
    # and a worker sends back a tenth of the bytes for the (many) non-collage heads.
    if scores is not None:
        for i in range(min(N_SCORES, scores.shape[1])):
            cols[f"c{i}"] = scores[:, i]
    return cols

"""SVD pairs of the complement of {a, b} (seed 002 Finding 4, SPEC §4.3) — table ``complement``.

The drift lemma leaves no *linear* position signal outside the {a, b} plane, but RoPE turns
pairs of coordinates by ``ω·t``: in the centred complement ``Z = (X − μ)B`` those show up as rings
whose angle ``θ = atan2(s_{2i+1}, s_{2i})`` turns with position. Pair ``i`` is the scores on the
SVD components ``2i`` and ``2i+1`` of Z. Their right singular vectors are the eigenvectors of
``BᵀCB`` ((d−2)², cheap) for the pooled covariance C — no SVD of the N × (d−2) matrix is needed.

Per-vector statistics (angle_r, ring, omega, the test, qk_accuracy) are computed on a seeded
subsample of at most ``max_fit`` pooled rows, split between Q and K in proportion; var_frac is exact.

``active`` is a significance test, not a threshold: H0 says a pair's phase is independent of
position; the statistic (:func:`~qkdb.ingest.metrics.circular.phase_statistic`) is taken at the searched
``omega``, its p-value pays for the search, and Holm's procedure over the head's pairs keeps the
family-wise error rate at :data:`~qkdb.ingest.metrics.circular.PLANE_ALPHA` (docs/rotation-planes.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkdb.ingest.metrics.circular import (
    PLANE_ALPHA,
    best_on_grid,
    circular_linear_r,
    combine_kinds,
    fit_frequency,
    head_arrays,
    holm,
    phase_statistic,
    phasors,
    position_quantum,
    search_p_value,
)
from qkdb.ingest.metrics.rotation import complement_basis

MAX_PAIRS = 30  # the seeds' complement collage shows 30 pairs (5 × 6)
# Pooled rows for the per-vector statistics: ~1,000 per kind puts the noise floor of a coherence
# at ~0.03 and keeps these stages about as costly as reading a head.
MAX_FIT = 2048
LOG_GRID = 16  # log-spaced frequencies added to the RoPE frequencies when those are known

COLUMNS = (
    "pair", "var_frac", "angle_r", "ring", "omega", "omega_r_squared", "qk_accuracy",
    "statistic", "p_value", "p_adjusted", "active",
)


def n_complement_pairs(d: int, n_pairs: int | None = None) -> int:
    """Number of complement pairs of a head of dimension ``d``: ``min(30, (d − 2) // 2)`` by default."""
    available = max(0, (d - 2) // 2)
    if n_pairs is None:
        return min(MAX_PAIRS, available)
    if n_pairs < 0:
        raise ValueError(f"n_pairs must be >= 0, got {n_pairs}")
    return min(n_pairs, available)


def fit_subsample(n_q: int, n_k: int, max_fit: int | None, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sorted row indices of a seeded subsample of at most ``max_fit`` pooled rows.

    Q and K keep their proportions (each kind keeps at least one row when it has any); with
    ``max_fit`` None or ≥ N every row is used and ``rng`` is not consumed.
    """
    n = n_q + n_k
    if max_fit is None or max_fit >= n:
        return np.arange(n_q), np.arange(n_k)
    if max_fit < 2:
        raise ValueError(f"max_fit must be >= 2, got {max_fit}")
    m_q = int(round(max_fit * n_q / n))
    m_q = min(n_q, max(m_q, 1 if n_q else 0, max_fit - n_k))
    m_k = min(n_k, max_fit - m_q)
    iq = np.sort(rng.choice(n_q, size=m_q, replace=False)) if m_q < n_q else np.arange(n_q)
    ik = np.sort(rng.choice(n_k, size=m_k, replace=False)) if m_k < n_k else np.arange(n_k)
    return iq, ik


def lda_balanced_accuracy_2d(xq: np.ndarray, yq: np.ndarray, xk: np.ndarray, yk: np.ndarray) -> np.ndarray:
    """Balanced training accuracy of a Q-vs-K linear discriminant, for many 2-D projections at once.

    The model of ``qkdb.ingest.metrics.pca.qk_accuracy`` (sklearn's ``LinearDiscriminantAnalysis``
    with class-frequency priors and the frequency-weighted within-class covariance, as its 'lsqr'
    and 'eigen' solvers use) in closed form, one column per projection plane.

    Parameters
    ----------
    xq, yq : ndarray of shape (n_q, m)
        The two coordinates of the query rows in each of m planes.
    xk, yk : ndarray of shape (n_k, m)
        The same for the key rows.

    Returns
    -------
    ndarray of shape (m,)
    """
    n_q, n_k = xq.shape[0], xk.shape[0]
    m = xq.shape[1]
    if n_q == 0 or n_k == 0:
        return np.full(m, np.nan)
    n = n_q + n_k
    mxq, myq, mxk, myk = xq.mean(0), yq.mean(0), xk.mean(0), yk.mean(0)

    def scatter(u, mu_u, v, mu_v, k):
        return np.einsum("ij,ij->j", u, v) - k * mu_u * mu_v

    sxx = (scatter(xq, mxq, xq, mxq, n_q) + scatter(xk, mxk, xk, mxk, n_k)) / n
    syy = (scatter(yq, myq, yq, myq, n_q) + scatter(yk, myk, yk, myk, n_k)) / n
    sxy = (scatter(xq, mxq, yq, myq, n_q) + scatter(xk, mxk, yk, myk, n_k)) / n
    dx, dy = mxq - mxk, myq - myk
    det = sxx * syy - sxy * sxy
    regular = det > 1e-12 * np.maximum(sxx * syy, np.finfo(float).tiny)
    safe = np.where(regular, det, 1.0)
    wx = np.where(regular, (syy * dx - sxy * dy) / safe, 0.0)
    wy = np.where(regular, (sxx * dy - sxy * dx) / safe, 0.0)
    if not regular.all():
        # A plane where the classes have no spread in some direction: pseudo-inverse, as sklearn.
        S = np.stack([np.stack([sxx, sxy], -1), np.stack([sxy, syy], -1)], -2)[~regular]
        w = np.einsum("mij,mj->mi", np.linalg.pinv(S, hermitian=True), np.stack([dx, dy], -1)[~regular])
        wx[~regular], wy[~regular] = w[:, 0], w[:, 1]
    bias = -0.5 * ((mxq + mxk) * wx + (myq + myk) * wy) + math.log(n_q / n_k)
    tpr_q = np.mean(xq * wx + yq * wy + bias > 0, axis=0)
    tpr_k = np.mean(xk * wx + yk * wy + bias <= 0, axis=0)
    return 0.5 * (tpr_q + tpr_k)


def _canonical_signs(W: np.ndarray) -> np.ndarray:
    """Flip each column so that its largest-magnitude entry is positive (SVD signs are arbitrary)."""
    if W.shape[1] == 0:
        return W
    top = W[np.argmax(np.abs(W), axis=0), np.arange(W.shape[1])]
    return W * np.where(top < 0, -1.0, 1.0)


def _phase_lock(uq, tq, uk, tk, span: float, omega_grid, rope_omegas):
    """Each pair's frequency of strongest phase lock (ω, ρ²) and the test of its phase–position relation.

    Returns ``|ω|``, ``ρ²(ω)``, the test statistic and its p-value, paid for the search (Bonferroni
    over a grid's frequencies, Davies' bound over the periodogram's band).
    """
    t = np.concatenate([tq, tk])
    if omega_grid is None and rope_omegas is not None and span > 0:
        # RoPE known: a ring in the complement turns at RoPE's frequencies, so evaluating exactly
        # there (plus a log grid from a quarter turn over the data to π for anything slow) finds
        # the maximum at a fraction of the cost of the exhaustive periodogram.
        slow = np.geomspace(0.5 * math.pi / span, math.pi, LOG_GRID)
        omega_grid = np.concatenate([np.asarray(rope_omegas, dtype=np.float64).reshape(-1), slow])
    sd_t = max(float(np.std(tq)) if len(tq) else 0.0, float(np.std(tk)) if len(tk) else 0.0)
    # The test at the searched frequency, in its searched sense (an SVD pair's orientation is
    # arbitrary; the sense that maximised ρ² is the one the search looked at).
    if omega_grid is not None:
        grid = np.asarray(omega_grid, dtype=np.float64).reshape(-1)
        omega, r2_best, T_q, T_k = best_on_grid(uq, tq, uk, tk, grid, signed=True, statistic=True)
        n_freq = int(np.unique(np.concatenate([grid, -grid])).size)
        band = 2.0 * float(np.abs(grid).max(initial=0.0))
    else:
        omega, r2_best = fit_frequency(uq, tq, uk, tk, signed=True)
        w = np.nan_to_num(omega, nan=0.0)
        t0 = float(t.min()) if len(t) else 0.0
        T_q = phase_statistic(uq, phasors(w, tq - t0), tq)
        T_k = phase_statistic(uk, phasors(w, tk - t0), tk)
        n_freq = None
        band = 2.0 * min(math.pi, math.pi / position_quantum(t)) if len(t) else 0.0
    statistic, df = combine_kinds(T_q, T_k)
    p_value = search_p_value(statistic, df, n_frequencies=n_freq, bandwidth=band * sd_t)
    return np.abs(omega), r2_best, statistic, p_value


def complement_pairs(
    Q: np.ndarray,
    t_q: np.ndarray,
    K: np.ndarray,
    t_k: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_pairs: int | None = None,
    max_fit: int | None = MAX_FIT,
    omega_grid: np.ndarray | None = None,
    rope_omegas: np.ndarray | None = None,
    rng: np.random.Generator,
    mu: np.ndarray | None = None,
    cov: np.ndarray | None = None,
    basis: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """The ``complement`` rows of one head and the function giving its complement scores.

    Parameters
    ----------
    Q, K : ndarray of shape (n_q, d), (n_k, d)
        Query vectors and the vectors of the key head mapped to them.
    t_q, t_k : ndarray
        Their token positions.
    a, b : ndarray of shape (d,)
        The head's drift and separation axes (orthonormal).
    n_pairs : int, optional
        Pairs to report; default ``min(30, (d − 2) // 2)`` (capped at that maximum).
    max_fit : int or None
        Pooled rows used for the per-vector statistics (seeded subsample); None uses all.
    omega_grid : ndarray, optional
        Explicit frequencies (rad/token, ≥ 0; both senses are tried) to search, evaluated exactly.
    rope_omegas : ndarray, optional
        The model's RoPE frequencies. Given, the search is these frequencies plus 16 log-spaced
        ones from a quarter turn over the positions to π; otherwise (RoPE unknown) it is the
        exhaustive periodogram of [0, π] with a local polish (:func:`~qkdb.ingest.metrics.circular.fit_frequency`).
    rng : numpy.random.Generator
        Draws the subsample.
    mu, cov : ndarray, optional
        Pooled mean and population covariance of ``[Q; K]`` (computed when not given).
    basis : ndarray of shape (d, d − 2), optional
        Orthonormal basis of {a, b}^⊥ (computed when not given).

    Returns
    -------
    columns : dict
        pair, var_frac, angle_r, ring, omega, omega_r_squared, qk_accuracy, statistic, p_value,
        p_adjusted, active — one entry per pair. ``statistic`` is ``T_q + T_k`` at ``omega`` (the
        searched sense of rotation), ``p_value`` its χ² p-value times the search's price (Bonferroni
        over a grid's signed frequencies, or Davies' bound over the periodogram's band),
        ``p_adjusted`` Holm's over the head's pairs; ``active`` is ``p_adjusted < PLANE_ALPHA``.
    scores_fn : callable
        ``scores_fn(X)`` → (n, 2·pairs) complement SVD scores ``(X − μ) B V`` of any vectors X
        (the ``c0 … c59`` of the ``points`` table).
    """
    Q, t_q, K, t_k = head_arrays(Q, t_q, K, t_k)
    (n_q, d), n_k = Q.shape, K.shape[0]
    n = n_q + n_k
    if mu is None or cov is None:
        X = np.concatenate([Q, K])
        mu = X.mean(axis=0) if mu is None else mu
        if cov is None:
            Xc = X - mu
            cov = Xc.T @ Xc / n
    B = complement_basis(np.asarray(a, float), np.asarray(b, float)) if basis is None else basis
    P = n_complement_pairs(d, n_pairs)

    G = B.T @ cov @ B
    G = 0.5 * (G + G.T)
    lam, V = np.linalg.eigh(G)
    order = np.argsort(lam)[::-1]
    lam = np.clip(lam[order], 0.0, None)
    W = _canonical_signs(B @ V[:, order[: 2 * P]])  # (d, 2P) unit directions in R^d
    mu = np.asarray(mu, dtype=np.float64)
    shift = mu @ W

    def scores_fn(X: np.ndarray) -> np.ndarray:
        return np.asarray(X, dtype=np.float64) @ W - shift

    total = float(lam.sum())
    pair = np.arange(P, dtype=np.int32)
    var_frac = (lam[0 : 2 * P : 2] + lam[1 : 2 * P : 2]) / total if total > 0 else np.full(P, np.nan)
    if P == 0:
        empty = np.zeros(0)
        cols = {c: empty for c in COLUMNS}
        cols["pair"] = pair
        cols["active"] = np.zeros(0, dtype=bool)
        return cols, scores_fn

    # Scores of the subsample, even and odd components in separate contiguous blocks.
    iq, ik = fit_subsample(n_q, n_k, max_fit, rng)
    W2 = np.concatenate([W[:, 0::2], W[:, 1::2]], axis=1)
    shift2 = mu @ W2
    # Each kind's product written straight into one array: stacking the gathered rows first
    # copied them once more, at about the cost of the product.
    S = np.empty((len(iq) + len(ik), W2.shape[1]))
    np.matmul(Q[iq], W2, out=S[: len(iq)])
    np.matmul(K[ik], W2, out=S[len(iq) :])
    S -= shift2
    x, y = np.ascontiguousarray(S[:, :P]), np.ascontiguousarray(S[:, P:])
    t = np.concatenate([t_q[iq], t_k[ik]])
    m_q = len(iq)

    r2 = x * x + y * y
    r = np.sqrt(r2)
    inv = np.divide(1.0, r, out=np.zeros_like(r), where=r > 0)
    cos_t, sin_t = x * inv, y * inv
    mean_r, mean_r2 = r.mean(axis=0), r2.mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        # 1 − var(r)/E[r²] = E[r]²/E[r²]
        ring = np.where(mean_r2 > 0, mean_r * mean_r / mean_r2, np.nan)
    angle_r = circular_linear_r(cos_t, sin_t, t)

    u = np.empty(cos_t.shape, dtype=np.complex128)  # (cos + i·sin without complex temporaries)
    u.real, u.imag = cos_t, sin_t
    uq, uk, tq, tk = u[:m_q], u[m_q:], t[:m_q], t[m_q:]
    t_all = np.concatenate([t_q, t_k])
    span = float(t_all.max() - t_all.min()) if len(t_all) else 0.0
    omega, r2_best, statistic, p_value = _phase_lock(uq, tq, uk, tk, span, omega_grid, rope_omegas)
    p_adjusted = holm(p_value)

    acc = lda_balanced_accuracy_2d(x[:m_q], y[:m_q], x[m_q:], y[m_q:])

    cols = {
        "pair": pair,
        "var_frac": var_frac,
        "angle_r": angle_r,
        "ring": ring,
        "omega": omega,
        "omega_r_squared": r2_best,
        "qk_accuracy": acc,
        "statistic": statistic,
        "p_value": p_value,
        "p_adjusted": p_adjusted,
        "active": np.nan_to_num(p_adjusted, nan=1.0) < PLANE_ALPHA,
    }
    return cols, scores_fn

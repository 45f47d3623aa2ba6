"""Attention plasticity (SPEC §4.5): whether the query decides which of two earlier keys wins.

Keys are fixed by the prefix, the query is a random variable. For a key pair ``(k_a, k_c)`` of one
text, both before the query, ``p = Pr_q[qᵀk_a > qᵀk_c]`` and the pair's plasticity is
``PP = 4p(1 − p)``: 1 when the query decides (a coin flip over queries), 0 when position (or
anything the query does not change) decides. ``AP_b`` is the mean ``PP`` over the key pairs
admissible for the queries of a position bin ``b``.

Bins (:func:`context_bins`): deciles of ``[0, L)`` and length bins ``(L_k/2, L_k]`` tokens of
context, ``L_k = 1024·2^k ≤ L`` (the first ``[1, 1024]``), ``L`` the context length. A query at
position ``t`` attends to ``t + 1`` tokens: its length bin is the one holding ``t + 1``.

Admissible pairs for bin ``b`` (:func:`draw_pairs`): two keys of one text, at positions before
the bin's lowest query position (so no query of the bin could not see them: causal), and for a
sliding-window layer within the window of the bin's mean query position ``τ_b`` (in tokens). Up
to ``max_pairs`` are drawn uniformly among all such pairs, without replacement (a text with
probability ∝ C(m_e, 2), then a uniform pair within it), seeded.

Three estimators of ``p`` per pair ``δ = k_a − k_c`` (:data:`ESTIMATORS`):

* ``empirical`` (model-free, the primary one): the share of the bin's queries with ``qᵀδ > 0``
  (ties count ½), and ``PP = 4p̂(1 − p̂)·n/(n − 1)``, unbiased for ``4p(1 − p)``. Unchanged by any
  positive per-query scale and any orthogonal map applied to Q and K alike.
* ``gaussian``: the bin's queries as a Gaussian with their mean and Ledoit–Wolf-shrunk
  covariance, ``p = Φ(δᵀμ / √(δᵀΣδ))``. Orthogonally invariant.
* ``thesis``: the seed author's closed form: a Householder reflection takes the query drift
  direction to the first axis, whose coordinate follows position by OLS; the other coordinates are
  independent with the bin's means and variances (diagonal: not rotation-invariant).

Everything in float64; the draws are seeded: the same head gives the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ESTIMATORS = ("empirical", "gaussian", "thesis")
MIN_QUERIES = 32  # a bin with fewer queries has no value
MAX_PAIRS = 1024  # key pairs drawn per bin (all of them when there are fewer)
LENGTH_BASE = 1024  # the first length bin's context
_MAP_BASE = 1 << 16  # the 2-D map's cell code: key-distance bin · base + query-distance bin (both < 2⁶⁴ tokens: < 64)


@dataclass(frozen=True)
class Bin:
    """A bin of query positions: ``kind`` 'decile' or 'length', its index, and the positions ``[lo, hi)`` it holds."""

    kind: str
    index: int
    lo: int  # first query position in the bin
    hi: int  # one past the last

    @property
    def context(self) -> str:
        """The bin in words: positions for a decile, tokens of context for a length bin."""
        if self.kind == "length":
            return f"({self.lo}, {self.hi}] tokens" if self.lo else f"[1, {self.hi}] tokens"
        return f"positions [{self.lo}, {self.hi})"


def context_bins(length: int) -> list[Bin]:
    """The decile bins of ``[0, length)`` and the length bins ``(L_k/2, L_k]`` with ``L_k = 1024·2^k ≤ length``.

    Decile ``k`` holds positions ``[⌊k·L/10⌋, ⌊(k+1)·L/10⌋)``. Length bin ``k`` holds the queries whose
    context ``t + 1`` lies in ``(L_k/2, L_k]`` (the first in ``[1, 1024]``): positions ``[L_k/2, L_k)``.

    Parameters
    ----------
    length : int
        The context length L (tokens), at least 10.
    """
    if length < 10:
        raise ValueError(f"a context length of at least 10 tokens is needed for deciles, got {length}")
    bins = [Bin("decile", k, (k * length) // 10, ((k + 1) * length) // 10) for k in range(10)]
    k, top = 0, LENGTH_BASE
    while top <= length:
        bins.append(Bin("length", k, 0 if k == 0 else top // 2, top))
        k, top = k + 1, top * 2
    return bins


@dataclass(frozen=True)
class KeyIndex:
    """A head's keys grouped by text once (a stable sort), so each bin's draw filters instead of sorting.

    ``perm`` lists the keys text by text (ascending), each text's keys in their own order; ``code`` is
    each listed key's text number (0, 1, … in that order) and ``pos`` its position.
    """

    perm: np.ndarray
    code: np.ndarray
    pos: np.ndarray
    n_texts: int

    @classmethod
    def of(cls, key_pos: np.ndarray, key_text: np.ndarray) -> "KeyIndex":
        key_pos, key_text = np.asarray(key_pos), np.asarray(key_text)
        perm = np.argsort(key_text, kind="stable")
        uniq, code = np.unique(key_text[perm], return_inverse=True)
        return cls(perm, code.ravel(), key_pos[perm], int(uniq.size))


def draw_pairs(key_pos: np.ndarray, key_text: np.ndarray, before: float, rng: np.random.Generator,
               max_pairs: int = MAX_PAIRS, window_from: float | None = None,
               keys: KeyIndex | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Key pairs ``(a, c)`` (indices into the keys) of one text each, both keys at positions ``< before``.

    With ``window_from`` (a sliding-window layer: the bin's mean query position less the window),
    both keys also lie at positions ``≥ window_from``. All pairs when there are at most ``max_pairs``,
    else ``max_pairs`` of them drawn uniformly without replacement. ``keys`` (:class:`KeyIndex` of the
    same keys) saves the grouping by text when one head draws for many bins; the draw is the same.

    Returns
    -------
    (a, c) : two int64 arrays of key indices, ``a`` before ``c`` in the key order.
    """
    if keys is None:
        keys = KeyIndex.of(key_pos, key_text)
    ok = keys.pos < before
    if window_from is not None:
        ok &= keys.pos >= window_from
    order = keys.perm[ok]  # the admissible keys text by text, each text's in key order
    if order.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m = np.bincount(keys.code[ok], minlength=keys.n_texts)
    start = np.cumsum(m) - m
    pairs_per_text = m * (m - 1) // 2
    total = int(pairs_per_text.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    chosen = np.arange(total, dtype=np.int64) if total <= max_pairs else np.sort(
        rng.choice(total, size=max_pairs, replace=False))
    # pair number -> (text, i < j within the text), from the cumulative counts and the triangle (a text
    # without pairs adds no pair number: searching to the right steps over it)
    ends = np.cumsum(pairs_per_text)
    text = np.searchsorted(ends, chosen, side="right")
    r = chosen - (ends[text] - pairs_per_text[text])  # rank within the text's pairs
    # pairs (i, j), i < j, ordered by j then i: pair r has j = the largest j with j(j-1)/2 <= r
    j = np.floor((1.0 + np.sqrt(1.0 + 8.0 * r.astype(np.float64))) / 2.0).astype(np.int64)
    j -= (j * (j - 1) // 2) > r
    j += ((j + 1) * j // 2) <= r
    i = r - j * (j - 1) // 2
    return order[start[text] + i], order[start[text] + j]


def empirical_pp(Qb: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Each pair's ``4p̂(1 − p̂)·n/(n − 1)`` over the queries ``Qb`` (n ≥ 2), ``p̂`` the share with ``qᵀδ > 0`` (ties ½)."""
    n = Qb.shape[0]
    if n < 2:
        raise ValueError(f"the empirical estimator needs at least 2 queries, got {n}")
    D = Qb @ delta.T
    p = (np.count_nonzero(D > 0, axis=0) + 0.5 * np.count_nonzero(D == 0, axis=0)) / n
    return 4.0 * p * (1.0 - p) * n / (n - 1.0)


def _phi(z: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return ndtr(z)


def _normal_pp(m: np.ndarray, v: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``4p(1 − p)`` for ``p = Φ(m/√v)``; ``p`` is 0, ½ or 1 by the sign of ``m`` where ``v`` is negligible."""
    tiny = v <= 1e-12 * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(tiny, 0.5 * (1.0 + np.sign(m)), _phi(m / np.sqrt(np.where(tiny, 1.0, v))))
    return 4.0 * p * (1.0 - p)


def gaussian_pp(mean: np.ndarray, cov: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``4p(1 − p)``, ``p = Φ(δᵀμ / √(δᵀΣδ))``: the queries as one Gaussian (mean, covariance)."""
    m = delta @ mean
    v = np.einsum("ij,ij->i", delta @ cov, delta)
    scale = np.einsum("ij,ij->i", delta, delta) * max(float(np.trace(cov)) / max(cov.shape[0], 1), 1e-300)
    return _normal_pp(m, v, scale)


def shrunk_moments(Qb: np.ndarray, with_empirical: bool = False):
    """The mean and Ledoit–Wolf-shrunk covariance of the rows of ``Qb``: scikit-learn's ``ledoit_wolf``, in one product.

    ``Σ = (1 − s)·S + s·μ·I`` with ``S`` the empirical covariance, ``μ = tr(S)/d`` and ``s`` Ledoit and
    Wolf's shrinkage, computed as scikit-learn computes it (tested equal) but from ``XᵀX`` and the
    rows' squared norms: ``Σᵢ‖xᵢxᵢᵀ − S‖²_F = Σᵢ‖xᵢ‖⁴ − n‖S‖²_F``, so one ``n × d²`` product instead of
    scikit-learn's three.
    """
    n = Qb.shape[0]
    mean, _, M, sq = _centred(Qb)
    S = M / n
    cov = _ledoit_wolf(S, float(sq @ sq) / n, n)
    return (mean, cov, S) if with_empirical else (mean, cov)


def _centred(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows' mean, the rows about it ``B``, their scatter ``BᵀB`` (one BLAS product) and squared norms."""
    mean = X.mean(axis=0)
    B = X - mean
    return mean, B, B.T @ B, np.einsum("ij,ij->i", B, B)


def _ledoit_wolf(S: np.ndarray, fourth: float, n: int) -> np.ndarray:
    """Ledoit and Wolf's shrunk covariance from the empirical one ``S`` and ``fourth`` = the mean of ``‖xᵢ − x̄‖⁴``."""
    d = S.shape[0]
    mu = float(np.trace(S)) / d
    s_norm2 = float(np.einsum("ij,ij->", S, S))
    beta = (fourth - s_norm2) / (d * n)
    delta = (s_norm2 - 2.0 * mu * float(np.trace(S)) + d * mu * mu) / d
    beta = min(beta, delta)
    shrinkage = 0.0 if beta == 0 else beta / delta
    cov = (1.0 - shrinkage) * S
    cov[np.diag_indices(d)] += shrinkage * mu
    return cov


@dataclass(frozen=True)
class RunMoments:
    """Moments of consecutive runs of one head's queries, from which any bin made of whole runs gets its own.

    A head's bins overlap (each length bin spans several deciles), so their moments are summed from
    runs, the pieces both kinds of bin edges cut the position-sorted queries into: each query is read
    once, not once per bin it falls in. Each run keeps its size, mean, scatter ``Σ bbᵀ`` about its
    own mean (``b = x − m``), ``Σ ‖b‖⁴`` and ``Σ ‖b‖²·b``; Chan et al.'s pairwise update (the
    parallel-axis theorem, and its fourth-moment analogue for the Ledoit–Wolf shrinkage) gives the
    union's mean, scatter and ``Σ ‖x − x̄‖⁴`` exactly in exact arithmetic, every term centred.
    """

    edges: np.ndarray  # row where each run starts, then where the last ends
    n: np.ndarray
    mean: np.ndarray  # (runs, d)
    scatter: np.ndarray  # (runs, d, d)
    fourth: np.ndarray  # (runs,)
    third: np.ndarray  # (runs, d)

    @classmethod
    def of(cls, X: np.ndarray, edges) -> "RunMoments":
        """The runs ``X[edges[r]:edges[r + 1]]`` of the rows of ``X`` (ascending edges, none empty)."""
        edges = np.asarray(edges, np.int64)
        k, d = edges.size - 1, X.shape[1]
        n = np.diff(edges)
        if k < 1 or np.any(n <= 0):
            raise ValueError(f"runs need ascending edges with no empty run, got {edges.tolist()}")
        mean, scatter = np.empty((k, d)), np.empty((k, d, d))
        fourth, third = np.empty(k), np.empty((k, d))
        for r in range(k):  # (a handful of runs a head: each one BLAS product)
            mean[r], B, scatter[r], a = _centred(X[edges[r]:edges[r + 1]])
            fourth[r] = a @ a
            third[r] = a @ B
        return cls(edges, n, mean, scatter, fourth, third)

    def moments(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The mean, Ledoit–Wolf-shrunk and empirical covariance of rows ``[lo, hi)``, two of the runs' edges.

        Tested equal to :func:`shrunk_moments` of those rows (to round-off).
        """
        i, j = np.searchsorted(self.edges, [lo, hi])
        if i >= j or self.edges[i] != lo or self.edges[j] != hi:
            raise ValueError(f"rows [{lo}, {hi}) are not whole runs of {self.edges.tolist()}")
        n_r = self.n[i:j].astype(np.float64)
        n = float(n_r.sum())
        mean = (n_r @ self.mean[i:j]) / n
        c = self.mean[i:j] - mean  # each run's mean about the union's
        e = np.einsum("ij,ij->i", c, c)
        Mc = np.einsum("rij,rj->ri", self.scatter[i:j], c)
        M = self.scatter[i:j].sum(axis=0) + (c.T * n_r) @ c
        # Σ‖b + c‖⁴ = Σ‖b‖⁴ + 4cᵀMc + n e² + 4 c·Σ‖b‖²b + 2e·tr(M) (Σ b = 0 drops the rest)
        tr = np.trace(self.scatter[i:j], axis1=1, axis2=2)
        fourth = float((self.fourth[i:j] + 4.0 * np.einsum("ri,ri->r", c, Mc) + n_r * e * e
                        + 4.0 * np.einsum("ri,ri->r", c, self.third[i:j]) + 2.0 * e * tr).sum())
        S = M / n
        return mean, _ledoit_wolf(S, fourth / n, int(n)), S


@dataclass(frozen=True)
class DriftFrame:
    """The thesis estimator's frame of one head: a reflection taking the query drift direction to e₁.

    ``u`` defines ``H = I − 2uuᵀ`` (``u`` = 0: the identity); ``alpha``, ``beta``, ``sigma2`` the OLS
    intercept, slope and residual variance of the first coordinate of ``Hq`` on position, over all
    of the head's queries.
    """

    u: np.ndarray
    alpha: float
    beta: float
    sigma2: float

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``X Hᵀ`` (H is symmetric)."""
        return X - 2.0 * np.outer(X @ self.u, self.u)


def drift_frame(Q: np.ndarray, t: np.ndarray) -> DriftFrame:
    """The Householder frame of the queries' drift: β = OLS slopes of every coordinate on position."""
    t = np.asarray(t, np.float64)
    tc = t - t.mean()
    vt = float(tc @ tc)
    d = Q.shape[1]
    beta = (tc @ Q) / vt if vt > 0 else np.zeros(d)  # (Σ tc = 0: the queries' mean drops out)
    norm = float(np.linalg.norm(beta))
    u = np.zeros(d)
    if norm > 0:
        v = beta / norm
        v[0] -= 1.0
        nv = float(np.linalg.norm(v))
        if nv > 1e-12:
            u = v / nv
    # the first coordinate of Hq is h₀ᵀq, h₀ = e₁ − 2u₀u: one product, not the whole reflection
    h0 = -2.0 * u[0] * u
    h0[0] += 1.0
    y = Q @ h0
    slope = float(tc @ y) / vt if vt > 0 else 0.0
    alpha = float(y.mean() - slope * t.mean())
    resid = y - alpha - slope * t
    sigma2 = float(resid @ resid) / max(len(y), 1)
    return DriftFrame(u, alpha, slope, sigma2)


def thesis_pp(frame: DriftFrame, mean: np.ndarray, cov: np.ndarray, tau: float, delta: np.ndarray) -> np.ndarray:
    """``4p(1 − p)`` by the thesis's closed form, from the bin's query mean and (unshrunk) covariance.

    The frame's coordinates of the bin's queries have mean ``Hμ`` and variances
    ``diag(HΣH) = diag(Σ) − 4u∘(Σu) + 4u²(uᵀΣu)``: no query needs reflecting.
    """
    u = frame.u
    dt = frame.apply(delta)
    mu = frame.apply(mean[None, :])[0, 1:]
    su = cov @ u
    var = (np.diagonal(cov) - 4.0 * u * su + 4.0 * u * u * float(u @ su))[1:]
    m = dt[:, 0] * (frame.alpha + frame.beta * tau) + dt[:, 1:] @ mu
    v = dt[:, 0] ** 2 * frame.sigma2 + (dt[:, 1:] ** 2) @ var
    scale = np.einsum("ij,ij->i", delta, delta) * max((frame.sigma2 + float(var.sum())) / delta.shape[1], 1e-300)
    return _normal_pp(m, v, scale)


_U32, _U64 = 2.0 ** -24, 2.0 ** -53  # unit round-offs


def sign_sums(sample: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``Σ_i sign(q_iᵀδ)`` for each pair δ: the empirical estimator's counts, with float64's signs, at float32's cost.

    The comparison is a ``pairs × queries × d`` product of which only the signs count. It is taken in
    float32 (half float64's cost), each query scaled to unit length and each δ so that its error
    bound is 1 (positive scales: no sign changes), and every entry within ±1 is computed again in
    float64. The bound is the worst case of both products' round-off, whatever the summation order,
    fused or not (Higham's ``γ_d``, plus rounding the inputs to float32): ``((d + 3)·u₃₂ + d·u₆₄)·‖δ‖``
    with a 1 % margin, which also covers float32's flushed subnormals. Beyond it the float32 sign is
    the exact product's, and so is float64's, which errs by at most its own part of the bound; within
    it float64 decides. So the sums are float64's, whatever the data: tested equal on ties and on
    entries built to sit between the two precisions.

    Returns
    -------
    float64 array (pairs,) of sign sums, integers.
    """
    sample = np.asarray(sample, np.float64)
    delta = np.asarray(delta, np.float64)
    n_s, d = sample.shape
    norm_q = np.sqrt(np.einsum("ij,ij->i", sample, sample))
    norm_d = np.sqrt(np.einsum("ij,ij->i", delta, delta))
    lengths = np.concatenate([norm_q, norm_d])
    used = lengths[lengths > 0]
    if not (np.all(np.isfinite(lengths)) and (used.size == 0 or (used.min() > 1e-200 and used.max() < 1e200))):
        return np.sign(delta @ sample.T).sum(axis=1)  # (beyond float32's reach once scaled: float64 throughout)
    bound = 1.01 * ((d + 3) * _U32 + d * _U64)
    scale = np.divide(1.0, bound * norm_d, out=np.zeros_like(norm_d), where=norm_d > 0)
    d32 = np.empty(delta.shape, np.float32)
    np.multiply(delta, scale[:, None], out=d32, casting="same_kind")
    q32 = (sample / np.where(norm_q > 0, norm_q, 1.0)[:, None]).astype(np.float32)
    G = d32 @ q32.T
    # (bools summed as bytes: numpy's count_nonzero along rows this short costs twice as much)
    pos = (G > 1.0).view(np.uint8).sum(axis=1, dtype=np.int64)
    neg = (G < -1.0).view(np.uint8).sum(axis=1, dtype=np.int64)
    sums = (pos - neg).astype(np.float64)
    # the pairs with an entry too close to zero for float32 to decide (a few a bin; all of them when
    # keys repeat, as a model without RoPE gives on repeated tokens): those rows again in float64
    rows = np.flatnonzero(pos + neg < n_s)
    if rows.size:
        near = np.abs(G[rows]) <= 1.0
        sums[rows] += np.where(near, np.sign(delta[rows] @ sample.T), 0.0).sum(axis=1)
    return sums


def bin_estimates(Qb: np.ndarray | None, sample: np.ndarray, delta: np.ndarray, frame: DriftFrame,
                  tau: float, moments: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each pair's PP by the three estimators for one bin, from two matrix products.

    The same numbers as :func:`empirical_pp` (over ``sample``), :func:`gaussian_pp` (the bin's
    shrunk moments) and :func:`thesis_pp` (its unshrunk covariance), tested equal: the pairs meet
    the covariance, the mean and the reflection's vector in one ``pairs × d × (d + 2)`` product, and
    the sampled queries in :func:`sign_sums`' float32 one (float64's signs), so a bin costs two
    products and a few element-wise passes (issue 48; docs/benchmarks.md).

    Parameters
    ----------
    Qb : (n, d) the bin's queries (the Gaussian and thesis moments); None when ``moments`` are given.
    sample : (n_s, d) the queries the empirical estimator compares, n_s ≥ 2.
    delta : (pairs, d) the pairs' key differences.
    frame : the head's :class:`DriftFrame`; tau the bin's mean query position.
    moments : the bin's mean, shrunk and empirical covariance (:func:`shrunk_moments` with
        ``with_empirical``, or :meth:`RunMoments.moments`), when the caller has them.

    Returns
    -------
    (empirical, gaussian, thesis) : three float64 arrays of per-pair PP.
    """
    n_s, d = sample.shape
    if n_s < 2:
        raise ValueError(f"the empirical estimator needs at least 2 queries, got {n_s}")
    if Qb is None and moments is None:
        raise ValueError("bin_estimates needs the bin's queries Qb or their moments, got neither")
    mean, cov, S = shrunk_moments(Qb, with_empirical=True) if moments is None else moments
    u = frame.u
    R = np.empty((d, d + 2))
    R[:, :d] = cov
    R[:, d] = mean
    R[:, d + 1] = u
    G = delta @ R
    # empirical: p̂ = (n + Σ sign(qᵀδ)) / 2n is the share with qᵀδ > 0, ties ½ (integers: exact)
    p = (n_s + sign_sums(sample, delta)) / (2.0 * n_s)
    pp_e = 4.0 * p * (1.0 - p) * n_s / (n_s - 1.0)
    sq = np.einsum("ij,ij->i", delta, delta)
    v_g = np.einsum("ij,ij->i", G[:, :d], delta)
    pp_g = _normal_pp(G[:, d], v_g, sq * max(float(np.trace(cov)) / max(d, 1), 1e-300))
    # thesis: δ̃ = Hδ from δᵀu (the product's last column); the frame's first coordinate follows position
    dt = delta - 2.0 * np.outer(G[:, d + 1], u)
    su = S @ u
    var = np.diagonal(S) - 4.0 * u * su + 4.0 * u * u * float(u @ su)
    w_m = mean - 2.0 * float(mean @ u) * u
    w_m[0] = frame.alpha + frame.beta * tau
    w_v = var.copy()
    w_v[0] = frame.sigma2
    scale_t = sq * max((frame.sigma2 + float(var[1:].sum())) / d, 1e-300)
    pp_t = _normal_pp(dt @ w_m, (dt * dt) @ w_v, scale_t)
    return pp_e, pp_g, pp_t


def log2_bin(x: np.ndarray) -> np.ndarray:
    """``⌊log2 x⌋`` for x ≥ 1 (distances in tokens); 0 below 1."""
    x = np.asarray(x, np.float64)
    return np.where(x >= 1.0, np.floor(np.log2(np.maximum(x, 1.0))), 0.0).astype(np.int64)


@dataclass
class BinResult:
    """One bin's plasticity: per estimator its AP (NaN: no value), the queries and pairs behind it, and why not."""

    bin: Bin
    tau: float
    n_q: int
    n_pairs: int
    ap: dict[str, float]
    why: str | None = None  # why there is no value


def head_plasticity(Q: np.ndarray, t_q: np.ndarray, K: np.ndarray, t_k: np.ndarray, key_text: np.ndarray,
                    length: int, rng: np.random.Generator, *, window: int | None = None, max_pairs: int = MAX_PAIRS,
                    max_queries: int | None = None, keys: KeyIndex | None = None) -> dict:
    """One head's plasticity: every bin's AP by every estimator, the head's summaries, and the 2-D map.

    Parameters
    ----------
    Q, t_q : the head's queries (n_q, d) and their positions.
    K, t_k, key_text : its key head's keys (n_k, d), their positions and texts (example ids).
    length : int
        The context length L (tokens).
    rng : numpy.random.Generator
        Seeds the pairs (and the query sample).
    window : int, optional
        The layer's sliding window (tokens); None for global attention.
    max_pairs : int
        Key pairs drawn per bin.
    max_queries : int, optional
        Queries per bin the empirical estimator compares (a seeded sample of the bin's; all when None).
        The Gaussian and thesis estimators use every query of the bin.
    keys : KeyIndex, optional
        The keys grouped by text, when the caller shares them across the query heads of a key head.

    Returns
    -------
    dict with ``bins`` (list of :class:`BinResult`), ``summary`` (estimator -> dict of the
    ``plasticity`` columns), ``map`` (rows of ``plasticity_2d``: key-distance bin, query-distance
    bin, pairs, AP), ``gauss_gap`` and ``notes``.
    """
    Q = np.asarray(Q, np.float64)
    K = np.asarray(K, np.float64)
    t_q = np.asarray(t_q, np.float64)
    t_k = np.asarray(t_k, np.float64)
    key_text = np.asarray(key_text)
    frame = drift_frame(Q, t_q)
    bins = context_bins(int(length))
    if keys is None:
        keys = KeyIndex.of(t_k, key_text)
    results: list[BinResult] = []
    # the 2-D map, over the decile bins' pairs (empirical): one code per (key-distance, query-distance)
    # bin, summed at the end
    map_codes: list[np.ndarray] = []
    map_pp: list[np.ndarray] = []
    # the queries in position order once: a bin's are a slice (a view) for its moments
    by_pos = np.argsort(t_q, kind="stable")
    Q_pos, t_pos = Q[by_pos], t_q[by_pos]
    rows = np.searchsorted(t_pos, [[b.lo, b.hi] for b in bins], side="left")
    # the moments of every bin with a value, from runs cut at every such bin's edges: each query read once
    valued = rows[rows[:, 1] - rows[:, 0] >= MIN_QUERIES]
    runs = RunMoments.of(Q_pos, np.unique(valued)) if valued.size else None
    for b, (lo_i, hi_i) in zip(bins, rows.tolist()):
        n = int(hi_i - lo_i)
        sel = np.sort(by_pos[lo_i:hi_i])  # (the bin's queries in the head's order: what the sample draws from)
        nan = {e: math.nan for e in ESTIMATORS}
        if n < MIN_QUERIES:
            results.append(BinResult(b, float(t_q[sel].mean()) if n else math.nan, n, 0, nan,
                                     f"fewer than {MIN_QUERIES} queries" if n else "no query"))
            continue
        tq = t_q[sel]
        lo, tau = float(tq.min()), float(tq.mean())
        a, c = draw_pairs(t_k, key_text, lo, rng, max_pairs, None if window is None else tau - window, keys=keys)
        if a.size == 0:
            results.append(BinResult(b, tau, n, 0, nan, "no key pair before its queries"))
            continue
        delta = K[a] - K[c]
        sample = Q_pos[lo_i:hi_i]
        if max_queries is not None and n > max_queries:  # (the k-th query of the bin in the head's order)
            sample = Q[sel[np.sort(rng.choice(n, size=max_queries, replace=False))]]
        pp_e, pp_g, pp_t = bin_estimates(None, sample, delta, frame, tau, moments=runs.moments(lo_i, hi_i))
        results.append(BinResult(b, tau, n, int(a.size),
                                 {"empirical": float(pp_e.mean()), "gaussian": float(pp_g.mean()),
                                  "thesis": float(pp_t.mean())}))
        if b.kind == "decile":
            kd = log2_bin(np.abs(t_k[a] - t_k[c]))
            qd = log2_bin(tau - (t_k[a] + t_k[c]) / 2.0)
            map_codes.append(kd * _MAP_BASE + qd)
            map_pp.append(pp_e)
    summary = {e: summarise([r for r in results if r.bin.kind == "decile"], e, length) for e in ESTIMATORS}
    deciles = [r for r in results if r.bin.kind == "decile" and math.isfinite(r.ap["empirical"])]
    gap = float(np.mean([abs(r.ap["gaussian"] - r.ap["empirical"]) for r in deciles])) if deciles else math.nan
    empty = [r for r in results if r.why]
    notes = "; ".join(f"{r.bin.kind} {r.bin.index}: {r.why}" for r in empty) or None
    rows_2d = []
    if map_codes:
        cells, inv = np.unique(np.concatenate(map_codes), return_inverse=True)
        sums = np.bincount(inv.ravel(), weights=np.concatenate(map_pp), minlength=cells.size)
        counts = np.bincount(inv.ravel(), minlength=cells.size)
        rows_2d = [(int(code) // _MAP_BASE, int(code) % _MAP_BASE, int(k), float(sm) / k)
                   for code, sm, k in zip(cells.tolist(), sums.tolist(), counts.tolist())]
    return {"bins": results, "summary": summary, "map": rows_2d, "gauss_gap": gap, "notes": notes}


def summarise(deciles: list[BinResult], estimator: str, length: int) -> dict:
    """A head's ``plasticity`` row for one estimator, from its decile bins.

    ``ap_overall`` weights each bin with a value by its queries; ``ap_first20`` the bins whose upper
    edge is at most 0.2·L, ``ap_last20`` those whose lower edge is at least 0.8·L.
    """
    def weighted(rs) -> float:
        rs = [r for r in rs if math.isfinite(r.ap[estimator])]
        w = sum(r.n_q for r in rs)
        return sum(r.n_q * r.ap[estimator] for r in rs) / w if w else math.nan

    first = weighted([r for r in deciles if r.bin.hi <= 0.2 * length])
    last = weighted([r for r in deciles if r.bin.lo >= 0.8 * length])
    return {
        "ap_overall": weighted(deciles),
        "ap_first20": first,
        "ap_last20": last,
        "ap_drop": first - last,
        "ap_retention": last / first if first and math.isfinite(first) else math.nan,
        "n_pairs": int(sum(r.n_pairs for r in deciles)),
    }

"""Confidence intervals for the findings: small pure functions, float64, deterministic.

The findings (``sql/findings.sql``) measure means, shares, medians, ratios, correlations and
changes over attention heads. Heads are not independent draws: query heads that share a key head
are near-copies, heads of one layer are alike, heads of one model are not draws from "LLMs". So
:mod:`qkdb.warehouse.intervals` resamples key-head groups within the strata of a model's layers, or
whole models; docs/findings.md says which finding uses which interval and why.

* :func:`wilson_interval` — a share of heads (score interval: sensible at 0 of n), over an
  effective number of heads when they come in groups.
* :func:`fisher_z_interval` — a Pearson correlation over the heads of one model.
* :func:`rao_wu_weights` — resampling weights (one row per replicate) of a stratified sample, the
  strata held fixed and each stratum's variance unbiased (Rao and Wu's rescaling bootstrap);
  :func:`weighted_mean`, :func:`weighted_median`, :func:`grouped_weighted_median`,
  :func:`weighted_corr` evaluate a statistic on every replicate at once;
  :func:`stratified_covariance` is the covariance of the resampled sums (their normal law, for
  very many units).
* :func:`t_levels` — the percentiles to read off the replicates: the plain percentile interval
  widened by Student's t for the degrees of freedom of the variance (Hesterberg's *expanded
  percentile* idea; the plain one covers ~80 % for 5 units).
* :func:`jackknife_interval` — the jackknife over a few clusters (models) with Student's t: for two
  to five models, where a bootstrap over them has too few distinct resamples to show their spread.
* :func:`stratified_jackknife_weights`, :func:`stratified_jackknife_variance` — the same inside a
  model for few key-head groups in strata of layers (delete one group, its stratum rescaled; JKn):
  with Student's t for groups less strata, an interval from 4 groups on.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np


def _z(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson_interval(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a share of ``k`` successes in ``n`` trials.

    Parameters
    ----------
    k : float
        Successes (0 ≤ k ≤ n).
    n : float
        Trials; may be an effective (non-integer) sample size.
    level : float
        Coverage, e.g. 0.95.

    Returns
    -------
    (low, high) : tuple of float
        NaN for ``n`` = 0.

    Examples
    --------
    0 of 6 heads: ``wilson_interval(0, 6)`` → (0.0, 0.390...).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    z = _z(level)
    p = k / n
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n)) / (1.0 + z2n)
    # At k = 0 (or n) the score interval's end is exactly 0 (or 1); keep it so despite rounding.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return (low, high)


def wilson_groups_for(level: float = 0.95) -> float:
    """``z²``: with ``n`` all-success trials Wilson's interval leaves a rate of ``z²/(n + z²)`` ≈ ``z²/n`` of failures open.

    So ruling out a rate ``x`` of failures takes about ``z²/x`` trials (3.84/x at 95%).
    """
    return _z(level) ** 2


def fisher_z_interval(r: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Interval for a Pearson correlation from Fisher's z transform, ``atanh(r) ± z/√(n − 3)``.

    Parameters
    ----------
    r : float
        The sample correlation, in [−1, 1].
    n : int
        Pairs it was computed from; at least 4.

    Returns
    -------
    (low, high) : tuple of float
    """
    if not -1.0 <= r <= 1.0:
        raise ValueError(f"a correlation lies in [-1, 1], got {r}")
    if n < 4:
        raise ValueError(f"Fisher's z interval needs at least 4 pairs, got {n}")
    half = _z(level) / math.sqrt(n - 3)
    with np.errstate(divide="ignore"):
        zr = float(np.arctanh(r))
    return (math.tanh(zr - half), math.tanh(zr + half))


def t_levels(df: float, level: float = 0.95) -> tuple[float, float]:
    """The quantile levels at which to read bootstrap replicates so that their interval is ±t_df.

    ``Φ(t_{df, (1−level)/2})`` and its complement: the replicates of an unbiased resampling scheme
    (:func:`rao_wu_weights`) spread like the estimate's sampling distribution, and reading them at
    these levels widens the plain percentile interval by Student's t for ``df`` degrees of freedom
    (the idea of Hesterberg's expanded percentile interval, 2015, §5.2, for a variance that is
    estimated rather than known). It tends to the plain percentile interval as ``df`` grows.

    Parameters
    ----------
    df : float
        Degrees of freedom of the variance the replicates carry (units less strata); > 0.

    Returns
    -------
    (q_low, q_high) : tuple of float
    """
    if not df > 0:
        raise ValueError(f"an interval needs at least 1 degree of freedom, got {df}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    q = 0.5 * math.erfc(-t_quantile((1.0 - level) / 2.0, df) / math.sqrt(2.0))  # Φ(t)
    return (q, 1.0 - q)


@functools.lru_cache(maxsize=256)
def warm_up() -> None:
    """Import what :func:`t_quantile` needs now (from a thread that has nothing else to do meanwhile)."""
    import scipy.special  # noqa: F401


def t_quantile(p: float, df: float) -> float:
    """Quantile ``p`` of Student's t with ``df`` degrees of freedom."""
    from scipy.special import stdtrit  # (scipy.special, not scipy.stats: 0.2 s of import instead of 0.7)

    return float(stdtrit(df, p))


def rao_wu_weights(strata: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Weights of every unit in ``n_boot`` resamples of a stratified sample (Rao and Wu's rescaling bootstrap).

    In each stratum of ``n_h ≥ 2`` units, a resample draws ``n_h − 1`` of them with replacement and
    weights each draw ``n_h / (n_h − 1)``: the stratum keeps its total weight ``n_h`` exactly, and
    the resampled mean's variance is the unbiased ``s_h² / n_h`` (a plain bootstrap's is smaller by
    ``(n_h − 1) / n_h``, which matters for strata of a few units). Strata are held fixed: nothing
    varies between them. A stratum of one unit cannot show its variance and keeps weight 1.
    (Rao & Wu 1988, "Resampling inference with complex survey data", JASA 83: 231–241.)

    Parameters
    ----------
    strata : array of int
        The stratum of every unit (any labels, any order).
    n_boot : int
        Resamples.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of shape (n_boot, len(strata)), float64
    """
    strata = np.asarray(strata)
    if strata.ndim != 1 or strata.size == 0:
        raise ValueError(f"strata must be a non-empty 1-d array, got shape {strata.shape}")
    n = strata.size
    order = np.argsort(strata, kind="stable")
    _, start, size = np.unique(strata[order], return_index=True, return_counts=True)
    multi = size >= 2
    if not multi.any():
        return np.ones((n_boot, n))
    draws = size[multi] - 1
    col_start = np.repeat(start[multi], draws)
    col_size = np.repeat(size[multi], draws)
    pos = col_start + np.minimum((rng.random((n_boot, int(draws.sum()))) * col_size).astype(np.int64), col_size - 1)
    # Counted straight into the units' own columns (order[pos]), one pass over n_boot × n: no
    # reordering copy of the whole matrix (the weights are the same to the bit).
    pos = order[pos]
    pos += (np.arange(n_boot) * n)[:, None]
    counts = np.bincount(pos.ravel(), minlength=n_boot * n).reshape(n_boot, n)
    scale = np.ones(n)
    member = np.repeat(multi, size)  # (in sorted order) units of strata that resample
    scale[order[member]] = np.repeat(size[multi] / (size[multi] - 1.0), size[multi])
    W = np.multiply(counts, scale)  # (the counts widened to float64 in the same pass)
    if not member.all():
        W[:, order[~member]] = 1.0  # (never drawn: a stratum of one keeps its weight)
    return W


def stratified_covariance(terms: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """Covariance of the resampled column sums of ``terms`` (units × k) under :func:`rao_wu_weights`.

    ``Σ_h n_h / (n_h − 1) · Σ_{u∈h} (t_u − t̄_h)(t_u − t̄_h)ᵀ``: the unbiased variance of the
    stratified totals. Resampled sums drawn from a normal with this covariance around the sums
    stand in for the weights' matrix product when there are too many units to draw weights for.
    """
    terms = np.asarray(terms, dtype=np.float64)
    _, inv, size = np.unique(strata, return_inverse=True, return_counts=True)
    means = np.zeros((size.size, terms.shape[1]))
    np.add.at(means, inv, terms)
    means /= size[:, None]
    dev = terms - means[inv]
    factor = np.where(size > 1, size / np.maximum(size - 1.0, 1.0), 0.0)[inv]
    return (dev * factor[:, None]).T @ dev


def jackknife_interval(estimate: float, leave_one_out: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """``estimate ± t_{m−1} · se_jack``: the delete-one jackknife over ``m`` clusters, with Student's t.

    For few clusters (models) a bootstrap over them has too few distinct resamples to show its
    spread; the jackknife's variance ``(m − 1)/m · Σ (θ₍₋ⱼ₎ − θ̄)²`` is, for a mean of equally sized
    clusters, the t interval on their means (exact for normal cluster means, ``m`` ≥ 2).

    Parameters
    ----------
    estimate : float
        The statistic on every cluster.
    leave_one_out : array of float
        The statistic without each cluster in turn; ``m`` ≥ 2 finite values.
    """
    loo = np.asarray(leave_one_out, dtype=np.float64)
    m = loo.size
    if m < 2 or not np.isfinite(loo).all():
        return (math.nan, math.nan)
    se = math.sqrt((m - 1) / m * float(((loo - loo.mean()) ** 2).sum()))
    half = -t_quantile((1.0 - level) / 2.0, m - 1) * se
    return (estimate - half, estimate + half)


def stratified_jackknife_weights(strata: np.ndarray) -> np.ndarray:
    """Delete-one-unit weights of a stratified sample (the stratified jackknife, JKn).

    Row ``g`` leaves unit ``g`` out and weighs the other units of its stratum ``n_h / (n_h − 1)``
    (the stratum keeps its total weight); every other stratum keeps weight 1. A stratum of one unit
    cannot show its variance: its row is all ones (it adds nothing to the variance).

    Parameters
    ----------
    strata : array of int
        The stratum of every unit.

    Returns
    -------
    ndarray of shape (n, n), float64
    """
    strata = np.asarray(strata)
    if strata.ndim != 1 or strata.size == 0:
        raise ValueError(f"strata must be a non-empty 1-d array, got shape {strata.shape}")
    _, inv, size = np.unique(strata, return_inverse=True, return_counts=True)
    n = strata.size
    W = np.ones((n, n))
    same = inv[:, None] == inv[None, :]
    n_h = size[inv].astype(np.float64)
    scale = np.where(n_h > 1, n_h / np.maximum(n_h - 1.0, 1.0), 1.0)
    W = np.where(same, scale[:, None], W)
    W[np.arange(n), np.arange(n)] = np.where(n_h > 1, 0.0, 1.0)
    return W


def stratified_jackknife_variance(replicates: np.ndarray, strata: np.ndarray) -> float:
    """``Σ_h (n_h − 1)/n_h · Σ_{g∈h} (θ₍₋g₎ − θ̄_h)²``: the JKn variance from :func:`stratified_jackknife_weights`' values.

    For a linear statistic it is the unbiased stratified variance (:func:`stratified_covariance`);
    for a smooth one (a ratio, a correlation, a change) it is the linearised variance, slightly
    conservative. NaN when a replicate is undefined.
    """
    theta = np.asarray(replicates, dtype=np.float64)
    strata = np.asarray(strata)
    if theta.shape != strata.shape:
        raise ValueError(f"one replicate per unit: got {theta.shape} for {strata.shape} units")
    if not np.isfinite(theta).all():
        return math.nan
    _, inv, size = np.unique(strata, return_inverse=True, return_counts=True)
    means = np.bincount(inv, weights=theta) / size
    dev = theta - means[inv]
    factor = np.where(size > 1, (size - 1.0) / size, 0.0)[inv]
    return float((factor * dev * dev).sum())


def weighted_mean(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Mean of ``x`` under each row of weights ``W``; NaN entries of ``x`` are left out.

    Returns NaN for a row that puts no weight on any finite entry.
    """
    ok = np.isfinite(x)
    num = W @ np.where(ok, x, 0.0)
    den = W @ ok.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def weighted_median(W: np.ndarray, x: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
    """Median of ``x`` under each row of weights ``W`` (for integer weights, the median of the resampled multiset).

    Like DuckDB's ``median`` (``quantile_cont(x, 0.5)``): the smallest value whose cumulative weight
    reaches half the total, averaged with the next one when it reaches exactly half (an even count).
    NaN entries of ``x`` are left out. ``columns``: the column of ``W`` that weights each value
    (``W[:, columns]`` without making that matrix first; default, one column per value).

    The cumulative weight is not summed over every value of every row: the sorted values are cut
    into blocks, the weight below each cut is one matrix product (each column's count of values
    below it), and only the two blocks where a row's half falls are summed value by value
    (:func:`_median_in_brackets`). A row whose median is not inside them (a run of values a row does
    not weight at all) is summed over every value (:func:`_median_by_cumsum`).
    """
    ok = np.isfinite(x)
    order = np.flatnonzero(ok)[np.argsort(x[ok], kind="stable")]
    if order.size == 0:
        return np.full(W.shape[0], np.nan)
    cols = order if columns is None else np.asarray(columns)[order]
    return _median_in_brackets(W, x[order], cols)


def grouped_weighted_median(Wg: np.ndarray, x: np.ndarray, group: np.ndarray) -> np.ndarray:
    """:func:`weighted_median` when every value of a group shares its group's weight (``Wg``: resamples × groups).

    The same as ``weighted_median(Wg, x, columns=group)``: a bootstrap over hundreds of models with
    hundreds of thousands of heads weights few columns, and only two blocks of values per row are
    summed one by one.
    """
    return weighted_median(Wg, x, columns=group)


# Values per block of the sorted values (their number: at most what keeps the columns' counts
# below each cut, columns × cuts, to about 4M numbers).
_BLOCK_VALUES = 256
_MAX_COUNTS = 4_000_000


def _median_in_brackets(W: np.ndarray, xs: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """:func:`weighted_median` of the sorted values ``xs``, weighted by the columns ``cols`` of ``W``."""
    n, (B, G) = xs.size, W.shape
    n_blocks = int(min(max(1, n // _BLOCK_VALUES), max(1, _MAX_COUNTS // max(G, 1))))
    cuts = (np.arange(n_blocks + 1) * n) // n_blocks  # ranks: block k holds cuts[k]:cuts[k + 1]
    block = np.repeat(np.arange(n_blocks), np.diff(cuts))
    counts = np.bincount(block * G + cols, minlength=n_blocks * G).reshape(n_blocks, G)
    below = np.zeros((n_blocks + 1, G))
    np.cumsum(counts, axis=0, out=below[1:])
    below = W @ below.T  # (B, n_blocks + 1): the weight of the values ranked below each cut
    total = below[:, -1]
    half = total / 2.0
    tol = 1e-9 * np.maximum(total, 1e-300)
    # The block where each row reaches half (less tol), and the next one: the median and the value
    # after it (for an even count) lie in them unless the row gives the next block no weight.
    k = np.clip((below[:, 1:-1] < (half - tol)[:, None]).sum(axis=1), 0, n_blocks - 1)
    start, stop = cuts[k], cuts[np.minimum(k + 2, n_blocks)]
    width = int((stop - start).max())
    rank = start[:, None] + np.arange(width)
    inside = rank < stop[:, None]
    rank = np.minimum(rank, n - 1)
    cum = np.where(inside, np.take_along_axis(W, cols[rank], axis=1), 0.0)
    np.cumsum(cum, axis=1, out=cum)
    cum += below[np.arange(B), k][:, None]
    i_lo = start + (cum < (half - tol)[:, None]).sum(axis=1)
    n_hi = (cum <= (half + tol)[:, None]).sum(axis=1)
    i_hi = start + n_hi
    at = np.minimum(i_lo - start, width - 1)
    exact = np.abs(cum[np.arange(B), at] - half) <= tol
    i_lo, i_hi = np.minimum(i_lo, n - 1), np.minimum(i_hi, n - 1)
    med = np.where(exact, 0.5 * (xs[i_lo] + xs[i_hi]), xs[i_lo])
    # Rows whose half, or the value after an exact half, is not inside their blocks: summed in full.
    lost = (i_lo >= stop) | (exact & (n_hi >= stop - start) & (stop < n))
    if lost.any():
        med[lost] = _median_by_cumsum(W[lost], xs, cols)
    return np.where(total > 0, med, np.nan)


def _median_by_cumsum(W: np.ndarray, xs: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """:func:`weighted_median` summing every row's weights over all the sorted values ``xs``."""
    n = xs.size
    cum = W[:, cols]
    np.cumsum(cum, axis=1, out=cum)
    total = cum[:, -1]
    half = total / 2.0
    tol = 1e-9 * np.maximum(total, 1e-300)
    # Weights are >= 0, so every row of cum is non-decreasing (so is its float rounding): the count
    # of its entries below a level is a binary search, not a comparison of every entry.
    i_lo = np.array([np.searchsorted(c, v, side="left") for c, v in zip(cum, half - tol)], dtype=np.int64)
    i_hi = np.array([np.searchsorted(c, v, side="right") for c, v in zip(cum, half + tol)], dtype=np.int64)
    i_lo = np.minimum(i_lo, n - 1)
    i_hi = np.minimum(i_hi, n - 1)
    exact = np.abs(np.take_along_axis(cum, i_lo[:, None], axis=1)[:, 0] - half) <= tol
    med = np.where(exact, 0.5 * (xs[i_lo] + xs[i_hi]), xs[i_lo])
    return np.where(total > 0, med, np.nan)


def corr_terms(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The six vectors whose weighted sums give a weighted Pearson correlation (:func:`corr_from_sums`).

    Pairs with a NaN are zeroed out. Centred on the unweighted means first, so that the weighted
    moments lose nothing to cancellation.
    """
    ok = np.isfinite(x) & np.isfinite(y)
    if not ok.any():
        return np.zeros((x.size, 6))
    xc = np.where(ok, x - x[ok].mean(), 0.0)
    yc = np.where(ok, y - y[ok].mean(), 0.0)
    return np.column_stack([ok.astype(np.float64), xc, yc, xc * xc, yc * yc, xc * yc])


def corr_from_sums(sums: np.ndarray) -> np.ndarray:
    """Correlations from the weighted sums (rows) of :func:`corr_terms`' six vectors; NaN without variance."""
    w, sx, sy, sxx, syy, sxy = (sums[:, k] for k in range(6))
    with np.errstate(invalid="ignore", divide="ignore"):
        cxy = sxy - sx * sy / w
        vx = sxx - sx * sx / w
        vy = syy - sy * sy / w
        # No variance (relative to the data's scale, beyond round-off): no correlation.
        good = (w > 1) & (vx > 1e-12 * sxx) & (vy > 1e-12 * syy)
        r = np.where(good, cxy / np.sqrt(np.where(good, vx * vy, 1.0)), np.nan)
    return np.clip(r, -1.0, 1.0)


def weighted_corr(W: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of ``x`` and ``y`` under each row of weights ``W`` (pairs with both finite).

    NaN where a side has no variance under the weights.
    """
    return corr_from_sums(W @ corr_terms(x, y))


def percentile_interval(replicates: np.ndarray, df: float, level: float = 0.95) -> tuple[float, float]:
    """The replicates read at :func:`t_levels` for ``df`` degrees of freedom.

    NaN replicates (a resample without data) are left out; NaN when none is left.
    """
    reps = np.asarray(replicates, dtype=np.float64)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return (math.nan, math.nan)
    q_lo, q_hi = t_levels(df, level)
    lo, hi = np.quantile(reps, [q_lo, q_hi])
    return (float(lo), float(hi))

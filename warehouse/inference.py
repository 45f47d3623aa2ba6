"""Confidence intervals for the findings: small pure functions, float64, deterministic.

The findings (``sql/findings.sql``) measure means, shares, medians, ratios, correlations and
changes over attention heads. Heads of one model are not independent draws from "LLMs", so where
a finding pools several models the resampling unit is the model (a cluster), then the head within
it: a *two-stage* bootstrap. Within one model, heads are the unit. docs/findings.md says which
finding uses which interval and why.

* :func:`wilson_interval` — a share of heads (score interval: sensible at 0 of n).
* :func:`fisher_z_interval` — a Pearson correlation over the heads of one model.
* :func:`bootstrap_counts` — resampling multiplicities (one row per replicate) for the bootstrap;
  :func:`weighted_mean`, :func:`weighted_median`, :func:`weighted_corr` evaluate a statistic on
  every replicate at once.
* :func:`expanded_levels` — the percentiles to read off the replicates: Hesterberg's *expanded
  percentile* interval, which widens the plain percentile interval by the t-distribution's tails
  for a small number of resampled units (the plain one covers ~80 % for 5 units, and with 2 or 3
  models it would take their spread for certainty).
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


def expanded_levels(n: int, level: float = 0.95) -> tuple[float, float]:
    """Quantile levels of the expanded percentile bootstrap interval for ``n`` resampled units.

    Hesterberg (2015, "What teachers should know about the bootstrap", §5.2): read the replicates
    at ``Φ(±√(n/(n−1))·t_{n−1, (1−level)/2})`` instead of ``(1−level)/2``: it corrects the plain
    percentile interval's narrowness bias for small samples, and tends to it as ``n`` grows.

    Parameters
    ----------
    n : int
        Units resampled at the top level (models when a finding pools several, else heads); ≥ 2.

    Returns
    -------
    (q_low, q_high) : tuple of float
    """
    if n < 2:
        raise ValueError(f"an interval needs at least 2 resampled units, got {n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    z = math.sqrt(n / (n - 1)) * t_quantile((1.0 - level) / 2.0, n - 1)
    q = 0.5 * math.erfc(-z / math.sqrt(2.0))  # the normal distribution function at z
    return (q, 1.0 - q)


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """Quantile ``p`` of Student's t with ``df`` degrees of freedom."""
    from scipy.special import stdtrit  # (scipy.special, not scipy.stats: 0.2 s of import instead of 0.7)

    return float(stdtrit(df, p))


def bootstrap_counts(sizes: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicities of every unit in ``n_boot`` bootstrap resamples, two stages when clustered.

    Units are grouped in clusters of ``sizes`` (contiguous, in order). With one cluster this is the
    ordinary bootstrap of its units. With several, each replicate draws the clusters with
    replacement, then, for every draw of a cluster, as many of its units with replacement as it
    has (the two-stage cluster bootstrap: it carries the variation between clusters and within).

    Parameters
    ----------
    sizes : array of int
        Units per cluster.
    n_boot : int
        Replicates.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of shape (n_boot, sizes.sum()), float64
        How often each unit is in each replicate.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.ndim != 1 or sizes.size == 0 or (sizes < 1).any():
        raise ValueError(f"sizes must be positive counts, got {sizes}")
    m = sizes.size
    if m == 1:
        draws = np.ones((n_boot, 1), dtype=np.int64)
    else:
        draws = rng.multinomial(m, np.full(m, 1.0 / m), size=n_boot)
    out = np.zeros((n_boot, int(sizes.sum())), dtype=np.float64)
    start = 0
    reps = np.arange(n_boot)
    for c, size in enumerate(sizes):
        per_rep = draws[:, c] * size  # units drawn from this cluster in each replicate
        total = int(per_rep.sum())
        if total:
            idx = rng.integers(0, size, size=total)
            flat = np.repeat(reps, per_rep) * size + idx
            out[:, start:start + size] = np.bincount(flat, minlength=n_boot * size).reshape(n_boot, size)
        start += size
    return out


def weighted_mean(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Mean of ``x`` under each row of weights ``W``; NaN entries of ``x`` are left out.

    Returns NaN for a row that puts no weight on any finite entry.
    """
    ok = np.isfinite(x)
    num = W @ np.where(ok, x, 0.0)
    den = W @ ok.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def weighted_median(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Median of ``x`` under each row of integer weights ``W`` (the median of the resampled multiset).

    Like DuckDB's ``median`` (``quantile_cont(x, 0.5)``): with an even total weight, the mean of
    the two middle values. NaN entries of ``x`` are left out.
    """
    ok = np.isfinite(x)
    order = np.flatnonzero(ok)[np.argsort(x[ok], kind="stable")]
    if order.size == 0:
        return np.full(W.shape[0], np.nan)
    xs = x[order]
    cum = np.cumsum(W[:, order], axis=1)
    total = cum[:, -1]
    lo_rank = np.floor((total + 1) / 2.0)  # 1-based ranks of the middle value(s)
    hi_rank = np.floor(total / 2.0) + 1
    i_lo = np.minimum((cum < lo_rank[:, None]).sum(axis=1), order.size - 1)
    i_hi = np.minimum((cum < hi_rank[:, None]).sum(axis=1), order.size - 1)
    med = 0.5 * (xs[i_lo] + xs[i_hi])
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


def percentile_interval(replicates: np.ndarray, n_units: int, level: float = 0.95) -> tuple[float, float]:
    """Expanded percentile interval (:func:`expanded_levels`) from bootstrap replicates.

    NaN replicates (a resample without data) are left out; NaN when none is left.
    """
    reps = np.asarray(replicates, dtype=np.float64)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return (math.nan, math.nan)
    q_lo, q_hi = expanded_levels(n_units, level)
    lo, hi = np.quantile(reps, [q_lo, q_hi])
    return (float(lo), float(hi))

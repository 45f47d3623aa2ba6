"""The interval functions of the findings (qkdb.warehouse.inference), checked against independent computations and by coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from qkdb.warehouse import inference as inf


# --------------------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("k, n", [(0, 6), (3, 6), (6, 6), (1, 100), (31, 3239), (50, 100), (7, 300)])
def test_wilson_is_the_score_interval(k, n):
    lo, hi = inf.wilson_interval(k, n)
    z = stats.norm.ppf(0.975)
    p_hat = k / n

    # Independently: the p whose score statistic |p_hat - p| / sqrt(p(1 - p)/n) equals z.
    def score(p):
        return abs(p_hat - p) / math.sqrt(p * (1 - p) / n) - z

    exp_lo = 0.0 if k == 0 else optimize.brentq(score, 1e-12, min(p_hat, 1 - 1e-12))
    exp_hi = 1.0 if k == n else optimize.brentq(score, max(p_hat, 1e-12), 1 - 1e-12)
    assert (lo, hi) == (pytest.approx(exp_lo, abs=1e-9), pytest.approx(exp_hi, abs=1e-9))


def test_wilson_of_a_handful_of_heads_cannot_confirm_a_rare_rate():
    lo, hi = inf.wilson_interval(0, 6)
    assert lo == 0.0 and hi == pytest.approx(0.390, abs=1e-3)  # 0 of 6 heads: anywhere up to 39%


@pytest.mark.parametrize("bad", [(-1, 5), (6, 5), (1, -2)])
def test_wilson_names_bad_counts(bad):
    with pytest.raises(ValueError, match="0 <= k <= n"):
        inf.wilson_interval(*bad)


def test_fisher_z_matches_scipy():
    rng = np.random.default_rng(0)
    for n, rho in ((10, 0.0), (40, 0.6), (300, -0.4)):
        x = rng.normal(size=n)
        y = rho * x + math.sqrt(1 - rho**2) * rng.normal(size=n)
        res = stats.pearsonr(x, y)
        ci = res.confidence_interval(0.95)  # scipy: Fisher's z transform
        assert inf.fisher_z_interval(res.statistic, n) == (pytest.approx(ci.low), pytest.approx(ci.high))
    with pytest.raises(ValueError, match="at least 4 pairs"):
        inf.fisher_z_interval(0.5, 3)
    assert inf.fisher_z_interval(1.0, 10) == (1.0, 1.0)


def test_expanded_levels_widen_small_samples_and_tend_to_the_plain_ones():
    levels = [inf.expanded_levels(n)[0] for n in (2, 3, 5, 10, 30, 300, 30000)]
    assert all(a < b for a, b in zip(levels, levels[1:]))  # wider for fewer units
    assert levels[0] < 1e-6 and levels[-1] == pytest.approx(0.025, abs=2e-4)
    lo, hi = inf.expanded_levels(20)
    assert lo + hi == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 2"):
        inf.expanded_levels(1)


# --------------------------------------------------------------------------------------- resampling


def test_bootstrap_counts_one_cluster_is_the_ordinary_bootstrap():
    W = inf.bootstrap_counts(np.array([50]), 4000, np.random.default_rng(1))
    assert W.shape == (4000, 50) and (W.sum(axis=1) == 50).all()
    assert W.mean() == pytest.approx(1.0, abs=0.01) and W.var() == pytest.approx(1 - 1 / 50, abs=0.03)


def test_bootstrap_counts_two_stages_draw_whole_clusters():
    sizes = np.array([3, 5, 2, 7])
    W = inf.bootstrap_counts(sizes, 3000, np.random.default_rng(2))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    per_cluster = np.stack([W[:, a:b].sum(axis=1) for a, b in zip(starts, starts[1:])], axis=1)
    # Each cluster is drawn a whole number of times, each draw bringing as many units as it has.
    draws = per_cluster / sizes
    assert np.allclose(draws, np.round(draws)) and (np.round(draws).sum(axis=1) == len(sizes)).all()
    assert W.mean(axis=0) == pytest.approx(np.ones(sizes.sum()), abs=0.08)
    # Deterministic for a seed.
    again = inf.bootstrap_counts(sizes, 3000, np.random.default_rng(2))
    assert (again == W).all()


def test_weighted_statistics_equal_the_statistics_of_the_resampled_multiset():
    rng = np.random.default_rng(3)
    x = rng.lognormal(size=31)
    y = 0.5 * x + rng.normal(size=31)
    x[4] = np.nan  # a head without a value is left out
    W = inf.bootstrap_counts(np.array([31]), 200, rng)
    means, medians, corrs = inf.weighted_mean(W, x), inf.weighted_median(W, x), inf.weighted_corr(W, x, y)
    ok = np.isfinite(x)
    for b in range(W.shape[0]):
        idx = np.repeat(np.arange(31), W[b].astype(int))
        idx = idx[ok[idx]]
        assert means[b] == pytest.approx(x[idx].mean())
        assert medians[b] == pytest.approx(np.median(x[idx]))
        assert corrs[b] == pytest.approx(np.corrcoef(x[idx], y[idx])[0, 1])
    # Uniform weights give the plain statistics (what the SQL view measures).
    one = np.ones((1, 31))
    assert inf.weighted_median(one, x)[0] == pytest.approx(np.nanmedian(x))


def test_weighted_statistics_without_data_are_nan():
    W = np.zeros((2, 3))
    x = np.array([1.0, 2.0, 3.0])
    assert np.isnan(inf.weighted_mean(W, x)).all() and np.isnan(inf.weighted_median(W, x)).all()
    assert np.isnan(inf.weighted_corr(np.ones((1, 3)), x, np.ones(3))).all()  # no variance in y


# --------------------------------------------------------------------------------------- coverage


def _coverage(draw, interval, truth, reps=300) -> float:
    rng = np.random.default_rng(12345)
    hits = 0
    for _ in range(reps):
        lo, hi = interval(draw(rng), rng)
        hits += lo <= truth <= hi
    return hits / reps


def test_wilson_covers_a_rare_share():
    cov = _coverage(lambda r: r.binomial(200, 0.03), lambda k, r: inf.wilson_interval(k, 200), 0.03)
    assert cov >= 0.90


def test_bootstrap_of_a_median_covers_it():
    truth = 1.8  # the simulator's planted median slope ratio: lognormal around log 1.8

    def interval(x, r):
        W = inf.bootstrap_counts(np.array([x.size]), 1000, r)
        return inf.percentile_interval(inf.weighted_median(W, x), x.size)

    cov = _coverage(lambda r: truth * np.exp(0.25 * r.normal(size=40)), interval, truth, reps=200)
    assert cov >= 0.90


def test_two_stage_bootstrap_covers_a_mean_over_heterogeneous_models():
    # Eight models whose heads scatter around a model-level mean: heads of one model are not
    # independent draws of the population, and an interval that treated them so would under-cover.
    truth, between, within = 0.3, 0.08, 0.1
    sizes = np.array([40, 25, 60, 30, 50, 35, 45, 20])

    def draw(r):
        centres = truth + between * r.normal(size=sizes.size)
        return np.concatenate([c + within * r.normal(size=n) for c, n in zip(centres, sizes)])

    def two_stage(x, r):
        W = inf.bootstrap_counts(sizes, 1000, r)
        return inf.percentile_interval(inf.weighted_mean(W, x), sizes.size)

    def heads_only(x, r):
        W = inf.bootstrap_counts(np.array([x.size]), 1000, r)
        return inf.percentile_interval(inf.weighted_mean(W, x), x.size)

    assert _coverage(draw, two_stage, truth, reps=200) >= 0.90
    # The naive head bootstrap misses the between-model variation (the reason for two stages).
    assert _coverage(draw, heads_only, truth, reps=200) < 0.6

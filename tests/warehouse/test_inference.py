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


def test_t_levels_widen_few_degrees_of_freedom_and_tend_to_the_plain_ones():
    levels = [inf.t_levels(df)[0] for df in (1, 2, 4, 9, 29, 299, 29999)]
    assert all(a < b for a, b in zip(levels, levels[1:]))  # wider for fewer degrees of freedom
    assert levels[-1] == pytest.approx(0.025, abs=2e-4)
    # Read at these levels, normal replicates give exactly the t interval.
    q = inf.t_levels(5)[0]
    assert stats.norm.ppf(q) == pytest.approx(stats.t.ppf(0.025, 5))
    lo, hi = inf.t_levels(20)
    assert lo + hi == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 1 degree"):
        inf.t_levels(0)


# --------------------------------------------------------------------------------------- resampling


def test_rao_wu_weights_keep_every_stratum_and_give_the_unbiased_variance():
    strata = np.array([0, 0, 1, 1, 1, 2, 3, 3, 3, 3, 0])  # (any order; stratum 2 has one unit)
    W = inf.rao_wu_weights(strata, 20000, np.random.default_rng(1))
    assert W.shape == (20000, strata.size)
    for h in np.unique(strata):
        members = strata == h
        # Every resample keeps the stratum's total weight: strata are not resampled.
        assert np.allclose(W[:, members].sum(axis=1), members.sum())
    assert (W[:, strata == 2] == 1).all()  # a stratum of one cannot show its spread
    # The resampled stratified mean has the unbiased variance of the stratified mean, sum_h w_h^2 s_h^2 / n_h.
    rng = np.random.default_rng(2)
    x = rng.normal(size=strata.size) * (1 + strata)
    means = W @ x / strata.size
    expected = sum(
        (np.sum(strata == h) / strata.size) ** 2 * np.var(x[strata == h], ddof=1) / np.sum(strata == h)
        for h in np.unique(strata) if np.sum(strata == h) > 1
    )
    assert means.var() == pytest.approx(expected, rel=0.05)
    assert means.mean() == pytest.approx(x.mean(), abs=0.02)
    again = inf.rao_wu_weights(strata, 20000, np.random.default_rng(1))
    assert (again == W).all()  # deterministic for a seed


def test_stratified_covariance_is_the_covariance_of_the_resampled_sums():
    rng = np.random.default_rng(3)
    strata = np.repeat([0, 1, 2], [5, 3, 8])
    T = rng.normal(size=(strata.size, 3)) + strata[:, None]
    W = inf.rao_wu_weights(strata, 40000, np.random.default_rng(4))
    empirical = np.cov((W @ T).T)
    assert inf.stratified_covariance(T, strata) == pytest.approx(empirical, rel=0.06, abs=0.05)


def test_jackknife_over_equal_clusters_is_the_t_interval_on_their_means():
    means = np.array([0.31, 0.18, 0.27, 0.40])
    loo = np.array([(means.sum() - m) / 3 for m in means])
    lo, hi = inf.jackknife_interval(means.mean(), loo)
    ref = stats.t.interval(0.95, 3, loc=means.mean(), scale=stats.sem(means))
    assert (lo, hi) == (pytest.approx(ref[0]), pytest.approx(ref[1]))
    assert all(math.isnan(v) for v in inf.jackknife_interval(0.3, np.array([0.3])))


def test_the_stratified_jackknife_of_a_total_is_the_unbiased_stratified_variance():
    rng = np.random.default_rng(11)
    strata = np.repeat([0, 1, 2, 3], [2, 5, 1, 3])  # (a stratum of one adds nothing)
    t = rng.normal(size=strata.size) * (1 + strata)
    W = inf.stratified_jackknife_weights(strata)
    assert W.shape == (11, 11) and np.allclose(W.sum(axis=1), 11)  # every stratum keeps its total weight
    totals = W @ t
    assert inf.stratified_jackknife_variance(totals, strata) == pytest.approx(
        float(inf.stratified_covariance(t[:, None], strata)[0, 0]), rel=1e-12)
    # written out: sum over strata of n_h/(n_h - 1) * sum of squared deviations from the stratum's mean
    ref = sum(len(v) / (len(v) - 1) * ((v - v.mean()) ** 2).sum() for h in range(4)
              if len(v := t[strata == h]) > 1)
    assert inf.stratified_jackknife_variance(totals, strata) == pytest.approx(ref, rel=1e-12)
    assert math.isnan(inf.stratified_jackknife_variance(np.r_[totals[:-1], np.nan], strata))
    with pytest.raises(ValueError, match="one replicate per unit"):
        inf.stratified_jackknife_variance(totals[:3], strata)


def test_the_stratified_jackknife_t_interval_keeps_its_coverage_over_few_groups():
    # 8 groups in 4 strata of 2 (4 df), a ratio mean of unequal groups: the jackknife-t covers ~95%
    rng = np.random.default_rng(5)
    strata = np.repeat(np.arange(4), 2)
    covered, n = 0, 4000
    for _ in range(n):
        size = rng.integers(2, 6, size=8).astype(float)
        sums = size * (strata * 0.5 + rng.normal(0, 1, size=8) / np.sqrt(size) * 2)
        truth_each = strata * 0.5  # every group's expected mean: the stratum's
        truth = float((size * truth_each).sum() / size.sum())
        W = inf.stratified_jackknife_weights(strata)
        reps = (W @ sums) / (W @ size)
        est = sums.sum() / size.sum()
        half = -inf.t_quantile(0.025, 4) * math.sqrt(inf.stratified_jackknife_variance(reps, strata))
        covered += est - half <= truth <= est + half
    assert 0.93 <= covered / n <= 0.98


def test_weighted_statistics_equal_the_statistics_of_the_resampled_multiset():
    rng = np.random.default_rng(3)
    x = rng.lognormal(size=31)
    y = 0.5 * x + rng.normal(size=31)
    x[4] = np.nan  # a head without a value is left out
    W = rng.multinomial(31, np.full(31, 1 / 31), size=200).astype(float)
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


def test_medians_under_real_weights_and_grouped_weights_agree():
    rng = np.random.default_rng(5)
    x = rng.lognormal(size=40)
    x[[3, 17]] = np.nan
    group = rng.integers(0, 6, size=40)
    Wg = inf.rao_wu_weights(np.zeros(6, dtype=int), 300, rng)  # (weights of 6/5 per draw)
    by_value = inf.weighted_median(Wg[:, group], x)
    assert inf.grouped_weighted_median(Wg, x, group) == pytest.approx(by_value)
    # Whole-number weights: the median of the multiset, as DuckDB's median (the middle two averaged).
    counts = np.array([[2, 0, 1, 1, 0, 2]], dtype=float)
    idx = np.repeat(np.arange(40), counts[0][group].astype(int))
    idx = idx[np.isfinite(x[idx])]
    assert inf.grouped_weighted_median(counts, x, group)[0] == pytest.approx(np.median(x[idx]))
    assert inf.weighted_median(counts[:, group], x)[0] == pytest.approx(np.median(x[idx]))


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
        W = inf.rao_wu_weights(np.zeros(x.size, dtype=int), 1000, r)
        return inf.percentile_interval(inf.weighted_median(W, x), x.size - 1)

    cov = _coverage(lambda r: truth * np.exp(0.25 * r.normal(size=40)), interval, truth, reps=200)
    assert cov >= 0.90


def _models(r, truth=0.3, between=0.08, within=0.1, sizes=(40, 25, 60, 30, 50, 35, 45, 20)):
    centres = truth + between * r.normal(size=len(sizes))
    return [c + within * r.normal(size=n) for c, n in zip(centres, sizes)]


def test_a_bootstrap_over_models_covers_a_mean_over_heterogeneous_models():
    # Eight models whose heads scatter around a model-level mean: heads of one model are not
    # independent draws of the population, and an interval that treated them so would under-cover.
    truth = 0.3

    def over_models(models, r):
        sums = np.array([[m.size, m.sum()] for m in models])
        W = inf.rao_wu_weights(np.zeros(len(models), dtype=int), 1000, r)
        S = W @ sums
        return inf.percentile_interval(S[:, 1] / S[:, 0], len(models) - 1)

    def heads_only(models, r):
        x = np.concatenate(models)
        W = inf.rao_wu_weights(np.zeros(x.size, dtype=int), 1000, r)
        return inf.percentile_interval(inf.weighted_mean(W, x), x.size - 1)

    assert _coverage(_models, over_models, truth, reps=200) >= 0.90
    # The naive head bootstrap misses the between-model variation (the reason models are resampled).
    assert _coverage(_models, heads_only, truth, reps=200) < 0.6


def test_the_jackknife_keeps_its_coverage_over_three_models_where_a_bootstrap_cannot():
    truth = 0.3

    def means(models):
        return np.array([m.mean() for m in models])

    def jackknife(models, r):
        m = means(models)
        loo = np.array([(m.sum() - v) / (m.size - 1) for v in m])
        return inf.jackknife_interval(m.mean(), loo)

    def bootstrap(models, r):
        W = inf.rao_wu_weights(np.zeros(3, dtype=int), 1000, r)
        return inf.percentile_interval(W @ means(models) / 3, 2)

    three = lambda r: _models(r, sizes=(40, 40, 40))  # noqa: E731
    assert _coverage(three, jackknife, truth, reps=300) >= 0.92
    assert _coverage(three, bootstrap, truth, reps=300) < 0.85


def test_weighted_median_by_columns_is_the_median_of_the_gathered_weights():
    rng = np.random.default_rng(5)
    W = inf.rao_wu_weights(np.repeat(np.arange(6), 3), 50, rng)
    x = np.round(rng.normal(size=40), 1)  # (ties: exact halves happen)
    x[3] = np.nan
    unit = rng.integers(0, W.shape[1], size=x.size)
    assert np.array_equal(inf.weighted_median(W, x, columns=unit), inf.weighted_median(W[:, unit], x), equal_nan=True)


def _median_summing_everything(W, x, columns):
    ok = np.isfinite(x)
    order = np.flatnonzero(ok)[np.argsort(x[ok], kind="stable")]
    return inf._median_by_cumsum(W, x[order], np.asarray(columns)[order])


@pytest.mark.parametrize("block", [1, 3, 256])
def test_weighted_median_in_blocks_is_the_median_summed_over_every_value(monkeypatch, block):
    # The median is read from the two blocks of sorted values where each row reaches half; ties,
    # exact halves, NaNs, rows without weight and runs of values a row does not weight at all (the
    # median's neighbour beyond its blocks: summed in full) give what summing every value gives.
    monkeypatch.setattr(inf, "_BLOCK_VALUES", block)
    rng = np.random.default_rng(11)
    for trial in range(400):
        n = int(rng.integers(1, 300))
        units = int(rng.integers(1, n + 1))
        x = rng.normal(size=n)
        if trial % 3 == 0:
            x = np.round(x, 1)
        if trial % 5 == 0:
            x[rng.random(n) < 0.1] = np.nan
        columns = rng.integers(0, units, size=n)
        kind = trial % 4
        if kind == 0:
            W = rng.poisson(1.0, size=(12, units)).astype(float)
        elif kind == 1:
            W = rng.poisson(0.2, size=(12, units)) * 1.5  # (mostly zero: long unweighted runs)
        elif kind == 2:
            W = inf.rao_wu_weights(rng.integers(0, 3, size=units), 12, rng)
        else:
            W = rng.random((12, units)) * (rng.random((12, units)) < 0.5)
        W[0] = 0.0
        got = inf.weighted_median(W, x, columns=columns)
        assert np.array_equal(got, _median_summing_everything(W, x, columns), equal_nan=True), trial


def test_weighted_median_past_its_blocks_falls_back_to_every_value(monkeypatch):
    # Exactly half the weight on the lower values, and none on the next block: the value after the
    # half lies beyond the two blocks read first.
    monkeypatch.setattr(inf, "_BLOCK_VALUES", 2)
    x = np.arange(12, dtype=float)
    W = np.array([[1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2.0]])
    assert inf.weighted_median(W, x)[0] == 0.5 * (2.0 + 10.0)
    counts = np.repeat(x, W[0].astype(int))
    assert inf.weighted_median(W, x)[0] == np.median(counts)

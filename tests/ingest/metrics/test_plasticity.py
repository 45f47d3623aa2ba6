"""Attention plasticity and the recency check (SPEC §4.5): invariances, planted truths, causality, exactness.

Every test can fail: the estimators against analytic values of Gaussian queries, planted heads whose
plasticity must fall with position (drift) or stay flat (content), the pairs' admissibility, and the
logit slopes against a brute-force fit of every query's logits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm, ortho_group

from qkdb.ingest.metrics import plasticity as pl
from qkdb.ingest.metrics.recency import head_recency, query_slopes


def _head(rng, n=3000, d=16, length=4096, drift=0.0, content=1.0, texts=8):
    """Queries and keys with a shared drift along e0 of ``drift`` per token and content noise of sd ``content``."""
    tq = rng.integers(0, length, n).astype(float)
    tk = rng.integers(0, length, n).astype(float)
    Q = content * rng.normal(size=(n, d))
    K = content * rng.normal(size=(n, d))
    Q[:, 0] += 4.0
    K[:, 0] += drift * tk
    return Q, tq, K, tk, rng.integers(0, texts, n)


# ------------------------------------------------------------------------------------------ invariances


def test_empirical_and_gaussian_are_unchanged_by_an_orthogonal_map_of_q_and_k():
    rng = np.random.default_rng(0)
    Q, tq, K, tk, ex = _head(rng, drift=2e-3)
    R = ortho_group.rvs(Q.shape[1], random_state=3)
    a = pl.head_plasticity(Q, tq, K, tk, ex, 4096, np.random.default_rng(7))
    b = pl.head_plasticity(Q @ R, tq, K @ R, tk, ex, 4096, np.random.default_rng(7))
    for est in ("empirical", "gaussian"):
        for r1, r2 in zip(a["bins"], b["bins"]):
            if math.isfinite(r1.ap[est]):
                assert r2.ap[est] == pytest.approx(r1.ap[est], abs=1e-9), (est, r1.bin)
    # the thesis estimator is diagonal in its frame: not rotation-invariant (exempt by name)
    assert any(abs(r1.ap["thesis"] - r2.ap["thesis"]) > 1e-6 for r1, r2 in zip(a["bins"], b["bins"])
               if math.isfinite(r1.ap["thesis"]))


def test_the_empirical_estimator_is_exactly_unchanged_by_a_positive_scale_of_each_query():
    rng = np.random.default_rng(1)
    Q, tq, K, tk, ex = _head(rng, drift=1e-3)
    scaled = Q * rng.uniform(0.1, 10.0, size=(len(Q), 1))
    a = pl.head_plasticity(Q, tq, K, tk, ex, 4096, np.random.default_rng(7))
    b = pl.head_plasticity(scaled, tq, K, tk, ex, 4096, np.random.default_rng(7))
    assert [r.ap["empirical"] for r in a["bins"]] == pytest.approx([r.ap["empirical"] for r in b["bins"]], nan_ok=True,
                                                                    rel=0, abs=0)
    assert a["summary"]["empirical"] == b["summary"]["empirical"]


# ------------------------------------------------------------------------------------- planted truths


def test_gaussian_queries_give_the_analytic_plasticity_by_both_estimators():
    rng = np.random.default_rng(2)
    d = 12
    A = rng.normal(size=(d, d)) / math.sqrt(d)
    cov = A @ A.T + 0.5 * np.eye(d)
    mean = rng.normal(size=d) * 1.5
    keys = rng.normal(size=(400, d))
    a, c = rng.integers(0, 400, 1024), rng.integers(0, 400, 1024)
    keep = a != c
    delta = keys[a[keep]] - keys[c[keep]]
    p = norm.cdf(delta @ mean / np.sqrt(np.einsum("ij,jk,ik->i", delta, cov, delta)))
    truth = float(np.mean(4 * p * (1 - p)))
    Qb = rng.multivariate_normal(mean, cov, size=2000)
    emp = float(pl.empirical_pp(Qb, delta).mean())
    gauss = float(pl.gaussian_pp(*pl.shrunk_moments(Qb), delta).mean())
    assert emp == pytest.approx(truth, abs=0.01) and gauss == pytest.approx(truth, abs=0.01)
    assert 0.2 < truth < 0.9  # (a value the estimators could miss)


def test_the_empirical_pair_plasticity_is_unbiased_for_4p_1_minus_p():
    rng = np.random.default_rng(3)
    delta = np.array([[1.0, 0.0]])
    # P(q . delta > 0) = 0.3 for q0 ~ N(-0.5244, 1): with 10 queries, the plain 4p(1 - p) reads low by 1/n
    est = np.array([pl.empirical_pp(rng.normal(size=(10, 2)) + [norm.ppf(0.3), 0], delta)[0] for _ in range(20000)])
    assert est.mean() == pytest.approx(4 * 0.3 * 0.7, abs=0.006)
    assert (est * 9 / 10).mean() < 4 * 0.3 * 0.7 - 0.05  # without the n/(n-1) it would not be


def test_a_drift_only_head_loses_plasticity_with_position_and_a_content_only_head_keeps_it():
    rng = np.random.default_rng(4)
    drift = pl.head_plasticity(*_head(rng, drift=2e-3), 4096, np.random.default_rng(1))
    content = pl.head_plasticity(*_head(rng, drift=0.0), 4096, np.random.default_rng(1))
    for est in pl.ESTIMATORS:
        prof = [r.ap[est] for r in drift["bins"] if r.bin.kind == "decile" and math.isfinite(r.ap[est])]
        assert prof[0] > prof[-1] + 0.2 and drift["summary"][est]["ap_drop"] > 0.2, est
        assert sum(b < a + 0.02 for a, b in zip(prof, prof[1:])) == len(prof) - 1, est  # falls bin after bin
        flat = [r.ap[est] for r in content["bins"] if r.bin.kind == "decile" and math.isfinite(r.ap[est])]
        assert max(flat) - min(flat) < 0.04 and abs(content["summary"][est]["ap_drop"]) < 0.03, est
        assert content["summary"][est]["ap_overall"] > drift["summary"][est]["ap_last20"] + 0.2, est


def test_the_thesis_estimator_is_its_closed_form():
    rng = np.random.default_rng(5)
    Q, tq, K, tk, ex = _head(rng, drift=0.0)
    Q[:, 3] += 2e-3 * tq  # the queries drift along e3
    frame = pl.drift_frame(Q, tq)
    H = np.eye(Q.shape[1]) - 2 * np.outer(frame.u, frame.u)
    beta = np.polyfit(tq, Q, 1)[0]
    assert H @ (beta / np.linalg.norm(beta)) == pytest.approx(np.eye(Q.shape[1])[0], abs=1e-12)
    y = (Q @ H.T)[:, 0]
    slope, intercept = np.polyfit(tq, y, 1)
    assert (frame.beta, frame.alpha) == (pytest.approx(slope), pytest.approx(intercept))
    assert frame.sigma2 == pytest.approx(np.var(y - intercept - slope * tq))
    sel = (tq >= 2000) & (tq < 2400)
    Qf, tau = Q[sel] @ H.T, tq[sel].mean()
    delta = K[:50] - K[50:100]
    dt = delta @ H.T
    m = dt[:, 0] * (intercept + slope * tau) + dt[:, 1:] @ Qf[:, 1:].mean(axis=0)
    v = dt[:, 0] ** 2 * frame.sigma2 + dt[:, 1:] ** 2 @ Qf[:, 1:].var(axis=0)
    p = norm.cdf(m / np.sqrt(v))
    mean, _, S = pl.shrunk_moments(Q[sel], with_empirical=True)
    assert pl.thesis_pp(frame, mean, S, tau, delta) == pytest.approx(4 * p * (1 - p), rel=1e-10)


def test_the_shrunk_covariance_is_scikit_learns_ledoit_wolf():
    from sklearn.covariance import ledoit_wolf

    rng = np.random.default_rng(12)
    for n, d in ((300, 40), (50, 64), (2000, 8)):
        X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
        mean, cov = pl.shrunk_moments(X)
        assert mean == pytest.approx(X.mean(axis=0), rel=1e-12)
        assert cov == pytest.approx(ledoit_wolf(X)[0], rel=1e-10, abs=1e-12)


# ------------------------------------------------------------------------------------------- causality


def test_no_pair_reaches_a_key_at_or_after_its_bins_first_query_or_outside_its_window():
    rng = np.random.default_rng(6)
    tk = rng.integers(0, 5000, 3000).astype(float)
    text = rng.integers(0, 5, 3000)
    for before, window_from in ((1200.0, None), (4000.0, 3100.0), (30.0, None)):
        a, c = pl.draw_pairs(tk, text, before, rng, max_pairs=10**6, window_from=window_from)
        assert np.all(tk[a] < before) and np.all(tk[c] < before) and np.all(text[a] == text[c]) and np.all(a != c)
        if window_from is not None:
            assert np.all(tk[a] >= window_from) and np.all(tk[c] >= window_from)
        # every admissible pair, once each, when there are few enough
        ok = (tk < before) & (tk >= (window_from if window_from is not None else -np.inf))
        assert a.size == sum(m * (m - 1) // 2 for m in np.bincount(text[ok], minlength=5))
        assert len(set(zip(a.tolist(), c.tolist()))) == a.size
    a, c = pl.draw_pairs(tk, text, 4000.0, rng, max_pairs=1024)
    assert a.size == 1024 and len(set(zip(a.tolist(), c.tolist()))) == 1024
    # through a head: a bin's pairs are all before its lowest query (bins whose queries start later than
    # every key have pairs; the first decile, whose first query is at 0, has none)
    Q, tq, K, _, ex = _head(np.random.default_rng(9))
    got = pl.head_plasticity(Q, tq, K, tk[:len(K)], text[:len(K)], 5000, np.random.default_rng(2), window=500)
    first = got["bins"][0]
    assert first.n_pairs == 0 and not math.isfinite(first.ap["empirical"]) and "no key pair" in first.why
    assert "decile 0: no key pair before its queries" in got["notes"]


def test_bins_are_deciles_and_length_bins_within_the_context():
    bins = pl.context_bins(8192)
    deciles = [b for b in bins if b.kind == "decile"]
    lengths = [b for b in bins if b.kind == "length"]
    assert [(b.lo, b.hi) for b in deciles][:2] == [(0, 819), (819, 1638)] and deciles[-1].hi == 8192
    assert [(b.lo, b.hi) for b in lengths] == [(0, 1024), (1024, 2048), (2048, 4096), (4096, 8192)]
    assert lengths[1].context == "(1024, 2048] tokens" and lengths[0].context == "[1, 1024] tokens"
    assert [b.kind for b in pl.context_bins(1000)].count("length") == 0
    with pytest.raises(ValueError, match="at least 10 tokens"):
        pl.context_bins(9)


def test_a_bin_with_fewer_than_32_queries_has_no_value_and_says_why():
    rng = np.random.default_rng(8)
    Q, tq, K, tk, ex = _head(rng, n=200)
    got = pl.head_plasticity(Q, tq, K, tk, ex, 4096, np.random.default_rng(0))
    thin = [r for r in got["bins"] if r.bin.kind == "decile" and r.n_q < pl.MIN_QUERIES]
    assert thin and all(not math.isfinite(r.ap["empirical"]) and r.why.startswith("fewer than 32") for r in thin)


# ------------------------------------------------------------------------------------------- recency


def test_every_querys_logit_slope_is_the_ols_slope_of_its_logits_over_its_texts_earlier_keys():
    rng = np.random.default_rng(10)
    Q, tq, K, tk, ex = _head(rng, n=400, drift=1e-3)
    q_text = rng.integers(0, 8, len(Q))
    slope, n = query_slopes(Q, tq, q_text, K, tk, ex)
    checked = 0
    for i in range(len(Q)):
        keys = (ex == q_text[i]) & (tk < tq[i])
        assert n[i] == keys.sum()
        if keys.sum() < 2 or np.ptp(tk[keys]) == 0:
            assert math.isnan(slope[i])
            continue
        assert slope[i] == pytest.approx(np.polyfit(tk[keys], K[keys] @ Q[i], 1)[0], rel=1e-9, abs=1e-12)
        checked += 1
    assert checked > 300


def test_a_planted_recency_term_is_what_the_logits_show():
    # keys drift along a at alpha_k per token, queries sit at mu_q_a on a and do not drift: the logits
    # rise by mu_q_a * alpha_k per token of key position, the seed's bias_strength
    rng = np.random.default_rng(11)
    n, d, mu_q_a, alpha_k = 4000, 16, 5.0, 3e-3
    tq, tk = rng.integers(0, 4096, n).astype(float), rng.integers(0, 4096, n).astype(float)
    Q = rng.normal(size=(n, d))
    Q[:, 0] += mu_q_a
    K = rng.normal(size=(n, d))
    K[:, 0] += alpha_k * tk
    got = head_recency(Q, tq, rng.integers(0, 8, n), K, tk, rng.integers(0, 8, n), mu_q_a * alpha_k)
    assert got["logit_slope"] == pytest.approx(mu_q_a * alpha_k, rel=0.03)
    assert got["slope_ratio"] == pytest.approx(1.0, rel=0.03) and 0 < got["logit_slope_se"] < 0.02 * got["logit_slope"]
    assert got["n_texts"] == 8 and got["n_queries"] > 0.9 * n


def test_every_decile_is_the_brute_force_mean_over_all_its_admissible_pairs():
    # Independent of the sampler: every pair of keys of one text before the bin's first query,
    # enumerated with loops; p from the sign of q.delta over the bin's queries (ties 1/2), the
    # Gaussian from scikit-learn's Ledoit-Wolf and scipy's normal CDF.
    from scipy.stats import norm
    from sklearn.covariance import LedoitWolf

    rng = np.random.default_rng(12)
    Q, tq, K, tk, ex = _head(rng, n=400, d=6, length=2000, drift=3e-3, texts=4)
    K, tk, ex = K[:150], tk[:150], ex[:150]  # (400 queries: 40 a decile; 150 keys keep the loops short)
    got = pl.head_plasticity(Q, tq, K, tk, ex, 2000, np.random.default_rng(0), max_pairs=10**7)
    checked = 0
    for b in got["bins"]:
        if b.bin.kind != "decile" or not math.isfinite(b.ap["empirical"]):
            continue
        inside = (tq >= b.bin.lo) & (tq < b.bin.hi)
        Qb, first = Q[inside], tq[inside].min()
        keys = [i for i in range(len(K)) if tk[i] < first]
        pairs = [(i, j) for x, i in enumerate(keys) for j in keys[x + 1:] if ex[i] == ex[j]]
        n = len(Qb)
        lw = LedoitWolf().fit(Qb)
        emp, gau = [], []
        for i, j in pairs:
            s = Qb @ (K[i] - K[j])
            p = (np.sum(s > 0) + 0.5 * np.sum(s == 0)) / n
            emp.append(4 * p * (1 - p) * n / (n - 1))
            delta = K[i] - K[j]
            pg = norm.cdf(delta @ lw.location_ / np.sqrt(delta @ lw.covariance_ @ delta))
            gau.append(4 * pg * (1 - pg))
        assert b.n_pairs == len(pairs)
        assert b.ap["empirical"] == pytest.approx(np.mean(emp), rel=1e-12)
        assert b.ap["gaussian"] == pytest.approx(np.mean(gau), rel=1e-9)
        checked += 1
    assert checked >= 3


# ------------------------------------------------------------------------------ the one-product bin (issue 48)


def test_one_product_per_bin_gives_each_estimators_own_numbers():
    # bin_estimates (what head_plasticity runs) against the three estimators' own functions, pair by
    # pair, on queries with a drift, a mean and ties (integer coordinates make qᵀδ = 0 happen)
    rng = np.random.default_rng(21)
    for n, d, n_s in ((200, 16, 64), (80, 64, 80), (40, 3, 2)):
        tq = rng.integers(0, 4000, n).astype(float)
        Q = rng.integers(-3, 4, size=(n, d)).astype(float) + 1.5
        Q[:, 1] += 1e-3 * tq
        delta = rng.integers(-2, 3, size=(300, d)).astype(float)
        frame = pl.drift_frame(Q, tq)
        sample = Q[rng.choice(n, size=n_s, replace=False)]
        e, g, t = pl.bin_estimates(Q, sample, delta, frame, 1234.5)
        mean, cov, S = pl.shrunk_moments(Q, with_empirical=True)
        assert np.array_equal(e, pl.empirical_pp(sample, delta))
        assert g == pytest.approx(pl.gaussian_pp(mean, cov, delta), rel=1e-11, abs=1e-14)
        assert t == pytest.approx(pl.thesis_pp(frame, mean, S, 1234.5, delta), rel=1e-11, abs=1e-14)
    with pytest.raises(ValueError, match="at least 2 queries"):
        pl.bin_estimates(Q, Q[:1], delta, frame, 0.0)
    with pytest.raises(ValueError, match="got neither"):
        pl.bin_estimates(None, Q, delta, frame, 0.0)


def test_a_key_index_draws_the_same_pairs_as_grouping_anew():
    rng = np.random.default_rng(22)
    tk = rng.integers(0, 3000, 2500).astype(float)
    text = rng.choice(np.array([7, 3, 11, 5]), 2500)  # (text ids neither dense nor sorted)
    keys = pl.KeyIndex.of(tk, text)
    for before, window_from in ((800.0, None), (2900.0, 2000.0), (5.0, None)):
        a1, c1 = pl.draw_pairs(tk, text, before, np.random.default_rng(1), 1024, window_from)
        a2, c2 = pl.draw_pairs(tk, text, before, np.random.default_rng(1), 1024, window_from, keys=keys)
        assert np.array_equal(a1, a2) and np.array_equal(c1, c2)
        # (and what the pairs are: of one text, a before c in the key order, each once)
        assert np.all(text[a1] == text[c1]) and np.all(a1 < c1)
        assert len(set(zip(a1.tolist(), c1.tolist()))) == a1.size


def test_the_blocked_prefix_sums_are_numpys_cumsum():
    from qkdb.ingest.metrics.recency import _prefix_rows

    rng = np.random.default_rng(23)
    for n in (1, 63, 64, 65, 1000):
        X = rng.normal(size=(n, 5))
        s = rng.random(n)
        want = np.vstack([np.zeros(5), np.cumsum(X, axis=0)])
        assert _prefix_rows(X) == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert _prefix_rows(X, scale=s) == pytest.approx(np.vstack([np.zeros(5), np.cumsum(X * s[:, None], axis=0)]),
                                                         rel=1e-12, abs=1e-12)


def test_a_key_heads_shared_prefix_gives_each_query_head_its_own_slopes():
    # GQA: the query heads of one key head share its KeyPrefix (built once); each head's slopes are
    # the ones it gets alone
    from qkdb.ingest.metrics.recency import KeyPrefix

    rng = np.random.default_rng(24)
    Q1, tq, K, tk, ex = _head(rng, n=1500, d=8, drift=1e-3)
    Q2 = rng.normal(size=Q1.shape)
    keys = KeyPrefix.of(K, tk, ex)
    for Q in (Q1, Q2):
        alone = query_slopes(Q, tq, ex, K, tk, ex)
        shared = query_slopes(Q, tq, ex, None, None, None, keys=keys)
        assert np.array_equal(alone[1], shared[1])
        assert np.array_equal(np.isnan(alone[0]), np.isnan(shared[0]))
        assert np.nanmax(np.abs(alone[0] - shared[0])) == 0.0


# --------------------------------------------------------------- float32 signs, moments from runs (issue 48)


def _between_precisions(rng, n_pairs=300, n_q=40, d=64):
    """Queries and pair differences where many products sit within float32's round-off of zero (and some are 0)."""
    sample = rng.normal(size=(n_q, d)) + 3.0
    delta = rng.normal(size=(n_pairs, d))
    q = sample[rng.integers(0, n_q, n_pairs)]
    # each δ made almost orthogonal to one query: q·δ of the order of 1e-9 of ‖q‖‖δ‖, either sign
    delta -= ((delta @ q.T).diagonal() / (q * q).sum(axis=1))[:, None] * q
    delta += rng.choice([-1.0, 1.0], n_pairs)[:, None] * 1e-9 * q / np.linalg.norm(q, axis=1)[:, None]
    delta[:5] = 0.0  # (duplicate keys: every product exactly 0, a tie)
    sample[0] = 0.0  # (a zero query: ties with every pair)
    return sample, delta


def test_float32_signs_are_float64s_even_where_float32_alone_gets_them_wrong():
    rng = np.random.default_rng(31)
    for _ in range(3):
        sample, delta = _between_precisions(rng)
        want = np.sign(delta @ sample.T).sum(axis=1)
        got = pl.sign_sums(sample, delta)
        assert np.array_equal(got, want)
        # (the data reach the fallback: float32 on its own disagrees with float64 on some pairs)
        alone = np.sign(delta.astype(np.float32) @ sample.T.astype(np.float32)).sum(axis=1)
        assert not np.array_equal(alone, want)
    # every pair a tie (repeated keys, as a model without RoPE gives on repeated tokens)
    assert np.array_equal(pl.sign_sums(sample, np.zeros_like(delta)), np.zeros(len(delta)))
    # integer coordinates: exact zeros (ties) everywhere float64 finds them
    Q = rng.integers(-2, 3, size=(50, 8)).astype(float)
    D = rng.integers(-2, 3, size=(400, 8)).astype(float)
    assert np.array_equal(pl.sign_sums(Q, D), np.sign(D @ Q.T).sum(axis=1))


@pytest.mark.parametrize("scale", [1e-250, 1e-30, 1e30, 1e250])
def test_float32_signs_hold_at_any_scale_of_the_vectors(scale):
    # (beyond float32's range once scaled, the product is taken in float64 throughout)
    sample, delta = _between_precisions(np.random.default_rng(32))
    assert np.array_equal(pl.sign_sums(sample * scale, delta / scale), np.sign(delta @ sample.T).sum(axis=1))
    assert np.array_equal(pl.sign_sums(sample, delta * scale), np.sign((delta * scale) @ sample.T).sum(axis=1))


def test_the_empirical_estimator_is_unchanged_when_its_product_sits_between_precisions():
    sample, delta = _between_precisions(np.random.default_rng(33))
    frame = pl.drift_frame(sample, np.arange(len(sample), dtype=float))
    e, _, _ = pl.bin_estimates(sample, sample, delta, frame, 10.0)
    assert np.array_equal(e, pl.empirical_pp(sample, delta))


def test_a_bins_moments_from_runs_are_its_own():
    # every union of consecutive runs against shrunk_moments of its rows, on drifting queries far from
    # the origin (the runs' means differ: the parallel-axis terms carry the drift)
    rng = np.random.default_rng(34)
    for n, d in ((900, 16), (300, 48)):
        t = np.sort(rng.uniform(0, 4000, n))
        X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, d) + 50.0
        X[:, 0] += 0.02 * t
        edges = np.unique(np.concatenate([[0, n], rng.choice(np.arange(1, n), 6, replace=False)]))
        runs = pl.RunMoments.of(X, edges)
        for i in range(len(edges) - 1):
            for j in range(i + 1, len(edges)):
                lo, hi = edges[i], edges[j]
                mean, cov, S = runs.moments(lo, hi)
                want_mean, want_cov, want_S = pl.shrunk_moments(X[lo:hi], with_empirical=True)
                assert mean == pytest.approx(want_mean, rel=1e-13)
                assert S == pytest.approx(want_S, rel=1e-9, abs=1e-12 * np.abs(want_S).max())
                assert cov == pytest.approx(want_cov, rel=1e-9, abs=1e-12 * np.abs(want_cov).max())
    with pytest.raises(ValueError, match="not whole runs"):
        runs.moments(int(edges[0]) + 1, int(edges[-1]))
    with pytest.raises(ValueError, match="no empty run"):
        pl.RunMoments.of(X, [0, 5, 5, 10])

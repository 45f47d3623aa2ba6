"""The significance test behind complement.active and rope_planes.rotating (ingest/metrics/circular.py).

Checked against an independent computation (the permutation covariance written out term by term,
a Monte Carlo permutation distribution, scipy's χ² and Γ), against its calibration under H0 with
non-uniform phases, and against planted rings (and their absence) from the simulator.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import special, stats
from helpers.tables import build_tables, make_connection

from qkdb import api
from qkdb.ingest.metrics.circular import (
    PLANE_ALPHA,
    best_on_grid,
    chi2_sf_even,
    circular_linear_r,
    combine_kinds,
    fit_frequency,
    holm,
    phase_statistic,
    phasors,
    search_p_value,
)
from qkdb.ingest.metrics.complement import complement_pairs
from qkdb.ingest.metrics.rope_planes import rope_frequencies, rope_planes
from qkdb.ingest.capture.simulate import Ranges, draw_key_params, draw_query_params, simulate, simulate_head


def blob(rng: np.random.Generator, n: int, m: int, offset: complex = 0.0, elongation: float = 3.0) -> np.ndarray:
    """Unit phasors of m independent elongated Gaussian clouds at an offset: phases far from uniform."""
    z = elongation * rng.standard_normal((n, m)) + 1j * rng.standard_normal((n, m)) + offset
    return z / np.abs(z)


def log_uniform(rng: np.random.Generator, n: int, T: int = 2048) -> np.ndarray:
    """Integer positions drawn log-uniformly in [0, T): most of them early, as `qkdb sniff` samples them."""
    return np.floor(np.exp(rng.random(n) * math.log(T))) - 1.0


def binomial_bounds(n: int, p: float, z: float = 3.3) -> tuple[float, float]:
    """A ±z·sd interval for the rate of n Bernoulli(p) draws (z = 3.3: a false alarm once in ~1,000 runs)."""
    sd = math.sqrt(p * (1 - p) / n)
    return p - z * sd, p + z * sd


# ------------------------------------------------------------------ the statistic itself


def _permutation_cov_direct(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """2×2 permutation covariance of (Re S, Im S), S = Σ A_n B_π(n), written out term by term.

    Re S = Σ_n (a_r b_r − a_i b_i), Im S = Σ_n (a_r b_i + a_i b_r); for centred f, g, h, k the
    permutation covariance of Σ f_n g_π(n) and Σ h_n k_π(n) is (Σ f h)(Σ g k)/(n − 1).
    """
    n = len(A)
    ar, ai, br, bi = A.real, A.imag, B.real, B.imag
    re_terms = [(ar, br, 1.0), (ai, bi, -1.0)]
    im_terms = [(ar, bi, 1.0), (ai, br, 1.0)]

    def cov(X, Y):
        return sum(sx * sy * (f @ h) * (g @ k) for f, g, sx in X for h, k, sy in Y) / (n - 1)

    return np.array([
        [cov(re_terms, re_terms), cov(re_terms, im_terms)],
        [cov(im_terms, re_terms), cov(im_terms, im_terms)],
    ])


def _direct_statistic(u: np.ndarray, t: np.ndarray, omega: float) -> float:
    A = u - u.mean()
    e = np.exp(-1j * omega * t)
    B = e - e.mean()
    S = np.sum(A * B)
    v = np.array([S.real, S.imag])
    return float(v @ np.linalg.solve(_permutation_cov_direct(A, B), v))


@pytest.mark.parametrize("omega", [0.003, 0.05, 0.7, 2.5, math.pi])
def test_statistic_matches_the_mahalanobis_form_written_out(omega):
    rng = np.random.default_rng(1)
    n = 150
    u = blob(rng, n, 3, offset=np.array([0.0, 1.5, -2 + 1j]), elongation=np.array([1.0, 4.0, 8.0]))
    t = log_uniform(rng, n, 1000)
    T = phase_statistic(u, phasors(np.full(3, omega), t), t)
    for c in range(3):
        assert T[c] == pytest.approx(_direct_statistic(u[:, c], t, omega), rel=1e-9)


def test_permutation_moments_match_monte_carlo():
    rng = np.random.default_rng(2)
    n, P = 40, 20_000
    u = blob(rng, n, 1, offset=1.0, elongation=4.0)[:, 0]
    t = log_uniform(rng, n, 500)
    A = u - u.mean()
    for omega in (0.004, 0.8):  # a slow ω (B nearly on a line) and a fast one
        e = np.exp(-1j * omega * t)
        B = e - e.mean()
        perm = np.argsort(rng.random((P, n)), axis=1)
        Bp = np.exp(-1j * omega * t[perm])
        S = (Bp - Bp.mean(axis=1, keepdims=True)) @ A
        abs2 = np.sum(np.abs(A) ** 2) * np.sum(np.abs(B) ** 2) / (n - 1)
        pseudo = np.sum(A * A) * np.sum(B * B) / (n - 1)
        assert abs(S.mean()) < 0.03 * math.sqrt(abs2)
        assert np.mean(np.abs(S) ** 2) == pytest.approx(abs2, rel=0.03)
        assert abs(np.mean(S * S) - pseudo) < 0.03 * abs2
        mc = np.cov(np.stack([S.real, S.imag]))
        formula = np.array([[abs2 + pseudo.real, pseudo.imag], [pseudo.imag, abs2 - pseudo.real]]) / 2
        assert np.allclose(mc, formula, atol=0.03 * abs2)
        assert np.allclose(formula, _permutation_cov_direct(A, B), rtol=1e-10, atol=1e-12 * abs2)


def test_moment_matched_p_value_agrees_with_a_permutation_p_value():
    # Small samples (60 vectors per kind), a weak planted relation so that p-values are moderate:
    # the χ²₄ p-value of T_q + T_k against 2,000 joint permutations of the positions.
    for seed, omega in enumerate((0.003, 0.05, 0.3, 1.7)):
        rng = np.random.default_rng(100 + seed)
        n, P = 60, 2000
        uq, uk = blob(rng, n, 1, 1.0)[:, 0], blob(rng, n, 1, -0.5j)[:, 0]
        tq, tk = log_uniform(rng, n, 500), log_uniform(rng, n, 500)
        uq = uq * np.exp(1.2j * np.cos(omega * tq + 0.3))

        def stat(tq_, tk_):
            # One column per permutation: the same phasors against permuted positions.
            Eq = np.exp(-1j * omega * tq_).T
            Ek = np.exp(-1j * omega * tk_).T
            return (phase_statistic(np.repeat(uq[:, None], tq_.shape[0], 1), Eq, tq)
                    + phase_statistic(np.repeat(uk[:, None], tk_.shape[0], 1), Ek, tk))

        T0 = stat(tq[None], tk[None])[0]
        Tp = stat(tq[np.argsort(rng.random((P, n)), 1)], tk[np.argsort(rng.random((P, n)), 1)])
        p_mc = (1 + np.sum(Tp >= T0)) / (P + 1)
        p = chi2_sf_even(T0, 4)
        assert 0.01 < p < 0.9  # the comparison is about the body and the tail, not p ≈ 1
        assert abs(p - p_mc) < 0.02 + 0.15 * p_mc, (omega, p, p_mc)


def test_slow_limit_is_mardias_test():
    # As ω → 0 the statistic becomes (n − 1)·R² of the circular–linear correlation of the kind.
    rng = np.random.default_rng(3)
    n = 400
    t = log_uniform(rng, n)
    u = blob(rng, n, 2, offset=0.7) * np.exp(1j * np.array([0.0, 2.0]) * t[:, None] / 2048)
    R = circular_linear_r(u.real, u.imag, t)
    expected = (n - 1) * R**2
    at_zero = phase_statistic(u, phasors(np.zeros(2), t), t)
    assert np.allclose(at_zero, expected, rtol=1e-10)
    # The general formula just above the switch to the limit (ω·sd(t) = 1e-5 rad): it approaches
    # the limit as the curvature of exp(−iωt) over the positions, ω·max(t), vanishes.
    omega = 2e-7
    assert 1e-10 < 1 - abs(np.mean(np.exp(-1j * omega * t))) ** 2  # not the limit branch
    nearly = phase_statistic(u, phasors(np.full(2, omega), t), t)
    assert np.allclose(nearly, expected, rtol=2 * omega * t.max())


def test_degenerate_inputs_give_nan_and_never_flag():
    rng = np.random.default_rng(4)
    t = rng.integers(0, 100, 50).astype(float)
    u = np.exp(2j * np.pi * rng.random((50, 3)))
    u[:, 1] = np.exp(0.3j)  # every phase equal: no spread
    u[:, 2] = np.where(rng.random(50) < 0.5, 1.0, -1.0)  # phases on a line ...
    T = phase_statistic(u, phasors(np.array([0.2, 0.2, math.pi]), t), t)  # ... and rotations too (ω = π)
    assert np.isfinite(T[0]) and np.isnan(T[1]) and np.isnan(T[2])
    assert np.isnan(phase_statistic(u[:2], phasors(np.full(3, 0.2), t[:2]), t[:2])).all()  # n < 3
    const = np.full(50, 7.0)
    assert np.isnan(phase_statistic(u, phasors(np.full(3, 0.2), const), const)).all()
    stat, df = combine_kinds(np.array([np.nan, 3.0, np.nan]), np.array([np.nan, np.nan, 5.0]))
    assert np.isnan(stat[0]) and list(df) == [0, 2, 2] and list(stat[1:]) == [3.0, 5.0]
    p = search_p_value(stat, df, n_frequencies=10)
    assert np.isnan(p[0]) and np.isnan(holm(p)[0])


# ------------------------------------------------------------------ p-values and Holm


def test_chi2_survival_matches_scipy():
    x = np.array([0.0, 0.5, 3.0, 9.49, 30.0, 200.0])
    assert np.allclose(chi2_sf_even(x, np.full(6, 4)), stats.chi2.sf(x, 4), rtol=1e-12, atol=0)
    assert np.allclose(chi2_sf_even(x, np.full(6, 2)), stats.chi2.sf(x, 2), rtol=1e-12, atol=0)
    assert np.isnan(chi2_sf_even(x, np.zeros(6, int))).all()


def test_search_p_value_bounds():
    u = np.array([5.0, 20.0, 40.0, 80.0])
    for df in (2, 4):
        d = np.full(4, df)
        p = stats.chi2.sf(u, df)
        assert np.allclose(search_p_value(u, d, n_frequencies=50), np.minimum(1, 50 * p))
        V = 1234.5
        s = df
        davies = p + V * u ** ((s - 1) / 2) * np.exp(-u / 2) * 2 ** (-s / 2) / special.gamma(s / 2)
        assert np.allclose(search_p_value(u, d, bandwidth=V), np.minimum(1, davies), rtol=1e-12)
        both = search_p_value(u, d, n_frequencies=50, bandwidth=V)
        assert np.allclose(both, np.minimum(1, np.minimum(50 * p, davies)))
    assert search_p_value(np.array([1.0]), np.array([4]))[0] == pytest.approx(stats.chi2.sf(1.0, 4))


def _holm_loop(p):
    """Holm's procedure as usually written: step down through the sorted p-values."""
    idx = [i for i in range(len(p)) if not math.isnan(p[i])]
    m = len(idx)
    order = sorted(idx, key=lambda i: p[i])
    out = [math.nan] * len(p)
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[i]))
        out[i] = running
    return out


def test_holm_against_a_loop():
    rng = np.random.default_rng(5)
    for trial in range(50):
        m = int(rng.integers(1, 40))
        p = rng.random(m) ** rng.uniform(1, 6)
        p[rng.random(m) < 0.1] = np.nan
        if trial == 0:
            p[:3] = 0.02  # ties
        got = holm(p)
        assert np.allclose(got, _holm_loop(list(p)), equal_nan=True, rtol=1e-12)


# ------------------------------------------------------------------ calibration under H0


def test_false_positive_rate_under_h0_with_non_uniform_phases():
    """500 draws of elongated clouds at Q/K offsets, log-uniform positions, no relation: rate ≈ α."""
    rng = np.random.default_rng(6)
    M, nq, nk = 500, 300, 200
    uq, uk = blob(rng, nq, M, 1.5), blob(rng, nk, M, -1.0 + 1.0j)
    tq, tk = log_uniform(rng, nq), log_uniform(rng, nk)
    omega = np.geomspace(1e-4, 3.0, M)  # slow drifts to fast rings
    stat, df = combine_kinds(phase_statistic(uq, phasors(omega, tq), tq), phase_statistic(uk, phasors(omega, tk), tk))
    p = search_p_value(stat, df)
    for alpha in (0.05, 0.01):
        lo, hi = binomial_bounds(M, alpha)
        assert lo <= np.mean(p < alpha) <= hi, alpha
    # What the old rule saw in the same data: uncentred coherence ≥ 0.05 at a turning frequency.
    rho_q = np.abs((uq * phasors(omega, tq)).mean(0))
    rho_k = np.abs((uk * phasors(omega, tk)).mean(0))
    r2 = (nq * rho_q**2 + nk * rho_k**2) / (nq + nk)
    turning = omega * 2047 / (2 * math.pi) >= 1
    assert np.mean(r2[turning] >= 0.05) > 0.05  # a calibrated threshold is not a test


def test_the_pseudo_variance_matters():
    """Without E[S²] (a circular Gaussian approximation) slow frequencies on elongated clouds over-reject."""
    rng = np.random.default_rng(7)
    M, nq, nk = 2000, 300, 200
    uq, uk = blob(rng, nq, M, 0.0, 10.0), blob(rng, nk, M, 0.0, 10.0)
    tq, tk = log_uniform(rng, nq), log_uniform(rng, nk)
    omega = np.geomspace(1e-5, 2e-4, M)  # B = e − mean(e) nearly on a line

    def circular(u, t):
        e = phasors(omega, t)
        A, B = u - u.mean(0), e - e.mean(0)
        v = np.sum(np.abs(A) ** 2, 0) * np.sum(np.abs(B) ** 2, 0) / (len(t) - 1)
        return 2 * np.abs(np.sum(A * B, 0)) ** 2 / v

    naive = chi2_sf_even(circular(uq, tq) + circular(uk, tk), np.full(M, 4))
    stat, df = combine_kinds(phase_statistic(uq, phasors(omega, tq), tq), phase_statistic(uk, phasors(omega, tk), tk))
    ours = chi2_sf_even(stat, df)
    lo, hi = binomial_bounds(M, 0.01)
    assert lo <= np.mean(ours < 0.01) <= hi
    assert np.mean(naive < 0.01) > hi


@pytest.mark.parametrize("signed", [True, False])
def test_search_correction_keeps_the_level(signed):
    """A frequency found by the exhaustive periodogram: Davies' bound keeps the level; counting the
    position span as the number of independent frequencies (Bonferroni) does not."""
    rng = np.random.default_rng(8 + signed)
    n, m, T, reps = 600, 30, 1024, 40
    p_davies, p_span = [], []
    for _ in range(reps):
        tq, tk = rng.integers(0, T, n).astype(float), rng.integers(0, T, n).astype(float)
        # Uniform phases: the search then lands where the centred statistic is largest (worst case).
        uq, uk = np.exp(2j * np.pi * rng.random((n, m))), np.exp(2j * np.pi * rng.random((n, m)))
        w, _ = fit_frequency(uq, tq, uk, tk, signed=signed)
        stat, df = combine_kinds(phase_statistic(uq, phasors(w, tq), tq), phase_statistic(uk, phasors(w, tk), tk))
        band = (2 if signed else 1) * math.pi
        sd = max(tq.std(), tk.std())
        p_davies.append(search_p_value(stat, df, bandwidth=band * sd))
        p_span.append(search_p_value(stat, df, n_frequencies=(T - 1) * (2 if signed else 1) // 2))
    p_davies, p_span = np.concatenate(p_davies), np.concatenate(p_span)
    N = p_davies.size
    assert np.mean(p_davies < 0.05) <= binomial_bounds(N, 0.05)[1]
    assert np.mean(p_davies < 0.05) > 0.01  # not vacuous either
    if signed:
        assert np.mean(p_span < 0.05) > binomial_bounds(N, 0.05)[1]


def test_grid_search_statistic_is_the_statistic_at_the_chosen_frequency():
    rng = np.random.default_rng(9)
    n, m = 400, 6
    uq, uk = blob(rng, n, m, 1.0), blob(rng, n, m, -1j)
    tq, tk = log_uniform(rng, n), log_uniform(rng, n)
    uq[:, 0] = np.exp(1j * (0.02 * tq + 0.3 * rng.standard_normal(n)))  # one column is a ring
    grid = np.array([0.001, 0.02, 0.3, 1.1])
    omega, r2, Tq, Tk = best_on_grid(uq, tq, uk, tk, grid, signed=True, statistic=True)
    assert omega[0] == pytest.approx(0.02)
    assert np.allclose(Tq, phase_statistic(uq, phasors(omega, tq), tq), rtol=1e-9)
    assert np.allclose(Tk, phase_statistic(uk, phasors(omega, tk), tk), rtol=1e-9)
    # Under H0 the grid's p-value (Bonferroni over its 8 signed frequencies) keeps the level.
    M = 600
    uq, uk = blob(rng, n, M, 1.0), blob(rng, n, M, -1j)
    _, _, Tq, Tk = best_on_grid(uq, tq, uk, tk, grid, signed=True, statistic=True)
    p = search_p_value(*combine_kinds(Tq, Tk), n_frequencies=8)
    assert np.mean(p < 0.05) <= binomial_bounds(M, 0.05)[1]


# ------------------------------------------------------------------ the flags on whole heads


def test_complement_blob_without_relation_is_not_active():
    """The reported failure: pairs with angle_r of a few hundredths and omega_r_squared ≈ 0.05, no relation.

    The old rule (ring ≥ 0.5, and ρ² ≥ 0.05 at a frequency making a turn, or angle_r ≥ 0.5) was
    calibrated for ~1,000 vectors per kind; the chance level of the best ρ² of an exhaustive search
    is ~ln(number of frequencies)/n, so with fewer vectors (here 120 per kind, as `--fit-rows 256`
    gives) it calls a quarter of these pure-noise pairs active. The test pays for the search.
    """
    rng = np.random.default_rng(10)
    n, d, T = 120, 8, 2048
    old = new = 0
    for _ in range(20):
        scales = [1, 1, 3, 1.5, 1.2, 1, 0.8, 0.6]
        Q, K = rng.standard_normal((n, d)) * scales, rng.standard_normal((n, d)) * scales
        Q[:, 2:4] += [1.0, 0.5]
        K[:, 2:4] -= [1.0, 0.5]
        tq, tk = rng.integers(0, T, n).astype(float), rng.integers(0, T, n).astype(float)
        cols, _ = complement_pairs(Q, tq, K, tk, np.eye(d)[0], np.eye(d)[1], rng=rng)
        turns = cols["omega"] * (T - 1) / (2 * math.pi)
        fast = (cols["omega_r_squared"] >= 0.05) & (turns >= 1)
        old_rule = (cols["ring"] >= 0.5) & (fast | (cols["angle_r"] >= 0.5))
        assert np.all(cols["angle_r"][old_rule] < 0.2)
        old += int(old_rule.sum())
        new += int(cols["active"].sum())
    assert old >= 10  # of 60 pairs
    assert new <= 1


def test_complement_false_flags_stay_at_the_family_wise_level():
    rng = np.random.default_rng(11)
    n, d, heads = 600, 24, 40
    flagged = 0
    for _ in range(heads):
        scales = np.linspace(3, 0.5, d)
        Q, K = rng.standard_normal((n, d)) * scales + 1.0, rng.standard_normal((n, d)) * scales - 1.0
        tq, tk = log_uniform(rng, n), log_uniform(rng, n)
        a, b = np.eye(d)[0], np.eye(d)[1]
        cols, _ = complement_pairs(Q, tq, K, tk, a, b, rng=rng)  # RoPE unknown: the periodogram
        flagged += bool(cols["active"].any())
    assert flagged <= 3  # expected ≤ 0.4 heads at α = 0.01 per head; P(≥ 4) < 1e-3


def _simulated_heads(n_heads: int, rope: bool, seed: int, n: int = 1000, d: int = 64, T: int = 2048):
    ranges = Ranges()
    for h in range(n_heads):
        rng = np.random.default_rng((seed, h))
        key = draw_key_params(rng, d, rope_theta=1e4, max_position=T, ranges=ranges)
        params = draw_query_params(rng, key, ranges=ranges)
        sim = simulate_head(params, d, n, n, rope_theta=1e4 if rope else None, max_position=T, rng=rng,
                            positions="iid" if h % 2 else "stratified")
        yield params, sim


def test_planted_rings_are_rotating_and_nothing_else_is():
    missed = extra = 0
    for params, sim in _simulated_heads(20, rope=True, seed=12):
        cols = rope_planes(sim.Q, sim.t_q, sim.K, sim.t_k, rope_theta=1e4, rng=np.random.default_rng(0))
        planted = np.zeros(32, bool)
        planted[list(params.ring_planes)] = True
        missed += int(np.sum(planted & ~cols["rotating"]))
        extra += int(np.sum(cols["rotating"] & ~planted))
        assert np.all(cols["p_adjusted"][planted] < 1e-10)
        # Untested planes (less than a turn) carry no p-value and cannot be rotating.
        slow = cols["turns"] < 1
        assert np.isnan(cols["p_value"][slow]).all() and not cols["rotating"][slow].any()
    assert missed == 0
    assert extra <= 1


def test_nope_heads_show_no_rotation_beyond_the_level():
    """No rings, but the simulator's drift and Q/K offset: the drift-free test keeps the level."""
    flagged = 0
    for _, sim in _simulated_heads(40, rope=False, seed=13):
        cols = rope_planes(sim.Q, sim.t_q, sim.K, sim.t_k, rope_theta=1e4, rng=np.random.default_rng(0))
        flagged += bool(cols["rotating"].any())
    assert flagged <= 3  # expected ≤ 0.4 heads at α = 0.01 per head


def test_raw_phase_test_would_flag_nope_drift():
    """Why the RoPE test reads drift-free phasors: the raw ones leak the drift into slow turning planes."""
    leaked = 0
    for _, sim in _simulated_heads(10, rope=False, seed=14):
        om = rope_frequencies(64, 1e4)
        turns = om * (max(sim.t_q.max(), sim.t_k.max()) - min(sim.t_q.min(), sim.t_k.min())) / (2 * math.pi)
        J = 32

        def raw(X, t):
            z = X[:, :J] + 1j * X[:, J:]
            return phase_statistic(z / np.abs(z), phasors(om, t), t)

        stat, df = combine_kinds(raw(sim.Q, sim.t_q), raw(sim.K, sim.t_k))
        leaked += bool(((holm(search_p_value(stat, df)) < PLANE_ALPHA) & (turns >= 1)).any())
    assert leaked >= 4


def test_ingested_flags_equal_the_views_and_the_nope_control_is_clean(tmp_path):
    """Through the real ingest: stored flags = the views' counts under default params; NoPE layers rotate nowhere."""
    simulate(tmp_path / "sim", model="sim-flags", layers=2, q_heads=4, kv_heads=2, head_dim=32, vectors=600,
             nope_layers=(1,), seed=3, workers=1)
    home = tmp_path / "home"
    api.ingest(tmp_path / "sim", home=home, workers=1)
    con = api.connect(home, read_only=True)
    try:
        stored = con.execute(
            "select layer, head, count(*) filter (where active) from complement group by all order by all"
        ).fetchall()
        rot = dict(((l, h), n) for l, h, n in con.execute(
            "select layer, head, count(*) filter (where rotating) from rope_planes group by all").fetchall())
        view = con.execute(
            "select layer, head, n_active, n_rotating, is_nope from rotation_planes order by all"
        ).fetchall()
        untested = con.execute(
            "select count(*) from rope_planes where turns < 1 and p_value is not null and not isnan(p_value)"
        ).fetchone()[0]
    finally:
        con.close()
    assert stored == [(l, h, n) for l, h, n, _, _ in view]
    assert all(rot[(l, h)] == n_rot for l, h, _, n_rot, _ in view)
    assert all(n_rot == 0 for *_, n_rot, nope in view if nope)
    assert all(n_rot > 0 for *_, n_rot, nope in view if not nope)
    assert untested == 0


def test_rows_ingested_before_the_tests_keep_their_stored_flags():
    """A partition written before p_adjusted existed reads it as NULL: the views then use the stored flags."""
    tables = build_tables(models=[("old", "Fam", None, None, None, None)], seed=5)
    for name, flag in (("complement", "active"), ("rope_planes", "rotating")):
        df = tables[name].to_pandas()
        df["p_adjusted"] = None  # what union_by_name fills in for an old partition
        df[flag] = np.arange(len(df)) % 3 == 0
        tables[name] = pa.Table.from_pandas(df, schema=tables[name].schema, preserve_index=False)
    con = make_connection(tables)
    got = con.execute("select sum(n_active), sum(n_rotating) from rotation_planes").fetchone()
    comp, rope = tables["complement"].to_pandas(), tables["rope_planes"].to_pandas()
    assert got == (int(comp.active.sum()), int(rope.rotating.sum()))

"""Complement SVD pairs (SPEC §4.3, seed 002 Finding 4) and the circular statistics behind them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkdb.ingest.metrics.circular import circular_linear_r, coherence_on_grid, fit_frequency, position_quantum
from qkdb.ingest.metrics.complement import (
    MAX_PAIRS,
    complement_pairs,
    lda_balanced_accuracy_2d,
    n_complement_pairs,
)
from qkdb.ingest.metrics.moments import moments
from qkdb.ingest.metrics.pca import qk_accuracy
from qkdb.warehouse.batches import to_batch
from qkdb.warehouse.schema import COMPLEMENT

THETA = 10000.0
# Chance level of omega_r_squared: for random angles n·ρ² per kind is ~Exp(1), so the best of a few
# hundred frequencies sits near ln(grid)/n ≈ 0.005 for these tests' ~1,000 vectors per kind.
CHANCE_R2 = 0.05


def axes(d: int, rng: np.random.Generator):
    """A random orthonormal pair (a, b)."""
    q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    return q[:, 0], q[:, 1]


def ringed_head(
    *,
    d: int = 24,
    n: int = 3000,
    T: int = 2048,
    rings=((1, 6.0), (3, 4.5), (6, 3.0)),
    noise: float = 0.3,
    shared_phase: bool = False,
    rope: bool = True,
    seed: int = 0,
):
    """Vectors whose RoPE planes j (coordinates j, j + d/2) carry rings of distinct radii turning at ω_j.

    The drift (axis 0 of the last plane pair) and the Q/K offset live outside the rings, so a and b
    are two of the free coordinates and every ring is in the complement of {a, b}. Distinct radii
    make the SVD pairs the ring planes.
    """
    rng = np.random.default_rng(seed)
    J = d // 2
    omega = THETA ** (-np.arange(0, d, 2) / d)
    out = []
    for phase0, offset, slope in ((0.4, 5.0, 4e-3), (2.0, -5.0, 6e-3)):
        t = rng.integers(0, T, n)
        X = noise * rng.standard_normal((n, d))
        for j, radius in rings:
            ph = omega[j] * t * rope + (0.4 if shared_phase else phase0) + 0.1 * rng.standard_normal(n)
            X[:, j] += radius * np.cos(ph)
            X[:, j + J] += radius * np.sin(ph)
        X[:, J - 1] += slope * (t - T / 2)
        X[:, d - 1] += offset
        out += [X, t]
    e = np.eye(d)
    return (*out, e[J - 1], e[d - 1], omega)


# ------------------------------------------------------------------ shapes and definitions


@pytest.mark.parametrize("d, expected", [(128, 30), (64, 30), (62, 30), (61, 29), (8, 3), (6, 2), (4, 1), (3, 0), (2, 0)])
def test_pair_count(d, expected):
    assert n_complement_pairs(d) == expected == min(MAX_PAIRS, max(0, (d - 2) // 2))
    rng = np.random.default_rng(d)
    Q, K = rng.standard_normal((300, d)), rng.standard_normal((200, d)) + 1.0
    tq, tk = rng.integers(0, 500, 300), rng.integers(0, 500, 200)
    a, b = axes(d, rng)
    cols, scores = complement_pairs(Q, tq, K, tk, a, b, rng=rng)
    assert list(cols["pair"]) == list(range(expected))
    for c in cols:
        assert len(cols[c]) == expected, c
    assert scores(Q).shape == (300, 2 * expected)
    batch = to_batch(COMPLEMENT, {"layer": 2, "head": 5, **cols})
    assert batch.num_rows == expected


def test_n_pairs_override_is_capped():
    assert n_complement_pairs(128, 10) == 10
    assert n_complement_pairs(8, 10) == 3
    with pytest.raises(ValueError):
        n_complement_pairs(8, -1)


def test_var_frac_and_scores_match_an_svd_of_the_complement():
    rng = np.random.default_rng(1)
    d = 10
    scales = np.array([9.0, 8.0, 6.0, 5.5, 4.0, 3.0, 2.5, 2.0, 1.5, 1.0])
    Q = rng.standard_normal((400, d)) * scales
    K = rng.standard_normal((300, d)) * scales + 0.5
    tq, tk = rng.integers(0, 100, 400), rng.integers(0, 100, 300)
    a, b = axes(d, rng)
    cols, scores = complement_pairs(Q, tq, K, tk, a, b, rng=rng, max_fit=None)
    # Independent: an orthonormal basis of {a, b}^⊥ from the projector, and numpy's SVD of Z.
    w, U = np.linalg.eigh(np.eye(d) - np.outer(a, a) - np.outer(b, b))
    B = U[:, w > 0.5]
    X = np.concatenate([Q, K])
    Z = (X - X.mean(axis=0)) @ B
    _, s, Vt = np.linalg.svd(Z, full_matrices=False)
    share = s**2 / np.sum(s**2)
    assert np.allclose(cols["var_frac"], share[0::2][:4] + share[1::2][:4])
    assert cols["var_frac"].sum() == pytest.approx(1.0)  # d − 2 = 8 = 4 pairs: all of it
    S = scores(X)
    assert np.allclose(np.abs(S), np.abs(Z @ Vt.T[:, :8]), atol=1e-8)
    # Scores do not see anything along a or b, and are centred on the pooled data.
    assert np.allclose(scores(X + 3.0 * a - 2.0 * b), S)
    assert np.allclose(S.mean(axis=0), 0.0, atol=1e-10)


def test_var_frac_sums_to_at_most_one():
    rng = np.random.default_rng(2)
    Q, K = rng.standard_normal((500, 128)), rng.standard_normal((500, 128))
    cols, _ = complement_pairs(Q, rng.integers(0, 99, 500), K, rng.integers(0, 99, 500), *axes(128, rng), rng=rng)
    assert len(cols["var_frac"]) == 30
    assert np.all(cols["var_frac"] >= 0) and cols["var_frac"].sum() <= 1.0
    assert np.all(np.diff(cols["var_frac"]) <= 1e-12)  # pairs in SVD order


def test_same_seed_same_columns():
    Q, tq, K, tk, a, b, _ = ringed_head(n=4000)
    first, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(4), max_fit=1500)
    again, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(4), max_fit=1500)
    for c in first:
        assert np.array_equal(first[c], again[c], equal_nan=first[c].dtype.kind == "f"), c


# ------------------------------------------------------------------ rings, angles, frequencies


def test_rope_rings_are_found_with_their_frequencies():
    Q, tq, K, tk, a, b, omega = ringed_head()
    cols, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(0))
    # The three rings are the three leading pairs, in order of radius.
    for i, j in enumerate((1, 3, 6)):
        assert cols["omega"][i] == pytest.approx(omega[j], rel=0.01)
        assert cols["omega_r_squared"][i] > 0.9
        assert cols["ring"][i] > 0.97  # 1 − σ²/(R² + 2σ²) for noise σ = 0.3 around radius R ≥ 3
        assert cols["active"][i]
    # The other pairs are isotropic noise: no phase locking, not active.
    assert np.all(cols["omega_r_squared"][3:] < CHANCE_R2)
    assert not cols["active"][3:].any()
    assert np.all(cols["p_adjusted"][:3] < 1e-100)
    # An explicit grid gives exactly its own frequencies.
    grid, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(0), omega_grid=omega)
    assert np.array_equal(grid["omega"][:3], omega[[1, 3, 6]])
    listed, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(0), rope_omegas=omega)
    assert np.array_equal(listed["omega"][:3], omega[[1, 3, 6]])  # RoPE known: its frequencies exactly
    assert np.allclose(listed["omega_r_squared"][:3], cols["omega_r_squared"][:3], atol=2e-3)


def test_no_rope_no_active_pairs():
    # The same steady components without RoPE: Q and K sit at fixed angles, nothing turns.
    Q, tq, K, tk, a, b, _ = ringed_head(rope=False)
    cols, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(0))
    assert not cols["active"].any()
    assert np.all(cols["angle_r"] < 0.1)
    # The static Q/K clusters dominate the leading pair: phase-locked at ω ≈ 0 (less than a turn)
    # with a high ρ², and separable; the rest is noise.
    assert cols["omega_r_squared"][0] > 0.9 and cols["omega"][0] * 2047 / (2 * np.pi) < 1
    assert cols["qk_accuracy"][0] > 0.95
    assert np.all(cols["omega_r_squared"][1:] < CHANCE_R2)


def test_qk_accuracy_is_chance_on_a_shared_ring_and_high_on_separated_clusters():
    Q, tq, K, tk, a, b, _ = ringed_head(shared_phase=True)
    cols, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(0))
    assert np.all(np.abs(cols["qk_accuracy"][:3] - 0.5) < 0.05)
    # Shift K in the complement: the pair carrying the shift separates Q from K.
    K2 = K.copy()
    K2[:, 4] += 3.0  # plane 4 carries no ring: its pair is noise plus this offset
    cols2, _ = complement_pairs(Q, tq, K2, tk, a, b, rng=np.random.default_rng(0))
    assert cols2["qk_accuracy"].max() > 0.95


def test_lda_matches_sklearn_and_the_pca_stage():
    from sklearn import discriminant_analysis as discriminant
    from sklearn import metrics
    rng = np.random.default_rng(3)
    m = 6
    xq, yq = rng.standard_normal((300, m)), rng.standard_normal((300, m)) * 2
    xk, yk = rng.standard_normal((200, m)) + np.linspace(0, 2, m), rng.standard_normal((200, m)) - 0.3
    ours = lda_balanced_accuracy_2d(xq, yq, xk, yk)
    labels = np.r_[np.ones(300), np.zeros(200)]
    for c in range(m):
        P = np.column_stack([np.r_[xq[:, c], xk[:, c]], np.r_[yq[:, c], yk[:, c]]])
        for solver in ("lsqr", "svd"):
            pred = discriminant.LinearDiscriminantAnalysis(solver=solver).fit(P, labels).predict(P)
            ref = metrics.balanced_accuracy_score(labels, pred)
            # lsqr uses our covariance exactly; svd scales it by n/(n-2), which can move a point or two.
            assert ours[c] == pytest.approx(ref, abs=1e-12 if solver == "lsqr" else 0.01)
        # The same model as the PCA stage's (here in a 2-D space whose axes are the components).
        t = np.arange(len(P), dtype=float)
        mq, mk = moments(P[:300], t[:300]), moments(P[300:], t[300:])
        assert ours[c] == pytest.approx(qk_accuracy(P[:300], P[300:], mq, mk, np.eye(2)))


def test_lda_with_a_degenerate_plane():
    xq = np.zeros((50, 1))
    yq = np.linspace(0, 1, 50)[:, None]
    xk = np.zeros((40, 1))
    yk = np.linspace(2, 3, 40)[:, None]
    assert lda_balanced_accuracy_2d(xq, yq, xk, yk)[0] == pytest.approx(1.0)


def test_angle_r_high_for_a_slow_rotation_and_low_for_noise():
    rng = np.random.default_rng(5)
    d, n, T = 12, 2500, 4000
    Q, K = 0.3 * rng.standard_normal((n, d)), 0.3 * rng.standard_normal((n, d))
    tq, tk = rng.integers(0, T, n), rng.integers(0, T, n)
    for X, t in ((Q, tq), (K, tk)):
        ph = 0.7 * np.pi * t / T + 0.05 * rng.standard_normal(n)  # a third of a turn over the data
        X[:, 2] += 5 * np.cos(ph)
        X[:, 3] += 5 * np.sin(ph)
    a, b = np.eye(d)[0], np.eye(d)[1]
    cols, _ = complement_pairs(Q, tq, K, tk, a, b, rng=rng)
    # (cos θ, sin θ) are not linear in t over an arc, so even a clean arc stays a little below 1.
    assert cols["angle_r"][0] > 0.85
    assert cols["active"][0]  # by the slow route: it turns less than once

    noise, _ = complement_pairs(
        rng.standard_normal((n, d)), tq, rng.standard_normal((n, d)), tk, a, b, rng=rng
    )
    assert np.all(noise["angle_r"] < 0.12)
    assert not noise["active"].any()


def test_ring_is_one_for_a_ring_pi_over_four_for_a_gaussian_and_low_for_a_spike():
    rng = np.random.default_rng(6)
    d, n = 6, 4000
    t = rng.integers(0, 1000, n)
    a, b = np.eye(d)[4], np.eye(d)[5]

    def first_ring(Z2):
        X = np.zeros((n, d))
        X[:, :2] = Z2
        X[:, 2:4] = 0.01 * rng.standard_normal((n, 2))
        cols, _ = complement_pairs(X[: n // 2], t[: n // 2], X[n // 2 :], t[n // 2 :], a, b, rng=rng, max_fit=None)
        return cols["ring"][0]

    ang = rng.uniform(0, 2 * np.pi, n)
    assert first_ring(np.column_stack([np.cos(ang), np.sin(ang)]) * 3.0) == pytest.approx(1.0, abs=1e-3)
    # For a 2-D Gaussian E[r]² / E[r²] = (π/2 σ²) / (2σ²) = π/4.
    assert first_ring(rng.standard_normal((n, 2)) * 2.0) == pytest.approx(math.pi / 4, abs=0.015)
    spike = 0.01 * rng.standard_normal((n, 2))
    spike[:40] += 50.0  # mass at the centre, a few points far out
    assert first_ring(spike) < 0.05


def test_mardia_against_a_regression_and_its_invariances():
    rng = np.random.default_rng(7)
    n = 3000
    t = rng.uniform(0, 10, n)
    theta = np.column_stack([0.3 * t + rng.normal(0, 1.0, n), rng.uniform(0, 6.3, n), 0.05 * t**2 + rng.normal(0, 0.3, n)])
    c, s = np.cos(theta), np.sin(theta)
    R = circular_linear_r(c, s, t)
    for col in range(3):
        A = np.column_stack([np.ones(n), c[:, col], s[:, col]])
        resid = t - A @ np.linalg.lstsq(A, t, rcond=None)[0]
        ref = math.sqrt(1 - resid @ resid / np.sum((t - t.mean()) ** 2))
        assert R[col] == pytest.approx(ref, abs=1e-9)
    assert R[1] < 0.1 < 0.5 < R[0]
    shifted = circular_linear_r(np.cos(1.3 - theta), np.sin(1.3 - theta), t)  # rotated and reflected
    assert np.allclose(shifted, R)
    assert np.isnan(circular_linear_r(np.ones((10, 1)), np.zeros((10, 1)), np.arange(10.0))[0])


# ------------------------------------------------------------------ the frequency search


def _phasor_data(seed: int, T: int, omega: float, n: int = 800, jitter: float = 1.0):
    rng = np.random.default_rng(seed)
    tq, tk = rng.integers(0, T, n), rng.integers(0, T, n)
    zq = np.exp(1j * (omega * tq + 0.3 + jitter * rng.standard_normal(n)))[:, None]
    zk = np.exp(1j * (omega * tk + 2.0 + jitter * rng.standard_normal(n)))[:, None]
    return zq, tq, zk, tk


@pytest.mark.parametrize("omega", [0.004, 0.05, 0.7, -1.3, 3.0])
def test_fit_finds_the_global_maximum_of_a_dense_grid(omega):
    zq, tq, zk, tk = _phasor_data(11, 1500, omega)
    w, r2 = fit_frequency(zq, tq, zk, tk, signed=True)
    span = 1499
    step = np.pi / (8 * span)  # 4× finer than the width of a coherent peak
    grid = np.arange(-np.pi, np.pi, step)
    dense = coherence_on_grid(zq, tq, zk, tk, grid)[0]
    assert r2[0] >= dense.max() - 1e-9
    assert abs(w[0] - grid[np.argmax(dense)]) <= step
    # Recovery of the planted frequency (a statistical matter: a weak ring turning once is less precise).
    assert w[0] == pytest.approx(omega, rel=0.05 if abs(omega) * span < 2 * np.pi else 0.005)
    # r2 is the statistic itself at the returned frequency.
    assert r2[0] == pytest.approx(coherence_on_grid(zq, tq, zk, tk, w)[0, 0])


def test_unsigned_fit_keeps_to_positive_frequencies():
    zq, tq, zk, tk = _phasor_data(12, 1000, -0.4, jitter=0.3)
    w, _ = fit_frequency(zq, tq, zk, tk, signed=False)
    assert w[0] >= 0
    w2, _ = fit_frequency(zq, tq, zk, tk, signed=True)
    assert w2[0] == pytest.approx(-0.4, rel=1e-3)


def test_long_position_ranges_are_binned_and_listed_frequencies_reach_beyond():
    T = 60_000  # longer than the FFT covers at full resolution
    slow = _phasor_data(13, T, 0.002, jitter=0.3)
    w, r2 = fit_frequency(*slow, signed=False, max_fft=4096)
    assert w[0] == pytest.approx(0.002, rel=0.01) and r2[0] > 0.8
    fast = _phasor_data(14, T, 1.1, jitter=0.3)
    w, r2 = fit_frequency(*fast, signed=False, max_fft=4096)
    assert r2[0] < 0.1  # out of the scanned band ...
    w, r2 = fit_frequency(*fast, signed=False, max_fft=4096, extra=np.array([0.5, 1.1, 2.0]))
    assert w[0] == 1.1 and r2[0] > 0.8  # ... unless it is listed


def test_constant_positions_give_nan():
    z = np.ones((5, 2), complex)
    t = np.full(5, 7)
    w, r2 = fit_frequency(z, t, z, t, signed=True)
    assert np.isnan(w).all() and np.isnan(r2).all()


def test_position_lattice_and_affine_equivariance():
    assert position_quantum(np.array([3, 5, 9, 4])) == 1.0
    assert position_quantum(np.array([0, 4, 10, 6])) == 2.0  # frequencies above π/2 alias here
    assert position_quantum(2.5 * np.array([3, 5, 9, 4]) + 700) == 2.5
    assert position_quantum(np.array([0.0, 0.3, 1.7, 2.0001])) == 1.0  # no lattice: token units
    # t -> s·t + c divides the fitted frequency by s and leaves ρ² alone, for pairs and for RoPE planes.
    zq, tq, zk, tk = _phasor_data(15, 900, 0.3, jitter=0.8)
    w, r2 = fit_frequency(zq, tq, zk, tk, signed=True)
    w2, r22 = fit_frequency(zq, 2.5 * tq + 700, zk, 2.5 * tk + 700, signed=True)
    assert w2[0] == pytest.approx(w[0] / 2.5, rel=1e-12) and r22[0] == pytest.approx(r2[0], rel=1e-12)
    Q, tq, K, tk, a, b, _ = ringed_head(n=1000)
    cols, _ = complement_pairs(Q, tq, K, tk, a, b, rng=np.random.default_rng(0))
    moved, _ = complement_pairs(Q, 3 * tq - 50, K, 3 * tk - 50, a, b, rng=np.random.default_rng(0))
    assert np.allclose(moved["omega"], cols["omega"] / 3, rtol=1e-10)
    for c in ("omega_r_squared", "angle_r", "ring", "qk_accuracy", "var_frac", "active", "statistic", "p_value", "p_adjusted"):
        assert np.allclose(moved[c], cols[c], rtol=1e-9, equal_nan=True), c


def test_signed_grid_matches_brute_force():
    zq, tq, zk, tk = _phasor_data(16, 700, -0.2, n=300)
    grid = np.array([0.1, 0.2, 0.35])
    R = coherence_on_grid(zq, tq, zk, tk, grid, signed=True)
    for g, w in enumerate(np.r_[grid, -grid]):
        rq = abs(np.mean(zq[:, 0] * np.exp(-1j * w * tq)))
        rk = abs(np.mean(zk[:, 0] * np.exp(-1j * w * tk)))
        assert R[0, g] == pytest.approx((300 * rq**2 + 300 * rk**2) / 600)

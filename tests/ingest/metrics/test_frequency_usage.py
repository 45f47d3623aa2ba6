"""Which RoPE frequencies the logits use (SPEC §4.8): against brute force, planted energy and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkdb.ingest.capture.simulate import HeadParams, simulate_head
from qkdb.ingest.metrics.frequency_usage import PLANE_COLUMNS, causal_pairs, critical_plane, frequency_usage
from qkdb.ingest.metrics.rope_planes import plane_coordinates, rope_frequencies
from qkdb.warehouse.batches import to_batch
from qkdb.warehouse.schema import FREQUENCY_USAGE


def _capture(seed=0, n_q=60, n_k=50, d=16, texts=3, T=40):
    rng = np.random.default_rng(seed)
    Q, K = rng.normal(size=(n_q, d)) * np.linspace(3, 0.2, d), rng.normal(size=(n_k, d)) * np.linspace(3, 0.2, d)
    t_q, t_k = rng.integers(0, T, n_q), rng.integers(0, T, n_k)
    ex_q, ex_k = rng.integers(0, texts, n_q) * 7 + 3, rng.integers(0, texts, n_k) * 7 + 3  # (ids need not be 0..n)
    return Q, t_q, ex_q, K, t_k, ex_k


def _usage(Q, t_q, ex_q, K, t_k, ex_k, *, rotary_dims=None, offset=0, pairing="half", n_pairs=None, seed=0,
           trained_context=None, theta=10000.0):
    d = Q.shape[1]
    r = d if rotary_dims is None else rotary_dims
    J = r // 2
    return frequency_usage(Q, t_q, ex_q, K, t_k, ex_k, pairing=pairing, rotary_dims=r, rotary_offset=offset,
                           omega=rope_frequencies(r, theta), radius_q=np.ones(J), radius_k=np.ones(J),
                           trained_context=trained_context, n_pairs=n_pairs, rng=np.random.default_rng(seed))


def _brute_pairs(t_q, ex_q, t_k, ex_k):
    return {(i, k) for i in range(len(t_q)) for k in range(len(t_k)) if ex_q[i] == ex_k[k] and t_k[k] <= t_q[i]}


def test_causal_pairs_are_every_pair_of_one_text_with_the_key_not_after_the_query():
    Q, t_q, ex_q, K, t_k, ex_k = _capture()
    qi, ki, total = causal_pairs(t_q, ex_q, t_k, ex_k, None, np.random.default_rng(0))
    want = _brute_pairs(t_q, ex_q, t_k, ex_k)
    assert total == len(want) == len(qi)
    assert set(zip(qi.tolist(), ki.tolist())) == want


def test_sampled_pairs_are_distinct_causal_pairs_and_seeded():
    Q, t_q, ex_q, K, t_k, ex_k = _capture(n_q=200, n_k=180)
    want = _brute_pairs(t_q, ex_q, t_k, ex_k)
    qi, ki, total = causal_pairs(t_q, ex_q, t_k, ex_k, 300, np.random.default_rng(5))
    got = list(zip(qi.tolist(), ki.tolist()))
    assert total == len(want) > 300 and len(got) == 300 == len(set(got))
    assert set(got) <= want
    again = causal_pairs(t_q, ex_q, t_k, ex_k, 300, np.random.default_rng(5))
    np.testing.assert_array_equal(again[0], qi)
    np.testing.assert_array_equal(again[1], ki)


def test_a_query_whose_text_has_no_earlier_key_contributes_nothing():
    t_q, ex_q = np.array([0, 5, 9]), np.array([1, 2, 9])
    t_k, ex_k = np.array([1, 4, 6]), np.array([1, 2, 2])
    qi, ki, total = causal_pairs(t_q, ex_q, t_k, ex_k, None, np.random.default_rng(0))
    assert total == 1 and (qi.tolist(), ki.tolist()) == ([1], [1])


def test_every_pair_gives_the_brute_force_values_exactly():
    """All pairs taken: the plane sums of an independent double loop over (query, key), to rounding."""
    Q, t_q, ex_q, K, t_k, ex_k = _capture(d=12)
    got = _usage(Q, t_q, ex_q, K, t_k, ex_k, rotary_dims=8, offset=2)
    re, im = plane_coordinates(8, "half")
    re, im = re + 2, im + 2
    parts = []
    for i, k in sorted(_brute_pairs(t_q, ex_q, t_k, ex_k)):
        c = [Q[i, a] * K[k, a] + Q[i, b] * K[k, b] for a, b in zip(re, im)]
        rest = sum(Q[i, x] * K[k, x] for x in (0, 1, 10, 11))
        assert math.isclose(sum(c) + rest, float(Q[i] @ K[k]), rel_tol=1e-9, abs_tol=1e-9)  # the parts make the logit
        parts.append(c + [rest])
    parts = np.array(parts)
    mean_abs = np.abs(parts).mean(axis=0)
    np.testing.assert_allclose(got["logit_mean"], parts[:, :4].mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["logit_abs"], mean_abs[:4], rtol=1e-12)
    np.testing.assert_allclose(got["logit_share"], mean_abs[:4] / mean_abs.sum(), rtol=1e-12)
    assert got["nonrotating_share"][0] == pytest.approx(mean_abs[4] / mean_abs.sum(), rel=1e-12)
    assert got["nonrotating_dims"][0] == 4 and got["n_pairs"][0] == len(parts)
    assert got["logit_share"].sum() + got["nonrotating_share"][0] == pytest.approx(1.0, abs=1e-12)


def test_a_sample_estimates_the_every_pair_value_within_its_sampling_error():
    Q, t_q, ex_q, K, t_k, ex_k = _capture(n_q=600, n_k=600, d=16, texts=2, T=400, seed=3)
    full = _usage(Q, t_q, ex_q, K, t_k, ex_k)
    qi, ki, total = causal_pairs(t_q, ex_q, t_k, ex_k, None, np.random.default_rng(0))
    re, im = plane_coordinates(16, "half")
    c = np.abs(Q[qi][:, re] * K[ki][:, re] + Q[qi][:, im] * K[ki][:, im])
    se = c.std(axis=0) / math.sqrt(2000)  # (without the finite-population correction: conservative)
    assert total > 20 * 2000
    for seed in range(3):
        got = _usage(Q, t_q, ex_q, K, t_k, ex_k, n_pairs=2000, seed=seed)
        assert got["n_pairs"][0] == 2000
        z = (got["logit_abs"] - full["logit_abs"]) / se
        assert np.all(np.abs(z) < 4.5), z
        assert not np.allclose(got["logit_abs"], full["logit_abs"], rtol=1e-9)  # a sample, not every pair


def test_a_rotation_shared_by_queries_and_keys_within_each_plane_changes_nothing():
    Q, t_q, ex_q, K, t_k, ex_k = _capture(d=16)
    base = _usage(Q, t_q, ex_q, K, t_k, ex_k, n_pairs=500)
    re, im = plane_coordinates(16, "half")
    angle = np.random.default_rng(9).uniform(0, 2 * np.pi, 8)

    def turned(X):
        Y = X.copy()
        Y[:, re] = np.cos(angle) * X[:, re] - np.sin(angle) * X[:, im]
        Y[:, im] = np.sin(angle) * X[:, re] + np.cos(angle) * X[:, im]
        return Y

    got = _usage(turned(Q), t_q, ex_q, turned(K), t_k, ex_k, n_pairs=500)
    for col in ("logit_mean", "logit_abs", "logit_share"):
        np.testing.assert_allclose(got[col], base[col], rtol=1e-10, atol=1e-12, err_msg=col)
    # ...whereas turning the queries alone does change the planes' parts
    other = _usage(turned(Q), t_q, ex_q, K, t_k, ex_k, n_pairs=500)
    assert not np.allclose(other["logit_mean"], base["logit_mean"], rtol=1e-3)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_planted_energy_in_two_named_planes_is_recovered(pairing):
    """The simulator's rings in planes 3 and 9, radii 6 and 3, nothing else but faint noise: the logits are made
    of those two planes, |c_j| = r_j² |cos(ω_j (t − s) + Δφ)| with E|cos| = 2/π on both (many turns), so the
    shares are 36 : 9."""
    params = HeadParams(mu_q_a=0.0, mu_k_a=0.0, alpha_q=0.0, alpha_k=0.0, sep=0.0, noise=0.02,
                        ring_planes=(3, 9), ring_radius=(6.0, 3.0), phase_q=0.0, phase_k=0.7, phase_jitter=0.05)
    sim = simulate_head(params, 32, 3000, 3000, rope_theta=10000.0, pairing=pairing, max_position=4096,
                        n_examples=4, rng=np.random.default_rng(1))
    got = frequency_usage(sim.Q, sim.t_q, sim.ex_q, sim.K, sim.t_k, sim.ex_k, pairing=pairing, rotary_dims=32,
                          rotary_offset=0, omega=rope_frequencies(32, 10000.0), radius_q=np.ones(16),
                          radius_k=np.ones(16), trained_context=4096, rng=np.random.default_rng(0))
    share = got["logit_share"]
    assert share[3] + share[9] > 0.97
    assert share[3] / share[9] == pytest.approx(4.0, rel=0.12)
    assert np.argsort(share)[-2:].tolist() == [9, 3]


def test_energy_planted_past_the_critical_plane_is_the_low_band():
    """Rings in planes 13 and 15, under one turn over 4,096 tokens at θ = 10⁴ and d = 32 (the critical plane
    is 12): the low band carries the logits, and its excess is its share over its even share, 4 planes of 16."""
    omega = rope_frequencies(32, 10000.0)
    crit = critical_plane(omega * 4096 / (2 * np.pi), omega)
    params = HeadParams(mu_q_a=0.0, mu_k_a=0.0, alpha_q=0.0, alpha_k=0.0, sep=0.0, noise=0.02,
                        ring_planes=(13, 15), ring_radius=(4.0, 4.0), phase_q=0.0, phase_k=0.0, phase_jitter=0.05)
    sim = simulate_head(params, 32, 2000, 2000, rope_theta=10000.0, max_position=4096, n_examples=4,
                        rng=np.random.default_rng(2))
    got = frequency_usage(sim.Q, sim.t_q, sim.ex_q, sim.K, sim.t_k, sim.ex_k, pairing="half", rotary_dims=32,
                          rotary_offset=0, omega=omega, radius_q=np.ones(16), radius_k=np.ones(16),
                          trained_context=4096, rng=np.random.default_rng(0))
    assert crit == 12 and got["critical_plane"][0] == 12
    assert got["low_band"].tolist() == [j >= 12 for j in range(16)]
    assert got["low_band_share"][0] > 0.97
    assert got["low_band_excess"][0] == pytest.approx(got["low_band_share"][0] / (4 / 16), rel=1e-12)


@pytest.mark.parametrize("theta,d,length,want", [
    (100000.0, 64, 2048, 17),   # SmolLM2-135M at the sample's 2,048 tokens (issue 49)
    (100000.0, 64, 8192, 20),   # ... and at its trained 8,192
    (500000.0, 128, 8192, 35),  # Llama 3.1 8B, base frequencies over the original 8,192 (Liu et al.'s formula)
    (10000.0, 256, 8192, 100),  # Gemma 7B
])
def test_critical_plane_is_liu_et_al_critical_dimension_over_two(theta, d, length, want):
    omega = rope_frequencies(d, theta)
    turns = omega * length / (2 * np.pi)
    assert critical_plane(turns, omega) == want
    assert turns[want] < 1 <= turns[want - 1]


def test_no_trained_context_leaves_the_band_null_and_the_shares_known():
    Q, t_q, ex_q, K, t_k, ex_k = _capture()
    got = _usage(Q, t_q, ex_q, K, t_k, ex_k)
    assert tuple(got) == PLANE_COLUMNS
    assert set(PLANE_COLUMNS) == set(FREQUENCY_USAGE.arrow_schema.names) - {"layer", "head"}
    assert np.isnan(got["turns_trained"]).all() and np.isnan(got["low_band_excess"]).all()
    assert got["critical_plane"] == [None] * 8 and not got["low_band"].any()
    assert np.isfinite(got["logit_share"]).all()
    batch = to_batch(FREQUENCY_USAGE, {"layer": 0, "head": 0, **got})  # NULLs where nothing is known
    assert batch.column("critical_plane").null_count == 8 and batch.column("low_band_excess").null_count == 8


def test_every_plane_turning_gives_no_critical_plane():
    Q, t_q, ex_q, K, t_k, ex_k = _capture()
    got = _usage(Q, t_q, ex_q, K, t_k, ex_k, trained_context=10**9)
    assert got["critical_plane"] == [None] * 8 and np.isnan(got["low_band_share"]).all()


def test_no_causal_pair_gives_no_rows():
    t = np.array([5, 6])
    assert frequency_usage(np.ones((2, 4)), t, np.array([0, 0]), np.ones((2, 4)), t + 10, np.array([0, 0]),
                           pairing="half", rotary_dims=4, rotary_offset=0, omega=np.ones(2), radius_q=np.ones(2),
                           radius_k=np.ones(2), rng=np.random.default_rng(0)) is None


def test_bound_share_is_the_radii_products_share():
    Q, t_q, ex_q, K, t_k, ex_k = _capture(d=8)
    rq, rk = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 2.0, 1.0, 0.5])
    got = frequency_usage(Q, t_q, ex_q, K, t_k, ex_k, pairing="interleaved", rotary_dims=8, rotary_offset=0,
                          omega=np.ones(4), radius_q=rq, radius_k=rk, rng=np.random.default_rng(0))
    np.testing.assert_allclose(got["bound_share"], rq * rk / (rq * rk).sum())

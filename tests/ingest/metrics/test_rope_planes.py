"""RoPE planes (SPEC §4.3): coherence after undoing RoPE, fitted frequencies, pairings, scaling."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from qkdb.errors import InputError
from qkdb.ingest.metrics.circular import phasors
from qkdb.ingest.metrics.rope_planes import (
    plane_coordinates,
    rope_frequencies,
    rope_planes,
    strongest_plane,
)
from qkdb.warehouse.batches import to_batch
from qkdb.warehouse.schema import ROPE_PLANES

from helpers.rope import apply_rope

THETA = 10000.0


def rope_head(
    *,
    d: int = 32,
    n: int = 3000,
    T: int = 2048,
    planes=(1, 3, 5, 8),
    radius: float = 5.0,
    pairing: str = "half",
    rope: bool = True,
    theta: float = THETA,
    noise: float = 0.5,
    seed: int = 0,
):
    """Pre-RoPE vectors with a steady component in some planes (plus drift and offset elsewhere), then RoPE.

    The drift and the Q/K offset sit in the last plane (the slowest), so they never look rotating.
    """
    rng = np.random.default_rng(seed)
    J = d // 2
    omega = theta ** (-np.arange(0, d, 2) / d)
    i1, i2 = (np.arange(J), np.arange(J) + J) if pairing == "half" else (2 * np.arange(J), 2 * np.arange(J) + 1)
    out = []
    for kind, phase0, offset, slope in (("q", 0.3, 4.0, 3e-3), ("k", 1.9, -4.0, 5e-3)):
        t = rng.integers(0, T, n)
        X = noise * rng.standard_normal((n, d))
        for j in planes:
            phase = phase0 + 0.7 * j + 0.1 * rng.standard_normal(n)
            X[:, i1[j]] += radius * np.cos(phase)
            X[:, i2[j]] += radius * np.sin(phase)
        X[:, i1[J - 1]] += slope * (t - T / 2)
        X[:, i2[J - 1]] += offset
        if rope:
            X = apply_rope(X, t, omega, pairing)
        out += [X, t]
    return out  # Q, t_q, K, t_k


def test_derotated_coherence_high_and_raw_low_for_turning_planes():
    Q, tq, K, tk = rope_head()
    cols = rope_planes(Q, tq, K, tk, rope_theta=THETA, rng=np.random.default_rng(0))
    turns = cols["turns"]
    assert np.allclose(cols["omega"], THETA ** (-np.arange(0, 32, 2) / 32))
    assert set(cols["omega_source"]) == {"given"}
    for j in (1, 3, 5, 8):
        assert turns[j] > 3  # the test is about planes that turn several times
        assert cols["coherence_q"][j] > 0.9 and cols["coherence_k"][j] > 0.9
        assert cols["raw_coherence_q"][j] < 0.15 and cols["raw_coherence_k"][j] < 0.15
        assert cols["radius_q"][j] == pytest.approx(5.0, rel=0.05)
    noise_planes = [j for j in range(15) if j not in (1, 3, 5, 8)]
    assert np.all(cols["coherence_q"][noise_planes] < 0.2)
    assert list(np.flatnonzero(cols["rotating"])) == [1, 3, 5, 8]


def test_turns_and_var_frac_definitions():
    Q, tq, K, tk = rope_head(d=16, n=500, planes=(1, 3, 5))
    cols = rope_planes(Q, tq, K, tk, rope_theta=THETA, rng=np.random.default_rng(0), max_fit=None)
    t = np.concatenate([tq, tk])
    assert np.allclose(cols["turns"], cols["omega"] * (t.max() - t.min()) / (2 * np.pi))
    X = np.concatenate([Q, K])
    var = X.var(axis=0)
    re, im = plane_coordinates(16, "half")
    assert np.allclose(cols["var_frac"], (var[re] + var[im]) / var.sum())
    # The planes partition the coordinates: their shares add up to the whole variance.
    assert cols["var_frac"].sum() == pytest.approx(1.0)
    # Same with a covariance passed in (only its diagonal matters).
    cov = np.cov(X.T, bias=True)
    again = rope_planes(Q, tq, K, tk, rope_theta=THETA, rng=np.random.default_rng(0), max_fit=None, cov=cov)
    assert np.allclose(again["var_frac"], cols["var_frac"])
    # Radii and coherences by brute force on all rows.
    z = Q[:, re] + 1j * Q[:, im]
    assert np.allclose(cols["radius_q"], np.abs(z).mean(axis=0))
    u = z / np.abs(z)
    assert np.allclose(cols["raw_coherence_q"], np.abs(u.mean(axis=0)))
    derot = np.abs((u * np.exp(-1j * np.outer(tq - t.min(), cols["omega"]))).mean(axis=0))
    assert np.allclose(cols["coherence_q"], derot)


def test_theta_withheld_fits_rope_frequencies_within_2_percent():
    # Planes from ~1.2 turns to hundreds of turns over the positions.
    planes = (0, 2, 5, 8, 10)
    Q, tq, K, tk = rope_head(d=32, planes=planes, T=2400, seed=3)
    cols = rope_planes(Q, tq, K, tk, rope_theta=None, rng=np.random.default_rng(1))
    assert set(cols["omega_source"]) == {"fitted"}
    true = THETA ** (-np.arange(0, 32, 2) / 32)
    span = max(tq.max(), tk.max()) - min(tq.min(), tk.min())
    assert 1 < true[10] * span / (2 * np.pi) < 1.5  # the slowest planted plane turns only about once
    for j in planes:
        assert cols["omega"][j] == pytest.approx(true[j], rel=0.02), j
        assert cols["coherence_q"][j] > 0.9
    assert list(np.flatnonzero(cols["rotating"])) == list(planes)


def test_interleaved_pairing():
    Q, tq, K, tk = rope_head(pairing="interleaved", seed=5)
    right = rope_planes(Q, tq, K, tk, rope_theta=THETA, pairing="interleaved", rng=np.random.default_rng(0))
    assert list(np.flatnonzero(right["rotating"])) == [1, 3, 5, 8]
    assert np.all(right["coherence_k"][[1, 3, 5, 8]] > 0.9)
    fitted = rope_planes(Q, tq, K, tk, rope_theta=None, pairing="interleaved", rng=np.random.default_rng(0))
    assert np.allclose(fitted["omega"][[1, 3, 5, 8]], right["omega"][[1, 3, 5, 8]], rtol=0.02)
    # Read with the wrong pairing the rings fall apart.
    wrong = rope_planes(Q, tq, K, tk, rope_theta=THETA, pairing="half", rng=np.random.default_rng(0))
    assert not wrong["rotating"][[1, 3, 5, 8]].any()


@pytest.mark.parametrize("theta", [THETA, None])
def test_head_without_rope_has_no_rotating_planes(theta):
    Q, tq, K, tk = rope_head(rope=False, seed=7)
    cols = rope_planes(Q, tq, K, tk, rope_theta=theta, rng=np.random.default_rng(0))
    assert not cols["rotating"].any()
    # The steady components are there, just not turning: raw coherence is high.
    assert np.all(cols["raw_coherence_q"][[1, 3, 5, 8]] > 0.9)
    if theta is None:
        assert np.all(cols["turns"][[1, 3, 5, 8]] < 1)


def test_same_seed_same_rows_and_table_conforms():
    Q, tq, K, tk = rope_head(n=5000)
    a = rope_planes(Q, tq, K, tk, rope_theta=THETA, rng=np.random.default_rng(11), max_fit=1000)
    b = rope_planes(Q, tq, K, tk, rope_theta=THETA, rng=np.random.default_rng(11), max_fit=1000)
    for c in a:
        assert np.array_equal(a[c], b[c], equal_nan=a[c].dtype.kind == "f"), c
    batch = to_batch(ROPE_PLANES, {"layer": 0, "head": 1, **a})
    assert batch.num_rows == 16
    assert batch.column("omega_source").to_pylist()[0] == "given"


# ------------------------------------------------------------------ frequencies and scaling


def test_plain_and_linear_frequencies():
    w = rope_frequencies(8, 100.0)
    assert np.allclose(w, [1.0, 100 ** -0.25, 100 ** -0.5, 100 ** -0.75])
    assert np.allclose(rope_frequencies(8, 100.0, {"rope_type": "linear", "factor": 4}), w / 4)
    assert np.allclose(rope_frequencies(8, 100.0, json.dumps({"type": "linear", "factor": 2.0})), w / 2)
    assert np.allclose(rope_frequencies(8, 100.0, {"rope_type": "default"}), w)
    assert np.allclose(rope_frequencies(8, 100.0, None), w)


def test_llama3_scaling_keeps_fast_planes_and_divides_slow_ones():
    cfg = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
    plain = rope_frequencies(128, 500000.0)
    scaled = rope_frequencies(128, 500000.0, cfg)
    wavelen = 2 * np.pi / plain
    fast, slow = wavelen < 8192 / 4, wavelen > 8192
    assert np.array_equal(scaled[fast], plain[fast])
    assert np.allclose(scaled[slow], plain[slow] / 32)
    mid = ~fast & ~slow
    assert mid.any() and np.all((scaled[mid] < plain[mid]) & (scaled[mid] > plain[mid] / 32))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rope_theta": 0.5}, "rope_theta"),
        ({"rope_theta": float("nan")}, "rope_theta"),
        ({"rope_theta": 1e4, "rope_scaling": "{not json"}, "JSON"),
        ({"rope_theta": 1e4, "rope_scaling": {"rope_type": "dynamic", "factor": 2}}, "not supported"),
        ({"rope_theta": 1e4, "rope_scaling": {"rope_type": "linear"}}, "factor"),
        ({"rope_theta": 1e4, "rope_scaling": [1, 2]}, "JSON object"),
    ],
)
def test_bad_rope_settings_are_input_errors(kwargs, match):
    with pytest.raises(InputError, match=match):
        rope_frequencies(8, kwargs["rope_theta"], kwargs.get("rope_scaling"))


def test_odd_dimension_and_bad_pairing_are_input_errors():
    X = np.zeros((4, 5))
    t = np.arange(4)
    with pytest.raises(InputError, match="odd"):
        rope_planes(X, t, X, t, rope_theta=THETA, rng=np.random.default_rng(0))
    with pytest.raises(InputError, match="pairing"):
        plane_coordinates(8, "neox")


# ------------------------------------------------------------------ rotation.omega


def test_strongest_plane_prefers_rotating_rope_plane_then_complement():
    Q, tq, K, tk = rope_head(planes=(3, 8), seed=2)
    cols = rope_planes(Q, tq, K, tk, rope_theta=THETA, rng=np.random.default_rng(0))
    omega, r2 = strongest_plane(cols, None, n_q=len(tq), n_k=len(tk))
    j = int(np.argmin(np.abs(cols["omega"] - omega)))
    assert j in (3, 8) and cols["rotating"][j]
    weighted = (len(tq) * cols["coherence_q"] ** 2 + len(tk) * cols["coherence_k"] ** 2) / (len(tq) + len(tk))
    assert r2 == pytest.approx(weighted[[3, 8]].max())

    comp = {"pair": np.arange(3), "omega": np.array([0.001, 0.5, 0.2]),
            "omega_r_squared": np.array([0.9, 0.3, 0.6])}
    # Fitted planes (RoPE unknown) and no rotating plane both defer to the complement pair;
    # a pair turning less than once over the positions does not count.
    fitted = dict(cols, omega_source=np.full(16, "fitted", dtype=object))
    assert strongest_plane(fitted, comp, position_range=1000) == (0.2, 0.6)
    still = dict(cols, rotating=np.zeros(16, bool))
    assert strongest_plane(still, comp, position_range=1000) == (0.2, 0.6)
    assert strongest_plane(None, comp) == (0.001, 0.9)
    assert all(math.isnan(v) for v in strongest_plane(None, None))
    assert all(math.isnan(v) for v in strongest_plane(still, comp, position_range=1.0))


def test_phasor_tables_match_direct_exponentials():
    rng = np.random.default_rng(0)
    tau = rng.integers(0, 100_000, 500).astype(float)
    omega = np.geomspace(1e-6, np.pi, 40)
    assert np.allclose(phasors(omega, tau), np.exp(-1j * np.outer(tau, omega)), atol=1e-9)
    frac = tau + 0.25
    assert np.allclose(phasors(omega, frac), np.exp(-1j * np.outer(frac, omega)))

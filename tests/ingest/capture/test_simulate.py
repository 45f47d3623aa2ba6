"""The simulator (SPEC §3.2): planted truth recoverable with plain numpy, the layout, determinism, CLI."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qkdb.cli.simulate  # noqa: F401  (registers the command on the app)
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES
from qkdb.errors import QkdbError
from qkdb.ingest.sources.layout import discover, read_head, read_metadata
from qkdb.ingest.capture.simulate import (
    HeadParams,
    Ranges,
    draw_positions,
    position_buckets,
    read_planted,
    rope_coords,
    simulate,
    simulate_group,
    simulate_head,
)


def coherence(X: np.ndarray, t: np.ndarray, i0: int, i1: int, omega: float) -> tuple[float, float]:
    """|mean of z/|z| · exp(−iωt)| and the angle of that mean, z = x_i0 + i·x_i1."""
    z = X[:, i0] + 1j * X[:, i1]
    m = np.mean(z / np.abs(z) * np.exp(-1j * omega * t))
    return float(abs(m)), float(np.angle(m))


def circ_dist(a: float, b: float) -> float:
    return abs((a - b + np.pi) % (2 * np.pi) - np.pi)


def pooled_drift(Q, t_q, K, t_k) -> np.ndarray:
    """cov(X, t) of the pooled vectors (population moments), as in SPEC §4.2."""
    X = np.vstack([Q, K])
    t = np.concatenate([t_q, t_k]).astype(float)
    return ((X - X.mean(0)) * (t - t.mean())[:, None]).mean(0)


def ols_slope(y: np.ndarray, t: np.ndarray) -> float:
    t = t.astype(float)
    return float(np.cov(y, t, bias=True)[0, 1] / t.var())


# --------------------------------------------------------------------------- one head


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_noise_free_vectors_follow_the_generative_formula(pairing):
    d, T, theta = 16, 1000, 100.0
    p = HeadParams(
        mu_q_a=3.0, mu_k_a=-1.0, alpha_q=2e-3, alpha_k=5e-3, sep=12.0, noise=0.0, phase_jitter=0.0,
        ring_planes=(1, 3), ring_radius=(2.0, 5.0), phase_q=(0.3, 1.1), phase_k=(2.0, -0.5), m0_norm=1.5,
    )
    s = simulate_head(p, d, 300, 200, rope_theta=theta, pairing=pairing, max_position=T, rng=np.random.default_rng(5))
    assert s.Q.shape == (300, d) and s.K.shape == (200, d)
    # The frame: orthonormal u, w; m0 of the asked norm orthogonal to both; all zero on ring coordinates.
    ring = [(j, j + d // 2) if pairing == "half" else (2 * j, 2 * j + 1) for j in (1, 3)]
    used = [c for pair in ring for c in pair]
    np.testing.assert_allclose([s.u @ s.u, s.w @ s.w, s.u @ s.w], [1, 1, 0], atol=1e-12)
    np.testing.assert_allclose([np.linalg.norm(s.m0), s.m0 @ s.u, s.m0 @ s.w], [1.5, 0, 0], atol=1e-12)
    assert not np.any(s.u[used]) and not np.any(s.w[used]) and not np.any(s.m0[used])
    tc = (T - 1) / 2
    for X, t, mu_a, mu_w, alpha, phases in (
        (s.Q, s.t_q, 3.0, 6.0, 2e-3, (0.3, 1.1)),
        (s.K, s.t_k, -1.0, -6.0, 5e-3, (2.0, -0.5)),
    ):
        expect = np.tile(s.m0 + mu_a * s.u + mu_w * s.w, (len(t), 1)) + np.outer(alpha * (t - tc), s.u)
        for (i0, i1), j, r, phi in zip(ring, (1, 3), (2.0, 5.0), phases):
            omega = theta ** (-2 * j / d)
            expect[:, i0] += r * np.cos(omega * t + phi)
            expect[:, i1] += r * np.sin(omega * t + phi)
        np.testing.assert_allclose(X, expect, rtol=0, atol=1e-12)


def test_planted_drift_offset_and_noise_are_recovered():
    d, n, T = 32, 4000, 4096
    p = HeadParams(mu_q_a=4.0, mu_k_a=1.5, alpha_q=2e-3, alpha_k=4e-3, sep=30.0, noise=1.0, m0_norm=2.0)
    s = simulate_head(p, d, n, n, rope_theta=10000.0, max_position=T, rng=np.random.default_rng(11))
    c = pooled_drift(s.Q, s.t_q, s.K, s.t_k)
    assert abs(c @ s.u) / np.linalg.norm(c) >= 0.99
    # Per-kind OLS slopes on the planted axis (SE ≈ 1.3e-5) and raw means (SE ≈ 0.02).
    assert ols_slope(s.Q @ s.u, s.t_q) == pytest.approx(2e-3, abs=1e-4)
    assert ols_slope(s.K @ s.u, s.t_k) == pytest.approx(4e-3, abs=1e-4)
    assert (s.Q @ s.u).mean() == pytest.approx(4.0, abs=0.1)
    assert (s.K @ s.u).mean() == pytest.approx(1.5, abs=0.1)
    assert (s.Q @ s.w).mean() - (s.K @ s.w).mean() == pytest.approx(30.0, abs=0.1)
    assert (s.Q @ s.w).mean() == pytest.approx(15.0, abs=0.1)  # mu_k_w defaults to −sep/2
    assert p.bias_strength == pytest.approx(4.0 * 4e-3)
    # What is left after the planted signal on the ring-free coordinates is isotropic noise of sd 1,
    # uncorrelated with position.
    free = np.setdiff1d(np.arange(d), rope_coords(p.ring_planes, d, "half").ravel())
    model = (s.m0 + 4.0 * s.u + 15.0 * s.w)[free] + np.outer(2e-3 * (s.t_q - (T - 1) / 2), s.u[free])
    resid = s.Q[:, free] - model
    assert resid.std() == pytest.approx(1.0, rel=0.03)
    assert np.abs(resid.mean(0)).max() < 0.1
    assert np.abs(pooled_drift(resid, s.t_q, resid[:0], s.t_k[:0])).max() < 5 * 1182 / math.sqrt(n)


def test_rings_are_phase_locked_after_undoing_rope_and_not_before():
    d, n, T, theta = 32, 3000, 4096, 10000.0
    planes = (0, 2, 5)
    p = HeadParams(ring_planes=planes, ring_radius=4.0, phase_q=(0.5, 2.0, -1.0), phase_k=(2.5, -2.0, 1.0))
    s = simulate_head(p, d, n, n, rope_theta=theta, max_position=T, rng=np.random.default_rng(3))
    for j, pq_, pk in zip(planes, (0.5, 2.0, -1.0), (2.5, -2.0, 1.0)):
        omega = theta ** (-2 * j / d)
        for X, t, phase in ((s.Q, s.t_q, pq_), (s.K, s.t_k, pk)):
            locked, angle = coherence(X, t, j, j + d // 2, omega)
            raw, _ = coherence(X, t, j, j + d // 2, 0.0)
            assert locked > 0.9 and raw < 0.1
            assert circ_dist(angle, phase) < 0.1  # Q and K rings keep their own phase offsets
    # A plane without a ring is not phase-locked at its RoPE frequency.
    assert coherence(s.Q, s.t_q, 1, 1 + d // 2, theta ** (-2 / d))[0] < 0.1


def test_no_rope_has_no_rings():
    d, n, T = 32, 2000, 4096
    p = HeadParams(ring_planes=(0, 2, 5), ring_radius=5.0)
    s = simulate_head(p, d, n, n, rope_theta=None, max_position=T, rng=np.random.default_rng(4))
    assert s.frame.planes.size == 0
    for j in range(d // 2):
        omega = 10000.0 ** (-2 * j / d)
        if omega * T / (2 * np.pi) >= 4:  # slow planes: a constant mean barely rotates, skip
            for X, t in ((s.Q, s.t_q), (s.K, s.t_k)):
                assert coherence(X, t, j, j + d // 2, omega)[0] < 0.15
    # Drift and offset are still there.
    assert ols_slope(s.K @ s.u, s.t_k) == pytest.approx(p.alpha_k, abs=1e-4)
    assert (s.Q @ s.w).mean() - (s.K @ s.w).mean() == pytest.approx(p.sep, abs=0.1)


def test_interleaved_pairing_puts_rings_in_adjacent_coordinates():
    d, n, T, theta = 16, 2000, 4096, 10000.0
    np.testing.assert_array_equal(rope_coords([1, 3], d, "interleaved"), [[2, 3], [6, 7]])
    np.testing.assert_array_equal(rope_coords([1, 3], d, "half"), [[1, 9], [3, 11]])
    p = HeadParams(ring_planes=(1,), ring_radius=5.0)
    s = simulate_head(p, d, n, n, rope_theta=theta, pairing="interleaved", max_position=T,
                      rng=np.random.default_rng(8))
    omega = theta ** (-2 / d)
    np.testing.assert_array_equal(s.frame.coords, [[2, 3]])
    assert coherence(s.Q, s.t_q, 2, 3, omega)[0] > 0.9
    assert coherence(s.Q, s.t_q, 1, 1 + d // 2, omega)[0] < 0.1


def test_query_heads_of_a_group_share_the_key_head():
    rng = np.random.default_rng(9)
    a = HeadParams(mu_q_a=3.0, sep=20.0)
    b = HeadParams(mu_q_a=6.0, sep=40.0, alpha_q=1e-3)
    s0, s1 = simulate_group([a, b], 16, 3000, 3000, rope_theta=10000.0, rng=rng)
    assert s1.K is s0.K and s1.t_k is s0.t_k
    np.testing.assert_array_equal(s0.u, s1.u)
    # b adopts a's key mean on w (−10), so its query mean sits at −10 + 40 = 30.
    assert s1.params.key_w == -10.0 and s1.params.query_w == 30.0
    assert (s1.Q @ s1.w).mean() - (s1.K @ s1.w).mean() == pytest.approx(40.0, abs=0.1)
    assert (s1.Q @ s1.u).mean() == pytest.approx(6.0, abs=0.1)
    with pytest.raises(QkdbError, match="alpha_k"):
        simulate_group([a, HeadParams(alpha_k=1e-3)], 16, 10, 10, rope_theta=10000.0, rng=rng)
    # A key head given as a tuple needs its frame.
    with pytest.raises(QkdbError, match="u and w"):
        simulate_head(a, 16, 10, 10, rng=rng, K=s0.key)
    s2 = simulate_head(b, 16, 50, 0, rng=rng, K=s0.key, u=s0.u, w=s0.w, m0=s0.m0)
    assert s2.K is s0.K


def test_invalid_settings_are_clear_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(QkdbError, match="out of range"):
        simulate_head(HeadParams(ring_planes=(8,)), 16, 10, 10, rng=rng)
    with pytest.raises(QkdbError, match="coordinates free"):
        simulate_head(HeadParams(ring_planes=(0, 1)), 4, 10, 10, rng=rng)
    with pytest.raises(QkdbError, match="zero on the ring"):
        simulate_head(HeadParams(ring_planes=(0,)), 8, 10, 10, rng=rng, u=np.eye(8)[0], w=np.eye(8)[1])
    with pytest.raises(QkdbError, match="pairing"):
        simulate_head(HeadParams(), 16, 10, 10, rng=rng, pairing="rotate")


def test_position_buckets_and_sampling():
    t = np.concatenate([np.arange(5000), [2**20 - 2, 2**20 - 1, 2**31 - 2]])
    expect = [int(x + 1).bit_length() - 1 for x in t]
    np.testing.assert_array_equal(position_buckets(t), expect)
    rng = np.random.default_rng(1)
    T, n = 4096, 1000
    t, ex = draw_positions(n, T, 8, rng)
    assert t.min() >= 0 and t.max() < T and set(np.unique(ex)) <= set(range(8))
    # Stratified: the i-th smallest position lies in the i-th stratum, so the mean is tight.
    i = np.arange(n)
    srt = np.sort(t)
    assert np.all(srt >= np.floor(i * T / n)) and np.all(srt <= np.ceil((i + 1) * T / n))
    assert abs(t.mean() - (T - 1) / 2) < T / n
    t_iid, _ = draw_positions(20000, T, 8, rng, "iid")
    assert t_iid.min() >= 0 and t_iid.max() < T and abs(t_iid.mean() - (T - 1) / 2) < 50


# --------------------------------------------------------------------------- a dataset on disk


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "small"
    return simulate(out, layers=3, q_heads=4, kv_heads=2, head_dim=16, vectors=300, max_position=512, seed=7)


def test_layout_reads_back(small):
    found = discover(small)
    assert sorted(found.queries) == [(l, h) for l in range(3) for h in range(4)]
    assert sorted(found.keys) == [(l, g) for l in range(3) for g in range(2)]
    for hf in [*found.queries.values(), *found.keys.values()]:
        schema = pq.read_schema(hf.path)
        assert schema.field("vector").type == pa.list_(pa.float32(), 16)
        assert schema.field("position").type == pa.int32() and schema.field("bucket").type == pa.int32()
        table = pq.read_table(hf.path)
        pos = table.column("position").to_numpy()
        assert pos.min() >= 0 and pos.max() < 512
        np.testing.assert_array_equal(table.column("bucket").to_numpy(), [int(x + 1).bit_length() - 1 for x in pos])
        assert set(table.column("example_id").to_numpy()) <= set(range(8))
        data = read_head(hf.path)
        assert data.vectors.shape == (300, 16) and data.vectors.dtype == np.float64 and data.n_dropped == 0
    meta = read_metadata(small)
    assert meta["model"] == "simulated" and meta["family"] == "Simulated" and meta["source"] == "simulate"
    assert (meta["n_layers"], meta["n_q_heads"], meta["n_kv_heads"], meta["head_dim"]) == (3, 4, 2, 16)
    assert meta["rope_theta"] == 10000.0 and meta["rope_pairing"] == "half"
    assert meta["rope_scaling"] is None and meta["nope_layers"] == []
    assert meta["capture"]["seed"] == 7 and meta["capture"]["vectors"] == 300
    assert meta["capture"]["max_position"] == 512 and meta["capture"]["n_examples"] == 8


def test_planted_json_describes_every_head_and_gqa_groups(small):
    planted = read_planted(small)
    heads = planted["heads"]
    assert sorted(heads) == [f"l{l:02d}h{h:02d}" for l in range(3) for h in range(4)]
    for name, rec in heads.items():
        assert rec["kv_head"] == rec["head"] // 2
        assert (small / f"l{rec['layer']:02d}h{rec['kv_head']:02d}k" / "data.parquet").exists()
        u, w = np.array(rec["u"]), np.array(rec["w"])
        np.testing.assert_allclose([u @ u, w @ w, u @ w], [1, 1, 0], atol=1e-12)
        assert rec["bias_strength"] == pytest.approx(rec["mu_q_a"] * rec["alpha_k"])
        assert rec["mu_q_w"] - rec["mu_k_w"] == pytest.approx(rec["sep"])
        for ring in rec["ring_planes"]:
            j = ring["plane"]
            assert ring["coords"] == [j, j + 8] and ring["omega"] == pytest.approx(10000.0 ** (-2 * j / 16))
            assert u[ring["coords"]].tolist() == [0, 0] and w[ring["coords"]].tolist() == [0, 0]
    # Query heads of one group share the key head's frame and parameters, not their own.
    a, b = heads["l01h02"], heads["l01h03"]
    for f in ("u", "w", "m0", "mu_k_a", "alpha_k", "mu_k_w", "noise"):
        assert a[f] == b[f]
    assert [r["phase_k"] for r in a["ring_planes"]] == [r["phase_k"] for r in b["ring_planes"]]
    assert a["mu_q_a"] != b["mu_q_a"] and a["alpha_q"] != b["alpha_q"]
    assert heads["l01h01"]["u"] != a["u"]


def test_planted_parameters_are_recovered_from_the_files(tmp_path):
    over = HeadParams(mu_q_a=6.0, mu_k_a=-2.0, alpha_q=1.5e-3, alpha_k=5e-3, sep=25.0, noise=1.0,
                      ring_planes=(0, 3), ring_radius=3.0, m0_norm=1.0)
    out = simulate(tmp_path / "rec", layers=1, q_heads=2, kv_heads=1, head_dim=32, vectors=4000, seed=2,
                   overrides={(0, 1): over})
    planted = read_planted(out)["heads"]
    assert planted["l00h01"]["alpha_k"] == 5e-3 and planted["l00h01"]["mu_q_a"] == 6.0
    assert planted["l00h00"]["alpha_k"] == 5e-3  # its group mate shares the overridden key head
    K = read_head(out / "l00h00k" / "data.parquet")
    for name in ("l00h00", "l00h01"):
        rec = planted[name]
        Q = read_head(out / f"{name}q" / "data.parquet")
        u, w = np.array(rec["u"]), np.array(rec["w"])
        c = pooled_drift(Q.vectors, Q.positions, K.vectors, K.positions)
        assert abs(c @ u) / np.linalg.norm(c) >= 0.99
        assert ols_slope(K.vectors @ u, K.positions) == pytest.approx(rec["alpha_k"], rel=0.05)
        assert ols_slope(Q.vectors @ u, Q.positions) == pytest.approx(rec["alpha_q"], rel=0.05)
        assert (Q.vectors @ u).mean() == pytest.approx(rec["mu_q_a"], abs=0.15)
        assert (K.vectors @ u).mean() == pytest.approx(rec["mu_k_a"], abs=0.15)
        assert (Q.vectors @ w).mean() - (K.vectors @ w).mean() == pytest.approx(rec["sep"], abs=0.3)
        for ring in rec["ring_planes"]:
            i0, i1 = ring["coords"]
            lq, aq = coherence(Q.vectors, Q.positions, i0, i1, ring["omega"])
            lk, ak = coherence(K.vectors, K.positions, i0, i1, ring["omega"])
            assert lq > 0.8 and lk > 0.8
            assert circ_dist(aq, ring["phase_q"]) < 0.15 and circ_dist(ak, ring["phase_k"]) < 0.15


def test_same_seed_same_files_other_seed_other_files(tmp_path):
    kw = dict(layers=2, q_heads=4, kv_heads=2, head_dim=16, vectors=200, seed=5)
    a, b = simulate(tmp_path / "a", **kw), simulate(tmp_path / "b", **kw)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        fa, fb = a / name, b / name
        if fa.is_dir():
            fa, fb = fa / "data.parquet", fb / "data.parquet"
        assert fa.read_bytes() == fb.read_bytes(), name
    c = simulate(tmp_path / "c", **{**kw, "seed": 6})
    assert not np.array_equal(read_head(a / "l00h00q" / "data.parquet").vectors,
                              read_head(c / "l00h00q" / "data.parquet").vectors)


def test_sample_picks_n_heads_and_the_keys_they_need(tmp_path):
    kw = dict(layers=3, q_heads=6, kv_heads=2, head_dim=16, vectors=100, seed=4)
    full = simulate(tmp_path / "full", **kw)
    part = simulate(tmp_path / "part", sample_q_heads=5, **kw)
    found = discover(part)
    assert len(found.queries) == 5
    assert set(found.keys) == {(l, h // 3) for l, h in found.queries}
    again = discover(simulate(tmp_path / "again", sample_q_heads=5, **kw))
    assert set(again.queries) == set(found.queries)
    # A head's parameters and vectors do not depend on which other heads were sampled.
    pf, pp = read_planted(full)["heads"], read_planted(part)["heads"]
    assert len(pp) == 5
    for (l, h), hf in found.queries.items():
        assert pp[f"l{l:02d}h{h:02d}"] == pf[f"l{l:02d}h{h:02d}"]
        assert hf.path.read_bytes() == (full / hf.path.parent.name / "data.parquet").read_bytes()
    with pytest.raises(QkdbError, match="sample of 19"):
        simulate(tmp_path / "x", sample_q_heads=19, **kw)
    # Overridden heads are always in the sample.
    with_over = simulate(tmp_path / "over", sample_q_heads=2, overrides={(2, 5): HeadParams()}, **kw)
    assert (2, 5) in discover(with_over).queries and len(discover(with_over).queries) == 2


def test_drawn_parameters_resemble_the_seeds(tmp_path):
    out = simulate(tmp_path / "draws", layers=8, q_heads=8, kv_heads=2, head_dim=64, vectors=10, seed=1)
    heads = list(read_planted(out)["heads"].values())
    ratio = np.median([abs(h["alpha_k"] / h["alpha_q"]) for h in heads])
    assert 1.5 < ratio < 2.2
    assert all(1e-3 <= h["alpha_k"] <= 6e-3 for h in heads)
    assert all(2 <= abs(h["mu_q_a"]) <= 8 and 10 <= h["sep"] <= 50 for h in heads)
    assert np.mean([h["mu_q_a"] > 0 for h in heads]) >= 0.9
    assert all(ring["turns"] >= Ranges().min_turns for h in heads for ring in h["ring_planes"])
    assert all(len(h["ring_planes"]) == 8 for h in heads)  # 1/8 of head_dim
    flipped = simulate(tmp_path / "neg", layers=4, q_heads=8, kv_heads=2, head_dim=16, vectors=10, seed=1,
                       ranges=Ranges(negative_fraction=0.5, slope_ratio=8.0))
    heads = list(read_planted(flipped)["heads"].values())
    assert any(h["mu_q_a"] < 0 for h in heads) and any(h["mu_q_a"] > 0 for h in heads)
    assert 6 < np.median([abs(h["alpha_k"] / h["alpha_q"]) for h in heads]) < 10


def test_overrides_in_one_group_must_agree_on_the_key_head(tmp_path):
    kw = dict(layers=1, q_heads=4, kv_heads=2, head_dim=16, vectors=50)
    with pytest.raises(QkdbError, match="alpha_k"):
        simulate(tmp_path / "a", overrides={(0, 0): HeadParams(), (0, 1): HeadParams(alpha_k=1e-3)}, **kw)
    assert not (tmp_path / "a").exists()  # refused before writing anything
    with pytest.raises(QkdbError, match="phase_q has 3 values for 4 ring planes"):
        simulate(tmp_path / "a", overrides={(0, 0): HeadParams(phase_q=(0.0, 1.0, 2.0))}, **kw)
    with pytest.raises(QkdbError, match="out of range"):
        simulate(tmp_path / "a", overrides={(0, 3): HeadParams(ring_planes=(0, 8))}, **kw)
    assert not (tmp_path / "a").exists()
    with pytest.raises(QkdbError, match="mu_k_w"):
        simulate(tmp_path / "b", overrides={(0, 0): HeadParams(sep=20.0), (0, 1): HeadParams(sep=30.0, mu_k_w=5.0)},
                 **kw)
    # Different sep with the default key mean: the group keeps the first head's key mean on w.
    out = simulate(tmp_path / "c", overrides={(0, 0): HeadParams(sep=20.0), (0, 1): HeadParams(sep=30.0)}, **kw)
    heads = read_planted(out)["heads"]
    assert heads["l00h00"]["mu_k_w"] == heads["l00h01"]["mu_k_w"] == -10.0
    assert heads["l00h01"]["mu_q_w"] == 20.0
    with pytest.raises(QkdbError, match="outside"):
        simulate(tmp_path / "d", overrides={(1, 0): HeadParams()}, **kw)


def test_no_rope_and_nope_layers_are_controls(tmp_path):
    out = simulate(tmp_path / "nope", layers=2, q_heads=2, kv_heads=1, head_dim=16, vectors=1500, seed=3,
                   nope_layers=[1])
    heads = read_planted(out)["heads"]
    assert heads["l00h00"]["ring_planes"] and not heads["l01h00"]["ring_planes"]
    assert read_metadata(out)["nope_layers"] == [1]
    for name, rotating in (("l00h00", True), ("l01h00", False)):
        Q = read_head(out / f"{name}q" / "data.parquet")
        best = max(
            coherence(Q.vectors, Q.positions, j, j + 8, 10000.0 ** (-2 * j / 16))[0]
            for j in range(8) if 10000.0 ** (-2 * j / 16) * 4096 / (2 * np.pi) >= 16
        )
        assert (best > 0.8) if rotating else (best < 0.15)
    bare = simulate(tmp_path / "bare", layers=1, q_heads=2, kv_heads=1, head_dim=16, vectors=50, rope_theta=None)
    assert read_metadata(bare)["rope_theta"] is None
    assert all(not h["ring_planes"] for h in read_planted(bare)["heads"].values())


def test_float16_vectors(tmp_path):
    kw = dict(layers=1, q_heads=2, kv_heads=1, head_dim=16, vectors=200, seed=9)
    h = simulate(tmp_path / "h", dtype="float16", **kw)
    f = simulate(tmp_path / "f", **kw)
    assert pq.read_schema(h / "l00h01q" / "data.parquet").field("vector").type == pa.list_(pa.float16(), 16)
    vh = read_head(h / "l00h01q" / "data.parquet").vectors
    vf = read_head(f / "l00h01q" / "data.parquet").vectors
    np.testing.assert_allclose(vh, vf, rtol=1e-3, atol=1e-3)


def test_rerun_replaces_an_earlier_simulation(tmp_path):
    out = tmp_path / "re"
    simulate(out, layers=2, q_heads=4, kv_heads=2, head_dim=16, vectors=20)
    (out / "notes.txt").write_text("mine")
    simulate(out, layers=1, q_heads=2, kv_heads=1, head_dim=16, vectors=20)
    found = discover(out)
    assert sorted(found.queries) == [(0, 0), (0, 1)] and sorted(found.keys) == [(0, 0)]
    assert (out / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------------------- CLI


def test_cli_example_writes_a_dataset_and_reports_on_stderr(tmp_path, runner):
    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--layers", "8", "--q-heads", "16", "--kv-heads", "4",
            "--head-dim", "64", "--vectors", "2000"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "128 query and 32 key heads" in result.stderr and "planted.json" in result.stderr
    found = discover(out)
    assert len(found.queries) == 128 and len(found.keys) == 32
    assert read_head(found.queries[(7, 15)].path).vectors.shape == (2000, 64)


def test_cli_refuses_a_non_empty_directory_unless_forced(tmp_path, runner):
    out = tmp_path / "sim"
    small = ["--layers", "2", "--q-heads", "4", "--kv-heads", "2", "--head-dim", "16", "--vectors", "50"]
    assert runner.invoke(app, ["simulate", "--out", str(out), *small]).exit_code == 0
    again = runner.invoke(app, ["simulate", "--out", str(out), *small])
    assert again.exit_code == EXIT_CODES["input"]
    assert "not empty" in again.stderr and "--force" in again.stderr and "Traceback" not in again.stderr
    forced = runner.invoke(app, ["simulate", "--out", str(out), *small, "--force", "--no-rope", "--sample-heads", "3",
                                 "--pairing", "interleaved", "--dtype", "float16", "--seed", "3", "--model", "toy",
                                 "--family", "Toy", "--max-position", "256", "--examples", "2"])
    assert forced.exit_code == 0, forced.stderr
    meta = read_metadata(out)
    assert meta["rope_theta"] is None and meta["model"] == "toy" and meta["family"] == "Toy"
    assert meta["rope_pairing"] == "interleaved" and meta["capture"]["dtype"] == "float16"
    assert meta["capture"]["max_position"] == 256 and meta["capture"]["n_examples"] == 2
    assert len(discover(out).queries) == 3
    bad = runner.invoke(app, ["simulate", "--out", str(tmp_path / "bad"), "--q-heads", "8", "--kv-heads", "3"])
    assert bad.exit_code == EXIT_CODES["input"] and "multiple of kv_heads" in bad.stderr

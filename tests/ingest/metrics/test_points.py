"""Sampled points for scatter figures (SPEC §4.4), and the complement stage of a head's ingest."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkdb.ingest.metrics.complement import complement_pairs
from qkdb.ingest.engine.plane_layout import RopeLayout
from qkdb.ingest.metrics.rope_planes import rope_frequencies
from qkdb.ingest.engine.head import HeadContext, KindData, compute_head
from qkdb.ingest.sources.layout import HeadData
from qkdb.ingest.metrics.moments import moments, pool
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.metrics.pca import combined_pca
from qkdb.ingest.metrics.points import N_SCORES, sample_indices, sample_points
from qkdb.ingest.metrics.rotation import planar_rotation
from qkdb.ingest.capture.simulate import HeadParams, simulate_head
from qkdb.warehouse.batches import to_batch
from qkdb.warehouse.schema import POINTS


@pytest.fixture(scope="module")
def head():
    """A simulated head (RoPE rings, drift, Q/K offset) with its axes, as ingest computes them."""
    params = HeadParams(ring_planes=(0, 3, 7, 12), ring_radius=(5.0, 4.0, 3.0, 2.0), alpha_q=2e-3, alpha_k=4e-3)
    sim = simulate_head(params, 64, 5000, 4000, rope_theta=10000.0, max_position=2048, rng=np.random.default_rng(0))
    mq, mk = moments(sim.Q, sim.t_q), moments(sim.K, sim.t_k)
    pca = combined_pca(mq, mk)
    rot = planar_rotation(mq, mk)
    return sim, pca, rot


def _points(sim, pca, rot, *, n=512, seed=0, scores_fn=None, ex=True):
    return sample_points(
        sim.Q, sim.t_q, sim.ex_q if ex else None, sim.K, sim.t_k, sim.ex_k if ex else None,
        mu=pca.mean, pc0=pca.components[0], pc1=pca.components[1], a=rot.a, b=rot.b, n=n,
        rng=np.random.default_rng(seed), complement_scores_fn=scores_fn,
    )


def test_sample_layout_and_projections(head):
    sim, pca, rot = head
    pts = _points(sim, pca, rot)
    assert list(pts["idx"]) == list(range(1024))
    assert list(pts["kind"]) == ["q"] * 512 + ["k"] * 512
    # The same generator reproduces the indices: check every column against the raw vectors.
    rng = np.random.default_rng(0)
    iq, ik = sample_indices(5000, 512, rng), sample_indices(4000, 512, rng)
    X = np.concatenate([sim.Q[iq], sim.K[ik]])
    assert np.array_equal(pts["position"], np.r_[sim.t_q[iq], sim.t_k[ik]])
    assert np.array_equal(pts["example_id"], np.r_[sim.ex_q[iq], sim.ex_k[ik]])
    assert np.allclose(pts["pc0"], (X - pca.mean) @ pca.components[0])
    assert np.allclose(pts["pc1"], (X - pca.mean) @ pca.components[1])
    assert np.allclose(pts["a"], X @ rot.a)
    assert np.allclose(pts["b"], X @ rot.b)
    assert not any(f"c{i}" in pts for i in range(N_SCORES))  # left out: stored as NULL
    batch = to_batch(POINTS, {"layer": 3, "head": 1, **pts})
    assert batch.num_rows == 1024
    assert batch.column("c0").null_count == 1024


def test_same_seed_same_sample(head):
    sim, pca, rot = head
    first, again, other = _points(sim, pca, rot, seed=7), _points(sim, pca, rot, seed=7), _points(sim, pca, rot, seed=8)
    for c in first:
        assert np.array_equal(first[c], again[c], equal_nan=first[c].dtype.kind == "f"), c
    assert not np.array_equal(first["position"], other["position"])


def test_sample_reproduces_the_heads_drift_correlation(head):
    sim, pca, rot = head
    pts = _points(sim, pca, rot, seed=3)
    q = pts["kind"] == "q"
    for kind, mask, r_full in (("q", q, rot.columns["r_q_a"]), ("k", ~q, rot.columns["r_k_a"])):
        r = np.corrcoef(pts["a"][mask], pts["position"][mask])[0, 1]
        se = (1 - r_full**2) / math.sqrt(mask.sum())  # large-sample standard error of Pearson's r
        assert abs(r - r_full) < 4 * se + 1e-3, (kind, r, r_full)
    assert rot.columns["r_q_a"] > 0.3  # the comparison is about a real signal


def test_small_heads_give_all_their_vectors_and_complement_scores_fill_what_exists():
    rng = np.random.default_rng(1)
    d = 8
    Q, K = rng.standard_normal((30, d)), rng.standard_normal((20, d)) + 1
    tq, tk = rng.integers(0, 50, 30), rng.integers(0, 50, 20)
    mq, mk = moments(Q, tq), moments(K, tk)
    pca, rot = combined_pca(mq, mk), planar_rotation(mq, mk)
    m = pool(mq, mk)
    _, scores_fn = complement_pairs(Q, tq, K, tk, rot.a, rot.b, rng=rng, mu=m.mean, cov=m.cov)
    pts = sample_points(
        Q, tq, None, K, tk, None, mu=pca.mean, pc0=pca.components[0], pc1=pca.components[1],
        a=rot.a, b=rot.b, n=512, rng=rng, complement_scores_fn=scores_fn,
    )
    assert len(pts["idx"]) == 50 and (pts["kind"] == "q").sum() == 30
    X = np.concatenate([Q, K])
    assert np.allclose(np.column_stack([pts[f"c{i}"] for i in range(6)]), scores_fn(X))
    assert not any(f"c{i}" in pts for i in range(6, N_SCORES))  # d − 2 = 6: three pairs
    batch = to_batch(POINTS, {"layer": 0, "head": 0, **pts})
    assert batch.column("example_id").null_count == 50
    assert batch.column("c5").null_count == 0 and batch.column("c6").null_count == 50


def test_undefined_axes_leave_a_and_b_null(head):
    sim, pca, rot = head
    pts = sample_points(
        sim.Q, sim.t_q, sim.ex_q, sim.K, sim.t_k, sim.ex_k, mu=pca.mean, pc0=pca.components[0], pc1=None,
        a=None, b=None, n=10, rng=np.random.default_rng(0),
    )
    assert np.isnan(pts["a"]).all() and np.isnan(pts["b"]).all() and np.isnan(pts["pc1"]).all()
    with pytest.raises(ValueError):
        sample_indices(10, -1, np.random.default_rng(0))


# ------------------------------------------------------------------ the stage in compute_head


def _kind(X, t, ex) -> KindData:
    return KindData(HeadData(X, t.astype(np.float64), ex, 0), moments(X, t), "memory")


@pytest.mark.parametrize("collage", [True, False])
def test_compute_head_fills_complement_rope_planes_points_and_omega(head, collage):
    sim, _, _ = head
    q, k = _kind(sim.Q, sim.t_q, sim.ex_q), _kind(sim.K, sim.t_k, sim.ex_k)
    rope = RopeLayout("half", 0, 64, tuple(rope_frequencies(64, 10000.0)), "derived")
    ctx = HeadContext(layer=4, head=2, kv_head=0, depth=0.5, depth_bin=5, is_nope=False, collage=collage, rope=rope)
    opts = IngestOptions(points=100)
    rows = compute_head(q, k, ctx, opts)
    t = rows.tables
    assert len(t["rope_planes"]["j"]) == 32
    assert list(np.flatnonzero(t["rope_planes"]["rotating"])) == [0, 3, 7, 12]
    assert len(t["complement"]["pair"]) == 30
    assert t["complement"]["active"][:4].all()
    omega = t["rotation"]["omega"]
    assert omega in set(t["rope_planes"]["omega"][[0, 3, 7, 12]])
    assert 0.8 < t["rotation"]["omega_r_squared"] <= 1
    assert len(t["points"]["idx"]) == 200
    assert ("c0" in t["points"] and np.isfinite(t["points"]["c0"]).all()) == collage
    # The sample does not depend on which other stages ran.
    bare = compute_head(q, k, ctx, IngestOptions(points=100, complement=False))
    assert np.array_equal(bare.tables["points"]["position"], t["points"]["position"])
    assert "complement" not in bare.tables and math.isnan(bare.tables["rotation"]["omega"])

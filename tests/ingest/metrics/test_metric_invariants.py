"""Invariants every metric must satisfy, driven by the metric registry in warehouse/schema.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ortho_group

from qkdb.ingest.engine.plane_layout import RopeLayout
from qkdb.ingest.engine.head import HeadContext, KindData, compute_head, prepare
from qkdb.ingest.sources.layout import HeadData
from qkdb.ingest.metrics.moments import moments
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.metrics.pca import combined_pca
from qkdb.ingest.metrics.rotation import planar_rotation
from qkdb.warehouse.schema import HEADS, PCA, ROTATION

OPTIONS = IngestOptions(min_vectors=2)


def _ctx(d: int) -> HeadContext:
    # RoPE planes with frequencies fitted per plane (no theta known), as for a model outside the registry
    return HeadContext(layer=1, head=2, kv_head=1, depth=0.5, depth_bin=5, is_nope=False, collage=False,
                       rope=RopeLayout("half", 0, d - d % 2, None, "fitted"))
METRIC_TABLES = (HEADS, PCA, ROTATION)


def _kind(X, t) -> KindData:
    return prepare(HeadData(X, t.astype(float), None, 0), "mem", OPTIONS, (0,))


def _head(seed=0, n=400, d=12):
    rng = np.random.default_rng(seed)
    tq, tk = rng.integers(0, 3000, n).astype(float), rng.integers(0, 3000, n).astype(float)
    u, w = np.eye(d)[0], np.eye(d)[1]
    mix = rng.normal(size=(d, d)) * 0.3 + np.eye(d)
    Q = rng.normal(size=(n, d)) @ mix + np.outer(2e-3 * tq + 3, u) + 5 * w
    K = rng.normal(size=(n, d)) @ mix + np.outer(4e-3 * tk - 1, u) - 5 * w
    return Q, tq, K, tk


def _metrics(Q, tq, K, tk) -> dict[str, np.ndarray]:
    rows = compute_head(_kind(Q, tq), _kind(K, tk), _ctx(Q.shape[1]), OPTIONS)
    out = {}
    for table in METRIC_TABLES:
        for col in table.metric_columns:
            if col.name in rows.tables[table.name]:
                out[f"{table.name}.{col.name}"] = np.atleast_1d(np.asarray(rows.tables[table.name][col.name], float))
    return out


def _metric_params():
    return [pytest.param(t, c, id=f"{t.name}.{c.name}") for t in METRIC_TABLES for c in t.metric_columns]


@pytest.fixture(scope="module")
def base():
    Q, tq, K, tk = _head()
    return (Q, tq, K, tk), _metrics(Q, tq, K, tk)


def _check(base_vals, new_vals, table, col, factor=1.0, atol=1e-8):
    key = f"{table.name}.{col.name}"
    # Every metric column of the schema must be computed by the head pipeline (OPTIONS run every
    # stage): a missing one is a metric the invariance tests would silently stop covering.
    assert key in base_vals and key in new_vals, f"{key} is not computed"
    a, b = base_vals[key] * factor, new_vals[key]
    both_nan = np.isnan(a) & np.isnan(b)
    if key == "rotation.residual_pos_r":  # rounding noise at 1e-15: only its smallness is invariant
        assert np.all(b[~both_nan] < 1e-10)
        return
    np.testing.assert_allclose(b[~both_nan], a[~both_nan], rtol=1e-7, atol=atol, err_msg=key)


@pytest.mark.parametrize("table,col", _metric_params())
def test_invariant_under_shared_rotation(base, table, col):
    """An orthogonal map applied to Q and K alike (it preserves every q·k) changes no metric."""
    (Q, tq, K, tk), vals = base
    R = ortho_group.rvs(Q.shape[1], random_state=1)
    _check(vals, _metrics(Q @ R, tq, K @ R, tk), table, col)


@pytest.mark.parametrize("table,col", _metric_params())
def test_position_shift_and_scale(base, table, col):
    """t -> s·t + c scales each metric by s**t_power (slopes per token scale by 1/s)."""
    (Q, tq, K, tk), vals = base
    s, c = 2.5, 700.0
    _check(vals, _metrics(Q, s * tq + c, K, s * tk + c), table, col, factor=s ** col.t_power)


@pytest.mark.parametrize("table,col", _metric_params())
def test_row_order_does_not_matter(base, table, col):
    (Q, tq, K, tk), vals = base
    p, q = np.random.default_rng(2).permutation(len(Q)), np.random.default_rng(3).permutation(len(K))
    _check(vals, _metrics(Q[p], tq[p], K[q], tk[q]), table, col)


def test_full_pca_basis_preserves_dot_products():
    Q, tq, K, tk = _head(1)
    res = combined_pca(moments(Q, tq), moments(K, tk), n_components=Q.shape[1])
    V = res.components
    np.testing.assert_allclose((Q @ V.T) @ (K @ V.T).T, Q @ K.T, rtol=1e-10, atol=1e-8)


def test_drift_lemma_residual_is_rounding_noise():
    # Strongly anisotropic content makes the complement ill-conditioned: still ~1e-14.
    Q, tq, K, tk = _head(2, d=32)
    scale = np.logspace(2, -1, 32)  # drift axis amplified, last dims tiny
    res = planar_rotation(moments(Q * scale, tq), moments(K * scale, tk))
    assert res.columns["residual_pos_r"] <= 1e-10
    # ...whereas a direction with real position signal has a large |corr|.
    assert res.columns["position_r"] > 0.3


def test_sign_canonicalisation_uses_r_q_then_falls_back_to_r_k():
    rng = np.random.default_rng(6)
    n, d = 3000, 4
    tq, tk = rng.integers(0, 1000, n).astype(float), rng.integers(0, 1000, n).astype(float)
    # PC0 (e0, by far the largest variance): Q has no position signal there, K a strong one.
    Q = rng.normal(size=(n, d)) * [10, 1, 1, 1]
    K = rng.normal(size=(n, d)) * [10, 1, 1, 1]
    K[:, 0] += -0.03 * tk
    Q[:, 1] += 0.004 * tq  # PC with strong r_q
    res = combined_pca(moments(Q, tq), moments(K, tk), n_components=d)
    cols = res.columns
    assert abs(cols["r_q"][0]) < 0.05 and cols["sign_anchor"][0] == "k"
    assert cols["r_k"][0] > 0.5  # flipped so r_k >= 0
    strong_q = np.flatnonzero(cols["sign_anchor"] == "q")
    assert len(strong_q) and np.all(cols["r_q"][strong_q] >= 0.05)


def test_constant_positions_give_null_correlations_not_errors():
    rng = np.random.default_rng(7)
    Q, K = rng.normal(size=(200, 6)), rng.normal(size=(200, 6)) + 1
    t = np.full(200, 42.0)
    # Straight to the metrics (ingest's `prepare` refuses such files as a broken capture).
    kq = KindData(HeadData(Q, t, None, 0), moments(Q, t), "q")
    kk = KindData(HeadData(K, t, None, 0), moments(K, t), "k")
    rows = compute_head(kq, kk, _ctx(kq.moments.d), OPTIONS)
    assert np.all(np.isnan(rows.tables["pca"]["r_q"])) and np.all(np.isnan(rows.tables["pca"]["r_k"]))
    assert np.isnan(rows.tables["rotation"]["bias_strength"])
    assert np.isnan(rows.tables["heads"]["pos_var_q"])
    assert rows.notes and "NULL" in rows.notes[0]
    # PCA parts that do not involve position stay defined.
    assert np.isfinite(rows.tables["pca"]["explained_variance"]).all()


def test_value_errors_name_the_bad_value():
    Q, tq, K, tk = _head(3)
    with pytest.raises(ValueError, match="b_method"):
        planar_rotation(moments(Q, tq), moments(K, tk), b_method="svd")
    with pytest.raises(ValueError, match="n_components"):
        combined_pca(moments(Q, tq), moments(K, tk), n_components=0)
    with pytest.raises(ValueError, match="dimensions differ"):
        combined_pca(moments(Q, tq), moments(K[:, :5], tk))

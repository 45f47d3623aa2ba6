"""The ingest's faster linear algebra gives the numbers of the plain formulas it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from qkdb.ingest.metrics import moments as moments_mod
from qkdb.ingest.metrics.moments import moments, pool, proj_var, top_eigenpairs
from qkdb.ingest.metrics.rotation import _quad_inverse_cholesky, planar_rotation, residual_position_r


def _direct(X, t):
    X = np.asarray(X, dtype=np.float64)
    Xc = X - X.mean(axis=0)
    tc = t - t.mean()
    return Xc.T @ Xc / len(X), Xc.T @ tc / len(X)


@pytest.mark.parametrize("n", [1, 7, 2047, 2048, 2049, 5000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_moments_equal_the_direct_formula(n, dtype, monkeypatch):
    monkeypatch.setattr(moments_mod, "_BLOCK_ELEMENTS", 16 * 64)  # blocks of 64 rows of d=16
    rng = np.random.default_rng(n)
    X = (rng.normal(size=(n, 16)) * 3 + 100).astype(dtype)  # a large offset: centring matters
    t = rng.integers(0, 4096, size=n).astype(np.float64)
    m = moments(X, t)
    cov, cov_xt = _direct(X, t)
    np.testing.assert_allclose(m.cov, cov, rtol=1e-12, atol=1e-12 * np.abs(cov).max())
    np.testing.assert_allclose(m.cov_xt, cov_xt, rtol=1e-12, atol=1e-9 * max(np.abs(cov_xt).max(), 1e-300))
    np.testing.assert_array_equal(m.cov, m.cov.T)  # syrk: exactly symmetric
    assert m.mean.dtype == np.float64


def test_moments_from_a_given_column_sum_are_identical():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 16)) * 2 + 50
    t = rng.integers(0, 4096, size=3000).astype(np.float64)
    a, b = moments(X, t), moments(X, t, total=X.sum(axis=0))
    for field in ("mean", "cov", "cov_xt"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    with pytest.raises(ValueError, match=r"total must be \(16,\), got \(15,\)"):
        moments(X, t, total=X.sum(axis=0)[:15])


def test_proj_var_is_the_quadratic_form():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 12))
    m = moments(X, np.arange(300.0))
    V = rng.normal(size=(12, 5))
    np.testing.assert_allclose(proj_var(V, m), np.einsum("ik,ij,jk->k", V, m.cov, V), rtol=1e-13)
    np.testing.assert_allclose(proj_var(V[:, 0], m), V[:, 0] @ m.cov @ V[:, 0], rtol=1e-13)


@pytest.mark.parametrize("k", [1, 3, 10, 12])
def test_top_eigenpairs_match_the_full_decomposition(k):
    rng = np.random.default_rng(k)
    A = rng.normal(size=(12, 40))
    S = A @ A.T
    w, U = np.linalg.eigh(S)
    top_w, top_U = top_eigenpairs(S, k)
    np.testing.assert_allclose(top_w, w[::-1][:k], rtol=1e-12)
    # eigenvectors up to sign
    np.testing.assert_allclose(np.abs(np.sum(top_U * U[:, ::-1][:, :k], axis=0)), 1.0, rtol=1e-10)


def _pinv_residual(B, m):
    g, G = B.T @ m.cov_xt, B.T @ m.cov @ B
    w, U = np.linalg.eigh(G)
    keep = w > 1e-12 * w.max()
    return float(np.sqrt(np.sum((U[:, keep].T @ g) ** 2 / w[keep]) / m.t_var))


@pytest.mark.parametrize("zero_dims", [0, 4])
def test_residual_position_r_equals_the_pseudo_inverse_formula(zero_dims):
    rng = np.random.default_rng(11)
    t = np.arange(400.0)
    Q = rng.normal(size=(400, 12)) + np.outer(t, np.r_[0.02, 0.01, np.zeros(10)])
    K = rng.normal(size=(400, 12)) + 2 + np.outer(t, np.r_[0.03, 0.0, 0.01, np.zeros(9)])
    if zero_dims:  # singular G: the Cholesky path must step aside for the pseudo-inverse
        Q[:, -zero_dims:] = 0.0
        K[:, -zero_dims:] = 0.0
    mq, mk = moments(Q, t), moments(K, t)
    rot = planar_rotation(mq, mk)
    m = pool(mq, mk)
    B = rot.complement
    used_cholesky = _quad_inverse_cholesky(B.T @ m.cov @ B, B.T @ m.cov_xt) is not None
    assert used_cholesky == (zero_dims == 0)
    expect = _pinv_residual(B, m)
    assert residual_position_r(B, m) == pytest.approx(expect, rel=1e-6, abs=1e-30)
    assert rot.columns["residual_pos_r"] < 1e-12  # the drift lemma: nothing left outside {a, b}

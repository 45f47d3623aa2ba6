"""Our moment-based metrics against a direct computation with sklearn, scipy and brute force."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.metrics import balanced_accuracy_score

from qkdb.ingest.metrics.moments import moments, pool
from qkdb.ingest.metrics.pca import SIGN_FALLBACK, combined_pca, qk_accuracy
from qkdb.ingest.metrics.rotation import planar_rotation

TOL = 1e-6


def _data(seed=0, n_q=70, n_k=55, d=8):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))  # correlated, anisotropic content
    tq = rng.integers(0, 500, n_q).astype(float)
    tk = rng.integers(0, 500, n_k).astype(float)
    Q = rng.normal(size=(n_q, d)) @ A + 3.0 + np.outer(tq, rng.normal(size=d)) * 4e-3
    K = rng.normal(size=(n_k, d)) @ A - 2.0 + np.outer(tk, rng.normal(size=d)) * 9e-3
    return Q, tq, K, tk


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pca_matches_sklearn_and_scipy(seed):
    Q, tq, K, tk = _data(seed)
    X = np.vstack([Q, K])
    d = X.shape[1]
    ours = combined_pca(moments(Q, tq), moments(K, tk), n_components=d)

    ref = PCA(n_components=d).fit(X)
    np.testing.assert_allclose(ours.columns["explained_variance"], ref.explained_variance_ratio_, atol=TOL)
    P = (X - X.mean(axis=0)) @ ref.components_.T
    for j in range(d):
        r_q = stats.pearsonr(P[: len(Q), j], tq).statistic
        r_k = stats.pearsonr(P[len(Q) :, j], tk).statistic
        # The seeds' canonicalisation, written out independently.
        s = np.sign(r_q) if abs(r_q) >= SIGN_FALLBACK else np.sign(r_k)
        assert ours.columns["r_q"][j] == pytest.approx(s * r_q, abs=TOL)
        assert ours.columns["r_k"][j] == pytest.approx(s * r_k, abs=TOL)
        p = s * P[:, j]
        assert ours.columns["mu_q"][j] == pytest.approx(p[: len(Q)].mean(), abs=TOL)
        assert ours.columns["mu_k"][j] == pytest.approx(p[len(Q) :].mean(), abs=TOL)
        assert ours.columns["sd_q"][j] == pytest.approx(p[: len(Q)].std(), abs=TOL)
        assert ours.columns["sd_k"][j] == pytest.approx(p[len(Q) :].std(), abs=TOL)
        fisher = (p[: len(Q)].mean() - p[len(Q) :].mean()) ** 2 / (p[: len(Q)].var() + p[len(Q) :].var())
        assert ours.columns["fisher"][j] == pytest.approx(fisher, rel=1e-9)
    ev, rq, rk = ours.columns["explained_variance"], ours.columns["r_q"], ours.columns["r_k"]
    assert ours.head["pos_var_q"] == pytest.approx(np.sum(ev * rq**2), abs=TOL)
    assert ours.head["pc0_pos_share_k"] == pytest.approx(ev[0] * rk[0] ** 2 / np.sum(ev * rk**2), abs=TOL)


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_qk_accuracy_matches_sklearn_on_the_pc_scores(seed):
    # The seeds' recipe: project both kinds on PC0 and PC1, fit sklearn's LDA to tell Q from K,
    # score its predictions with the balanced accuracy. Ours never forms the scores.
    Q, tq, K, tk = _data(seed, n_q=300, n_k=200)
    mq, mk = moments(Q, tq), moments(K, tk)
    V2 = combined_pca(mq, mk).components[:2]
    X = np.vstack([Q, K])
    P = (X - X.mean(axis=0)) @ V2.T
    y = np.r_[np.ones(len(Q)), np.zeros(len(K))]
    pred = LinearDiscriminantAnalysis(solver="lsqr").fit(P, y).predict(P)
    expected = balanced_accuracy_score(y, pred)
    assert 0.5 < expected < 1.0  # a case where the discriminant can be wrong either way
    assert qk_accuracy(Q, K, mq, mk, V2) == pytest.approx(expected, abs=1e-12)


def test_qk_accuracy_checks_its_moments():
    Q, tq, K, tk = _data(0)
    mq, mk = moments(Q, tq), moments(K, tk)
    with pytest.raises(ValueError, match="moments of 70 and 55 vectors given for 69 and 55"):
        qk_accuracy(Q[1:], K, mq, mk, np.eye(8)[:2])


def _pearson(x, y):
    return stats.pearsonr(x, y).statistic


@pytest.mark.parametrize("seed", [0, 4])
def test_rotation_matches_direct_computation(seed):
    Q, tq, K, tk = _data(seed)
    X, t = np.vstack([Q, K]), np.r_[tq, tk]
    ours = planar_rotation(moments(Q, tq), moments(K, tk))
    cols = ours.columns

    c = ((X - X.mean(0)) * (t - t.mean())[:, None]).mean(0)
    a = c / np.linalg.norm(c)
    # E[δδᵀ] over every (q, k) pair, by brute force rather than the closed form.
    delta = (Q[:, None, :] - K[None, :, :]).reshape(-1, X.shape[1])
    C_delta = delta.T @ delta / len(delta)
    P = np.eye(len(a)) - np.outer(a, a)
    w, U = np.linalg.eigh(P @ C_delta @ P)
    b = U[:, -1] * np.sign((Q.mean(0) - K.mean(0)) @ U[:, -1])
    np.testing.assert_allclose(ours.a, a, atol=1e-9)
    np.testing.assert_allclose(ours.b, b, atol=1e-7)

    C = np.cov(X.T, bias=True)
    expect = {
        "position_r": abs(_pearson(X @ a, t)),
        "r_q_a": _pearson(Q @ a, tq),
        "r_k_a": _pearson(K @ a, tk),
        "alpha_q": stats.linregress(tq, Q @ a).slope,
        "alpha_k": stats.linregress(tk, K @ a).slope,
        "mu_q_a": (Q @ a).mean(),
        "mu_k_a": (K @ a).mean(),
        "mu_q_b": (Q @ b).mean(),
        "mu_k_b": (K @ b).mean(),
        "separation_strength": np.mean((delta @ b) ** 2) / np.mean(np.sum(delta**2, axis=1)),
        "var_frac_a": np.var(X @ a) / np.trace(C),
        "var_frac_b": np.var(X @ b) / np.trace(C),
        "content_var_b": (np.var(Q @ b) + np.var(K @ b)) / 2,
    }
    expect["bias_strength"] = expect["mu_q_a"] * expect["alpha_k"]
    expect["plane_var_fraction"] = expect["var_frac_a"] + expect["var_frac_b"]
    for name, value in expect.items():
        assert cols[name] == pytest.approx(value, abs=TOL, rel=1e-9), name

    # residual_pos_r from an orthonormal basis of the centred complement scores (SVD).
    Bq, _ = np.linalg.qr(np.column_stack([a, b]), mode="complete")
    Z = (X - X.mean(0)) @ Bq[:, 2:]
    U_z = np.linalg.svd(Z, full_matrices=False)[0]
    tc = t - t.mean()
    direct = np.linalg.norm(U_z.T @ tc) / np.linalg.norm(tc)
    assert cols["residual_pos_r"] <= 1e-10 and direct <= 1e-10


def test_mean_diff_b_is_projected_mean_difference():
    Q, tq, K, tk = _data(7)
    ours = planar_rotation(moments(Q, tq), moments(K, tk), b_method="mean_diff")
    delta = Q.mean(0) - K.mean(0)
    v = delta - (delta @ ours.a) * ours.a
    np.testing.assert_allclose(ours.b, v / np.linalg.norm(v), atol=1e-10)


def test_pooling_equals_moments_of_the_union():
    Q, tq, K, tk = _data(5)
    pooled = pool(moments(Q, tq), moments(K, tk))
    direct = moments(np.vstack([Q, K]), np.r_[tq, tk])
    np.testing.assert_allclose(pooled.cov, direct.cov, atol=1e-9)
    np.testing.assert_allclose(pooled.cov_xt, direct.cov_xt, atol=1e-9)
    assert pooled.t_var == pytest.approx(direct.t_var)

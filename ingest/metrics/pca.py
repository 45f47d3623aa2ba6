"""Combined Q/K PCA (seed 003, SPEC §4.1): shared components of the pooled vectors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkdb.ingest.metrics.moments import Moments, corr_along, pool, proj_var, top_eigenpairs

SIGN_FALLBACK = 0.05  # below this |r_q| the sign of r_k anchors the component (seed 003)


@dataclass
class PcaResult:
    columns: dict[str, np.ndarray]  # one entry per PC, warehouse `pca` columns
    head: dict[str, float]  # head-level PCA columns of the `heads` table (except qk_accuracy_pc01)
    components: np.ndarray  # (k, d), canonical signs
    mean: np.ndarray  # pooled mean μ


def _var_floor(pooled_cov: np.ndarray) -> float:
    # Directions whose variance is ~1e-12 of the total are rounding noise: corr is undefined there.
    return 1e-12 * max(float(np.trace(pooled_cov)), np.finfo(float).tiny)


def combined_pca(mq: Moments, mk: Moments, n_components: int = 10) -> PcaResult:
    """PCA of the pooled [Q; K] with sign-canonical components and per-kind statistics.

    Parameters
    ----------
    mq, mk : Moments
        Moments of the query vectors and of the key vectors (same dimension d).
    n_components : int
        Number of leading components kept (capped at d).

    Returns
    -------
    PcaResult
        ``columns`` holds, per component j: pc, eigenvalue, explained_variance (λ_j / tr C),
        r_q, r_k, mu_q, mu_k, sd_q, sd_k, fisher and sign_anchor; ``head`` the head-level
        pos_var_q/k, pc0_pos_share_q/k, qk_separation_pc0 and fisher_pc0.
    """
    if mq.d != mk.d:
        raise ValueError(f"query and key dimensions differ: {mq.d} != {mk.d}")
    if n_components < 1:
        raise ValueError(f"n_components must be >= 1, got {n_components}")
    m = pool(mq, mk)
    lam, V = top_eigenpairs(m.cov, min(n_components, m.d))  # λ descending, V (d, k)
    lam = np.clip(lam, 0.0, None)
    total = float(np.trace(m.cov))
    floor = _var_floor(m.cov)

    r_q = corr_along(V, mq, floor)
    r_k = corr_along(V, mk, floor)
    # Sign canonicalisation: r_q >= 0; when |r_q| < 0.05 (or undefined) r_k >= 0 instead.
    use_q = np.isfinite(r_q) & (np.abs(r_q) >= SIGN_FALLBACK)
    use_k = ~use_q & np.isfinite(r_k) & (r_k != 0)
    # With neither defined, make the sign deterministic: largest |component| positive.
    largest = V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])]
    sign = np.where(use_q, np.sign(r_q), np.where(use_k, np.sign(r_k), np.sign(largest)))
    sign[sign == 0] = 1.0
    V = V * sign
    r_q, r_k = r_q * sign, r_k * sign
    anchor = np.where(use_q, "q", np.where(use_k, "k", None))

    mu_q = (mq.mean - m.mean) @ V
    mu_k = (mk.mean - m.mean) @ V
    var_q = proj_var(V, mq)
    var_k = proj_var(V, mk)
    spread = var_q + var_k
    fisher = np.where(spread > 0, (mu_q - mu_k) ** 2 / np.where(spread > 0, spread, 1.0), np.nan)
    ev = lam / total if total > 0 else np.full_like(lam, np.nan)

    columns = {
        "pc": np.arange(len(lam), dtype=np.int32),
        "eigenvalue": lam,
        "explained_variance": ev,
        "r_q": r_q,
        "r_k": r_k,
        "mu_q": mu_q,
        "mu_k": mu_k,
        "sd_q": np.sqrt(np.clip(var_q, 0, None)),
        "sd_k": np.sqrt(np.clip(var_k, 0, None)),
        "fisher": fisher,
        "sign_anchor": anchor,
    }
    head = {
        **_positional_variance(ev, r_q, "q"),
        **_positional_variance(ev, r_k, "k"),
        "qk_separation_pc0": float(abs(mu_q[0] - mu_k[0])),
        "fisher_pc0": float(fisher[0]),
    }
    return PcaResult(columns, head, V.T.copy(), m.mean)


def _positional_variance(ev: np.ndarray, r: np.ndarray, kind: str) -> dict[str, float]:
    """Seed 003 Finding 1: share of a kind's variance linear in position, and PC0's part of it."""
    if not np.isfinite(r).any():
        return {f"pos_var_{kind}": np.nan, f"pc0_pos_share_{kind}": np.nan}
    parts = ev * np.nan_to_num(r) ** 2
    total = float(parts.sum())
    share = float(parts[0] / total) if total > 0 else np.nan
    return {f"pos_var_{kind}": total, f"pc0_pos_share_{kind}": share}


def qk_accuracy(Q: np.ndarray, K: np.ndarray, mq: Moments, mk: Moments, components: np.ndarray) -> float:
    """Balanced training accuracy of a Q-vs-K linear discriminant on the scores on ``components``.

    The model is sklearn's ``LinearDiscriminantAnalysis`` with default priors (class frequencies)
    and the frequency-weighted within-class covariance, fitted to the centred scores
    ``(X − μ) componentsᵀ`` of both kinds, in closed form. Its class means and covariances are
    those of the scores, so they come from the moments; the discriminant is then one direction
    ``u`` of the vector space, and classifying every vector is one matrix-vector product per kind
    (instead of one per component to form the scores). The pooled mean μ cancels out.

    Parameters
    ----------
    Q, K : ndarray of shape (n_q, d) and (n_k, d)
        The vectors the moments were taken of.
    mq, mk : Moments
        Their moments.
    components : ndarray of shape (p, d)
        Directions of the scores (e.g. PC0 and PC1).
    """
    n_q, n_k = len(Q), len(K)
    if n_q == 0 or n_k == 0:
        raise ValueError(f"both classes need samples, got n_q={n_q}, n_k={n_k}")
    if (n_q, n_k) != (mq.n, mk.n):
        raise ValueError(f"moments of {mq.n} and {mk.n} vectors given for {n_q} and {n_k}")
    V = np.atleast_2d(np.asarray(components, dtype=np.float64))
    n = n_q + n_k
    m_q, m_k = V @ mq.mean, V @ mk.mean
    S = (n_q * (V @ mq.cov @ V.T) + n_k * (V @ mk.cov @ V.T)) / n
    w = np.linalg.pinv(S, hermitian=True) @ (m_q - m_k)
    u = V.T @ w
    bias = -0.5 * (m_q + m_k) @ w + np.log(n_q / n_k)
    tpr_q = np.count_nonzero(Q @ u + bias > 0) / n_q
    tpr_k = np.count_nonzero(K @ u + bias <= 0) / n_k
    return 0.5 * (tpr_q + tpr_k)

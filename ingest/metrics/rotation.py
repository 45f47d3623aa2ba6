"""Planar rotation model (seed 002, SPEC §4.2): drift axis a, separation axis b, recency bias."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkdb.ingest.metrics.moments import Moments, corr_along, pool, proj_var, t_is_constant, top_eigenpairs

B_METHODS = ("eig", "mean_diff")

COLUMNS = (
    "position_r", "omega", "omega_r_squared", "r_q_a", "r_k_a", "alpha_q", "alpha_k",
    "mu_q_a", "mu_k_a", "mu_q_b", "mu_k_b", "bias_strength", "separation_strength",
    "var_frac_a", "var_frac_b", "plane_var_fraction", "residual_pos_r", "content_var_b", "drift_norm",
)


@dataclass
class RotationResult:
    columns: dict[str, float]  # warehouse `rotation` columns (NaN where undefined)
    a: np.ndarray | None  # unit drift axis, None when cov(X, t) = 0
    b: np.ndarray | None  # unit separation axis ⊥ a
    complement: np.ndarray | None  # (d, d-2) orthonormal basis of {a, b}^⊥
    note: str | None = None  # why the metrics are NULL, when they are


def complement_basis(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An orthonormal basis (d × (d−2)) of the orthogonal complement of span{a, b}."""
    q, _ = np.linalg.qr(np.column_stack([a, b]), mode="complete")
    return q[:, 2:]


def residual_position_r(B: np.ndarray, m: Moments) -> float:
    """Multiple correlation of position with the centred complement scores ``Z = (X − μ)B``.

    ``‖Uᵀ t_c‖ / ‖t_c‖`` with U an orthonormal basis of Z's columns equals
    ``sqrt(gᵀ G⁺ g / var t)`` with ``g = Bᵀ cov(X, t)`` and ``G = Bᵀ C B``; computed this way it
    keeps float64's precision (~1e-15) instead of the ~1e-8 of ``sqrt(1 − RSS/TSS)``.
    """
    if t_is_constant(m) or B.shape[1] == 0:
        return np.nan
    g = B.T @ m.cov_xt
    G = B.T @ m.cov @ B
    quad = _quad_inverse_cholesky(G, g)
    if quad is None:
        # Near-singular G: the pseudo-inverse, dropping eigenvalues below 1e-12 of the largest.
        w, U = np.linalg.eigh(G)
        keep = w > 1e-12 * max(float(w.max()), np.finfo(float).tiny)
        proj = U[:, keep].T @ g
        quad = float(np.sum(proj**2 / w[keep]))
    return float(np.sqrt(max(quad, 0.0) / m.t_var))


def _quad_inverse_cholesky(G: np.ndarray, g: np.ndarray) -> float | None:
    """``gᵀ G⁻¹ g`` through a Cholesky factor when G is safely non-singular, else None.

    With a reciprocal condition number above 1e-9, no eigenvalue of G lies below 1e-12 of the
    largest, so the inverse equals the pseudo-inverse of :func:`residual_position_r` exactly
    (in exact arithmetic); the factorisation costs a tenth of an eigendecomposition and
    ``‖L⁻¹g‖²`` keeps the relative precision of the (tiny) result.
    """
    import scipy.linalg  # here, not at the top: the ingest's parent process never needs it

    L, info = scipy.linalg.lapack.dpotrf(G, lower=1)
    if info != 0:
        return None
    rcond, info = scipy.linalg.lapack.dpocon(L, float(np.abs(G).sum(axis=0).max()), uplo="L")
    if info != 0 or not rcond > 1e-9:
        return None
    y = scipy.linalg.solve_triangular(L, g, lower=True, check_finite=False)
    return float(y @ y)


def planar_rotation(mq: Moments, mk: Moments, b_method: str = "eig") -> RotationResult:
    """Seed 002's 2-D model of one head from its query and key moments.

    Parameters
    ----------
    mq, mk : Moments
        Moments of the query vectors and of the (GQA-mapped) key vectors.
    b_method : {"eig", "mean_diff"}
        ``"eig"``: b is the unit top eigenvector of ``(I − aaᵀ) C_δ (I − aaᵀ)`` (the seeds' code);
        ``"mean_diff"``: b is the normalised projection of μ_Q − μ_K (the thesis text).
        Either way b is oriented so that ``(μ_Q − μ_K)·b ≥ 0``.
    """
    if b_method not in B_METHODS:
        raise ValueError(f"b_method must be one of {B_METHODS}, got {b_method!r}")
    if mq.d != mk.d:
        raise ValueError(f"query and key dimensions differ: {mq.d} != {mk.d}")
    m = pool(mq, mk)
    nan = {c: np.nan for c in COLUMNS}
    trace_c = float(np.trace(m.cov))
    c = m.cov_xt
    c_norm = float(np.linalg.norm(c))
    nan["drift_norm"] = c_norm
    if t_is_constant(m) or c_norm <= 1e-12 * np.sqrt(max(trace_c, 0.0) * m.t_var):
        return RotationResult(nan, None, None, None, "no linear position covariance (cov(X, t) = 0)")

    d = m.d
    a = c / c_norm
    delta = mq.mean - mk.mean
    C_delta = mq.cov + mk.cov + np.outer(delta, delta)
    P = np.eye(d) - np.outer(a, a)
    if b_method == "eig":
        # (I − aaᵀ) C_δ (I − aaᵀ) = C_δ − a uᵀ − u aᵀ + (aᵀC_δa) aaᵀ with u = C_δa: two rank-one
        # updates instead of two d³ products; only the top eigenvector is computed.
        u = C_delta @ a
        M = C_delta - np.outer(a, u) - np.outer(u, a) + float(a @ u) * np.outer(a, a)
        b = top_eigenpairs(M, 1)[1][:, 0]
    else:
        b = P @ delta
        if np.linalg.norm(b) == 0:
            return RotationResult(nan, a, None, None, "mu_Q - mu_K is parallel to a; b undefined")
    b = P @ b  # re-orthogonalise against a to rounding
    b /= np.linalg.norm(b)
    if delta @ b < 0:
        b = -b

    floor = 1e-12 * max(trace_c, np.finfo(float).tiny)
    alpha_q = float(a @ mq.cov_xt / mq.t_var) if not t_is_constant(mq) else np.nan
    alpha_k = float(a @ mk.cov_xt / mk.t_var) if not t_is_constant(mk) else np.nan
    mu_q_a, mu_k_a = float(mq.mean @ a), float(mk.mean @ a)
    var_a, var_b = proj_var(a, m), proj_var(b, m)
    B = complement_basis(a, b)
    cols = {
        "position_r": float(abs(corr_along(a, m, floor))),
        "omega": np.nan,
        "omega_r_squared": np.nan,
        "r_q_a": float(corr_along(a, mq, floor)),
        "r_k_a": float(corr_along(a, mk, floor)),
        "alpha_q": alpha_q,
        "alpha_k": alpha_k,
        "mu_q_a": mu_q_a,
        "mu_k_a": mu_k_a,
        "mu_q_b": float(mq.mean @ b),
        "mu_k_b": float(mk.mean @ b),
        "bias_strength": mu_q_a * alpha_k,
        "separation_strength": float(b @ C_delta @ b / np.trace(C_delta)),
        "var_frac_a": var_a / trace_c,
        "var_frac_b": var_b / trace_c,
        "plane_var_fraction": (var_a + var_b) / trace_c,
        "residual_pos_r": residual_position_r(B, m),
        "content_var_b": 0.5 * (proj_var(b, mq) + proj_var(b, mk)),
        "drift_norm": c_norm,
    }
    return RotationResult(cols, a, b, B)

"""Per-file sufficient statistics and their exact pooling.

Every seed metric of SPEC §4.1–4.2 is a function of these moments of Q, of K and of the
pool [Q; K]: ``corr(Xv, t) = v'c / sqrt(v'Sv · var t)``. Moments are population moments
(divide by n), computed on data centred at its own mean (so large cluster offsets do not
cancel digits) and pooled with the exact two-group formulas.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Moments:
    """Population moments of vectors ``X`` (n × d) and positions ``t`` (n,)."""

    n: int
    mean: np.ndarray  # (d,)
    t_mean: float
    t_var: float
    cov: np.ndarray  # (d, d)
    cov_xt: np.ndarray  # (d,) = cov(X, t)

    @property
    def d(self) -> int:
        return self.mean.shape[0]


# Rows per block when accumulating the scatter matrix: a centred block (2048 × 128 float64 = 2 MiB)
# stays in cache between the subtraction and the product, instead of an n × d centred copy.
_BLOCK_ELEMENTS = 2048 * 128


def moments(X: np.ndarray, t: np.ndarray, total: np.ndarray | None = None) -> Moments:
    """Moments of one file's vectors and positions, in float64.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Vectors; float32 input is widened block by block (the arithmetic is float64 either way).
    t : ndarray of shape (n,)
    total : ndarray of shape (d,), optional
        ``X.sum(axis=0)`` in float64 when the caller already has it (one pass over X fewer).
    """
    X = np.asarray(X)
    if X.dtype != np.float32:
        X = np.asarray(X, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    if X.ndim != 2 or t.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and t (n,), got X{X.shape} and t{t.shape}")
    n, d = X.shape
    if n == 0:
        raise ValueError("moments of an empty set of vectors")
    if total is None:
        mean = X.mean(axis=0, dtype=np.float64)
    else:
        total = np.asarray(total, dtype=np.float64)
        if total.shape != (d,):
            raise ValueError(f"total must be ({d},), got {total.shape}")
        mean = total / n  # what X.mean computes, exactly
    t_mean = float(t.mean())
    tc = t - t_mean
    # Σ (x − μ)(x − μ)ᵀ over blocks of centred rows. np.dot of a matrix with its own transpose
    # runs BLAS syrk (half the multiplications of a general product, and an exactly symmetric
    # result); `@` would not.
    cov = np.zeros((d, d))
    cov_xt = np.zeros(d)
    block = max(1, _BLOCK_ELEMENTS // max(d, 1))
    buf = np.empty((min(block, n), d))
    for start in range(0, n, block):
        b = buf[: min(block, n - start)]
        np.subtract(X[start : start + block], mean, out=b)
        cov += np.dot(b.T, b)
        cov_xt += tc[start : start + block] @ b
    cov /= n
    cov_xt /= n
    return Moments(n, mean, t_mean, float(tc @ tc) / n, cov, cov_xt)


def pool(a: Moments, b: Moments) -> Moments:
    """Moments of the union of two sets, exactly (Chan et al.'s pairwise update)."""
    n = a.n + b.n
    wa, wb = a.n / n, b.n / n
    dm = a.mean - b.mean
    dt = a.t_mean - b.t_mean
    cross = wa * wb
    return Moments(
        n=n,
        mean=wa * a.mean + wb * b.mean,
        t_mean=wa * a.t_mean + wb * b.t_mean,
        t_var=wa * a.t_var + wb * b.t_var + cross * dt * dt,
        cov=wa * a.cov + wb * b.cov + cross * np.outer(dm, dm),
        cov_xt=wa * a.cov_xt + wb * b.cov_xt + cross * dm * dt,
    )


def t_is_constant(m: Moments) -> bool:
    """Whether positions have (numerically) zero variance."""
    return m.t_var <= 1e-12 * (m.t_mean * m.t_mean + 1.0)


def corr_along(v: np.ndarray, m: Moments, var_floor: float) -> np.ndarray:
    """Pearson r between projections ``X @ v`` and positions, for each column of ``v``.

    ``v`` is (d,) or (d, k). NaN where the projection's variance is below ``var_floor``
    or positions are constant (corr is undefined there; SPEC: NULL, not an error).
    """
    v = np.asarray(v, dtype=np.float64)
    cov_vt = m.cov_xt @ v
    var_v = np.asarray(proj_var(v, m), dtype=np.float64)
    if t_is_constant(m):
        return np.full(np.shape(cov_vt), np.nan)
    ok = var_v > var_floor
    denom = np.sqrt(np.where(ok, var_v, 1.0) * m.t_var)
    return np.where(ok, cov_vt / denom, np.nan)


def proj_var(v: np.ndarray, m: Moments) -> np.ndarray:
    """Variance of ``X @ v`` for each column of ``v`` (or a scalar for a vector)."""
    if v.ndim == 1:
        return float(v @ m.cov @ v)
    # diag(vᵀ C v) through one BLAS product (a three-operand einsum loops in C without BLAS).
    return np.einsum("ik,ik->k", v, m.cov @ v)


def top_eigenpairs(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues of the symmetric ``S`` (descending) and their unit eigenvectors.

    Only the wanted pairs are computed (LAPACK's MRRR driver ``syevr`` on an index range): for
    the 10 leading components of a 128 × 128 covariance that is a third less work than the full
    decomposition; for one vector, two thirds less.
    """
    import scipy.linalg  # here, not at the top: the ingest's parent process never needs it

    d = S.shape[0]
    k = max(1, min(k, d))
    w, U = scipy.linalg.eigh(S, subset_by_index=[d - k, d - 1], driver="evr")
    return w[::-1], U[:, ::-1]

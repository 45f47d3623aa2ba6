"""Circular statistics shared by the complement pairs and the RoPE planes (SPEC §4.3).

Angles live in the complex plane: a vector's coordinates ``(x, y)`` in a plane give the phasor
``u = (x + iy)/|x + iy|``. Phase coherence at angular frequency ω (radians per token) is
``ρ(ω) = |mean u · exp(−iωt)|``: 1 when the angle turns exactly as ``ωt`` plus a constant, ~1/√n for
random angles. Q and K are scored separately (their rings have different phase offsets) and
combined as ``ρ² = (n_q ρ_Q² + n_k ρ_K²) / N``.

Two ways to find the ω maximising ρ²: :func:`best_on_grid` evaluates the exact sums at listed
frequencies (e.g. a model's RoPE frequencies); :func:`fit_frequency` searches the whole band, as a
periodogram — phasors summed into integer position bins and Fourier-transformed give ρ on a grid
of spacing π/range for the cost of a few FFTs — whose best bin per column is interpolated and
polished with a Newton step on the exact sums. Only the rows given are used: callers pass a
seeded subsample.

Whether a plane's phase depends on position at all is a significance test:
:func:`phase_statistic` (one kind, one frequency per column), :func:`combine_kinds` (Q and K),
:func:`search_p_value` (the price of a frequency chosen by a search) and :func:`holm` (the planes
of one head).
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: Largest FFT length of the coarse frequency scan. Position ranges up to ``MAX_FFT / 2`` tokens are
#: scanned exhaustively over (0, π]; longer ranges are binned (see :func:`fit_frequency`).
MAX_FFT = 8192

#: Family-wise level of the plane tests of one head: ``complement.active`` and
#: ``rope_planes.rotating`` ask Holm-adjusted p < this (the ``params`` view's ``plane_alpha``).
#: 1 %: with ~30 pairs or d/2 planes per head and hundreds of heads per model, a head-level error
#: rate of 1 % keeps the expected number of heads with any false flag to a few per model.
PLANE_ALPHA = 0.01


def phasors(omega: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """``exp(−i ω_c τ_n)`` as an (n, m) complex array for ``omega`` (m,) and positions ``tau`` (n,).

    Integer, non-negative positions (token indices) use two small tables, ``exp(−iω r)`` for
    ``r < base`` and ``exp(−iω base·q)``, and one complex product per entry: several times cheaper
    than evaluating n × m sines and cosines. Other positions are evaluated directly.
    """
    omega = np.asarray(omega, dtype=np.float64).reshape(-1)
    tau = np.asarray(tau, dtype=np.float64).reshape(-1)
    if tau.size == 0 or omega.size == 0:
        return np.ones((tau.size, omega.size), dtype=np.complex128)
    ti = tau.astype(np.int64)
    if ti.min() >= 0 and np.array_equal(ti, tau):
        span = int(ti.max()) + 1
        base = max(1, math.isqrt(span - 1) + 1)
        low, high = _phase_tables(omega.tobytes(), base, span // base + 1)
        q, r = np.divmod(ti, base)
        return _take_rows(low, r) * _take_rows(high, q)
    return np.exp(-1j * np.outer(tau, omega))


@functools.lru_cache(maxsize=8)
def _phase_tables(omega: bytes, base: int, n_high: int) -> tuple[np.ndarray, np.ndarray]:
    """``exp(−iω r)`` for ``r < base`` and ``exp(−iω base·q)`` for ``q < n_high`` (read-only).

    Cached: the same frequencies (a model's RoPE frequencies, a grid) and position range come back
    for both kinds of every head, and each table costs as much as the gathers that use it.
    """
    w = np.frombuffer(omega, dtype=np.float64)
    low = np.exp(-1j * np.outer(np.arange(base, dtype=np.float64), w))
    high = np.exp(-1j * np.outer(base * np.arange(n_high, dtype=np.float64), w))
    low.flags.writeable = high.flags.writeable = False
    return low, high


def _take_rows(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``table[idx]`` for a C-contiguous 2-D table, each row gathered as one opaque item.

    numpy copies rows of complex numbers element by element; as single items it copies them
    whole, ~40× faster (1,024 rows of 80 phasors: 0.03 ms instead of 0.7 ms).
    """
    rows = table.view(np.dtype((np.void, table.shape[1] * table.itemsize))).reshape(-1)
    return rows[idx].view(table.dtype).reshape(len(idx), table.shape[1])


def weighted_r2(S_q: np.ndarray, n_q: int, S_k: np.ndarray, n_k: int) -> np.ndarray:
    """``(n_q ρ_Q² + n_k ρ_K²)/N`` from phasor sums ``S = Σ u exp(−iωt)`` (ρ = |S|/n)."""
    n = n_q + n_k
    out = np.zeros(np.broadcast_shapes(np.shape(S_q), np.shape(S_k)))
    for S, k in ((S_q, n_q), (S_k, n_k)):
        if k:
            S = np.asarray(S)
            out += (S.real * S.real + S.imag * S.imag) * (1.0 / (k * n))
    return out


def circular_linear_r(c: np.ndarray, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Mardia's circular–linear correlation of angles θ with a linear variable t, per column.

    ``R² = (r_tc² + r_ts² − 2 r_tc r_ts r_cs) / (1 − r_cs²)`` with ``r_tc = corr(t, cos θ)``,
    ``r_ts = corr(t, sin θ)``, ``r_cs = corr(cos θ, sin θ)``: the multiple correlation of t regressed
    on (cos θ, sin θ), so it is invariant to rotating or reflecting the angles. Returns R in [0, 1];
    NaN where t, cos θ or sin θ is constant or cos θ and sin θ are collinear.

    Parameters
    ----------
    c, s : ndarray of shape (n, m)
        cos θ and sin θ for m angle columns.
    t : ndarray of shape (n,)
    """
    c = np.asarray(c, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    n = c.shape[0]
    m = c.shape[1] if c.ndim == 2 else 0
    if n < 2:
        return np.full(m, np.nan)
    tc = np.asarray(t, dtype=np.float64) - np.mean(t)
    # Moments from sums (values are bounded by 1, so no digits are lost): BLAS products, no copies.
    mc, ms = c.mean(axis=0), s.mean(axis=0)
    vt = float(tc @ tc) / n
    vc = np.einsum("ij,ij->j", c, c) / n - mc * mc
    vs = np.einsum("ij,ij->j", s, s) / n - ms * ms
    cts = (tc @ c) / n, (tc @ s) / n
    ccs = np.einsum("ij,ij->j", c, s) / n - mc * ms
    with np.errstate(invalid="ignore", divide="ignore"):
        r_tc = cts[0] / np.sqrt(vt * vc)
        r_ts = cts[1] / np.sqrt(vt * vs)
        r_cs = ccs / np.sqrt(vc * vs)
        r2 = (r_tc**2 + r_ts**2 - 2.0 * r_tc * r_ts * r_cs) / (1.0 - r_cs**2)
    # A degenerate angle column (constant cos or sin, or |r_cs| = 1) has no defined correlation.
    bad = ~(vc > 1e-12) | ~(vs > 1e-12) | ~(1.0 - r_cs**2 > 1e-12) | (vt <= 0)
    return np.where(bad, np.nan, np.sqrt(np.clip(r2, 0.0, 1.0)))


def _binned_sums(z: np.ndarray, bins: np.ndarray, length: int) -> np.ndarray:
    """Σ of z's rows per bin, as (m, length) complex (rows sorted by bin, then ``add.reduceat``)."""
    m = z.shape[1]
    out = np.zeros((m, length), dtype=np.complex128)
    if len(bins) == 0:
        return out
    order = np.argsort(bins, kind="stable")
    b = bins[order]
    starts = np.flatnonzero(np.concatenate([[True], b[1:] != b[:-1]]))
    out[:, b[starts]] = np.add.reduceat(z[order], starts, axis=0).T
    return out


def _derivatives(z: np.ndarray, tau: np.ndarray, omega: np.ndarray):
    """Phasor sums S(ω) = Σ z·exp(−iωτ) and their first two ω-derivatives, one ω per column.

    The derivatives are taken about the mean position (better conditioned); that multiplies all
    three by one common phase, which cancels in |S|² and its derivatives.
    """
    A = z * phasors(omega, tau)
    tc = tau - tau.mean()
    return A.sum(axis=0), -1j * (tc @ A), -((tc * tc) @ A)


def _objective(zq, tq, zk, tk, omega):
    """ρ²(ω), dρ²/dω and d²ρ²/dω² per column (Q/K weighted)."""
    n_q, n_k = len(tq), len(tk)
    n = n_q + n_k
    f = np.zeros(omega.size)
    g = np.zeros(omega.size)
    h = np.zeros(omega.size)
    for z, tau, nk in ((zq, tq, n_q), (zk, tk, n_k)):
        if nk == 0:
            continue
        S0, S1, S2 = _derivatives(z, tau, omega)
        f += np.abs(S0) ** 2 / nk
        g += 2.0 * np.real(np.conj(S0) * S1) / nk
        h += 2.0 * (np.abs(S1) ** 2 + np.real(np.conj(S0) * S2)) / nk
    return f / n, g / n, h / n


def fit_frequency(
    zq: np.ndarray,
    tq: np.ndarray,
    zk: np.ndarray,
    tk: np.ndarray,
    *,
    signed: bool,
    omega_min: float = 0.0,
    omega_max: float = math.pi,
    extra: np.ndarray | None = None,
    max_fft: int = MAX_FFT,
    newton_steps: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """The frequency maximising the Q/K-weighted phase coherence, per column.

    Parameters
    ----------
    zq, zk : ndarray of shape (n_q, m), (n_k, m), complex
        Unit phasors of the query and key rows (0 where the angle is undefined), one column per plane.
    tq, tk : ndarray of shape (n_q,), (n_k,)
        Token positions. The search runs in units of their lattice spacing
        (:func:`position_quantum`, 1 for token indices) up to that lattice's Nyquist frequency.
    signed : bool
        Search both rotation senses (ω and −ω; for planes whose orientation is arbitrary, e.g. SVD
        pairs) or only ω ≥ 0 (RoPE planes, whose sense is known). The returned ω is signed.
    omega_min, omega_max : float
        Band of |ω| searched, in rad/token.
    extra : ndarray, optional
        Frequencies (≥ 0) evaluated exactly in addition to the scan, e.g. a model's RoPE frequencies.
        Those beyond the scanned band are what this adds: inside it the scan already resolves them.
    max_fft : int
        Largest FFT length. Positions spanning more than ``max_fft/2`` tokens are binned by
        ``s = ceil(2·range/max_fft)`` for the scan, which then covers |ω| ≤ π/s; the polish uses
        exact positions.
    newton_steps : int
        Newton iterations on the exact sums after interpolating the best scan bin.

    Returns
    -------
    omega, r2 : ndarray of shape (m,)
        Best frequency and ρ² there. NaN when positions do not vary.
    """
    zq = np.asarray(zq, dtype=np.complex128)
    zk = np.asarray(zk, dtype=np.complex128)
    m = zq.shape[1] if zq.ndim == 2 else zk.shape[1]
    tq = np.asarray(tq, dtype=np.float64).reshape(-1)
    tk = np.asarray(tk, dtype=np.float64).reshape(-1)
    n_q, n_k = len(tq), len(tk)
    nan = np.full(m, np.nan)
    if m == 0 or n_q + n_k == 0:
        return nan, nan.copy()
    t_all = np.concatenate([tq, tk])
    t0 = float(t_all.min())
    if float(t_all.max()) - t0 <= 0:
        return nan, nan.copy()
    # Work in units of the positions' lattice spacing g (1 for token indices): the search is then
    # the same computation whatever affine map positions went through, and the band ends at the
    # lattice's Nyquist frequency π/g — beyond it frequencies alias and cannot be told apart.
    g = position_quantum(t_all)
    ex = None if extra is None else np.asarray(extra, dtype=np.float64).reshape(-1) * g
    omega, r2 = _fit_lattice(
        zq, (tq - t0) / g, zk, (tk - t0) / g, signed=signed, omega_min=omega_min * g,
        omega_max=min(omega_max * g, math.pi), extra=ex, max_fft=max_fft, newton_steps=newton_steps,
    )
    return omega / g, r2


def position_quantum(t: np.ndarray) -> float:
    """The spacing of the lattice the positions lie on: 1 for token indices.

    Integer positions give the gcd of their gaps (almost always 1); other positions whose gaps are
    all multiples of the smallest gap give that gap (e.g. 2.5 for ``2.5·t + c``); anything else is
    treated as token units (1).
    """
    u = np.unique(np.asarray(t, dtype=np.float64))
    if u.size < 2:
        return 1.0
    gaps = np.diff(u)
    whole = np.round(gaps)
    if np.array_equal(gaps, whole) and whole.max() < 2**53:
        return float(np.gcd.reduce(whole.astype(np.int64)))
    k = gaps / gaps.min()
    if np.all(np.abs(k - np.round(k)) <= 1e-9 * k):
        return float(gaps.min())
    return 1.0


def _fit_lattice(zq, tq, zk, tk, *, signed, omega_min, omega_max, extra, max_fft, newton_steps):
    """:func:`fit_frequency` for positions ``tq``, ``tk`` ≥ 0 in lattice units (integers up to rounding)."""
    m = zq.shape[1]
    n_q, n_k = len(tq), len(tk)
    span = float(max(tq.max(initial=0.0), tk.max(initial=0.0)))

    # Coarse scan: phasor sums per position bin, Fourier-transformed. Bin width s = 1 (exact for
    # integer positions) unless the range is longer than max_fft/2; padding ×2 keeps the grid
    # spacing at half the width of a coherent peak.
    s = max(1, math.ceil(2.0 * (span + 1.0) / max_fft))
    n_bins = int(math.floor(span / s)) + 1
    length = 1 << max(3, (2 * n_bins - 1).bit_length())
    bq = np.floor(np.round(tq) / s).astype(np.int64)
    bk = np.floor(np.round(tk) / s).astype(np.int64)
    Fq = np.fft.fft(_binned_sums(zq, bq, length), axis=1) if n_q else np.zeros((m, length))
    Fk = np.fft.fft(_binned_sums(zk, bk, length), axis=1) if n_k else np.zeros((m, length))
    P = weighted_r2(Fq, n_q, Fk, n_k)  # (m, length)
    step = 2.0 * math.pi / (length * s)  # grid spacing in rad/token
    freq = 2.0 * math.pi * np.fft.fftfreq(length) / s
    allowed = (np.abs(freq) >= omega_min - 0.5 * step) & (np.abs(freq) <= omega_max + 0.5 * step)
    if not signed:
        allowed &= freq >= 0
    if not allowed.any():
        allowed = np.abs(freq) == np.abs(freq[np.argmin(np.abs(np.abs(freq) - omega_min))])
    k = np.argmax(P if allowed.all() else np.where(allowed[None, :], P, -np.inf), axis=1)
    cols = np.arange(m)
    p0 = P[cols, k]
    pm = P[cols, (k - 1) % length]
    pp = P[cols, (k + 1) % length]
    # Parabolic interpolation of the peak between its neighbouring bins.
    denom = pm - 2.0 * p0 + pp
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = np.where(denom < 0, 0.5 * (pm - pp) / denom, 0.0)
    delta = np.clip(np.nan_to_num(delta), -0.5, 0.5)
    lo = -omega_max if signed else max(omega_min, 0.0)
    omega = np.clip(freq[k] + delta * step, lo, omega_max)

    # Polish on the exact sums: Newton steps, each bounded to half a grid step, keeping the best.
    best_w = omega.copy()
    best_f = np.full(m, -np.inf)
    for it in range(newton_steps + 1):
        f, g, h = _objective(zq, tq, zk, tk, omega)
        better = f > best_f
        best_w = np.where(better, omega, best_w)
        best_f = np.where(better, f, best_f)
        if it == newton_steps:
            break
        with np.errstate(invalid="ignore", divide="ignore"):
            newton = np.where(h < 0, -g / h, np.sign(g) * 0.25 * step)
        newton = np.clip(np.nan_to_num(newton), -0.5 * step, 0.5 * step)
        omega = best_w + newton
        if signed:
            # Keep |ω| in the band without flipping the sense of rotation.
            sign = np.where(best_w < 0, -1.0, 1.0)
            omega = sign * np.clip(np.abs(omega), omega_min, omega_max)
        else:
            omega = np.clip(omega, max(omega_min, 0.0), omega_max)

    if extra is not None and len(extra):
        ex = extra[(extra >= omega_min) & (extra <= omega_max) & (extra > math.pi / s)]
        if ex.size:
            we, fe = best_on_grid(zq, tq, zk, tk, ex, signed=signed)
            take = fe > best_f
            best_w = np.where(take, we, best_w)
            best_f = np.where(take, fe, best_f)
    return best_w, best_f


def _grid_sums(z: np.ndarray, t: np.ndarray, grid: np.ndarray, signed: bool):
    """``Σ z·e``, ``Σ e`` and ``Σ e²`` of one kind at the grid's frequencies (``[grid, −grid]`` when signed).

    ``e = exp(−iωt)``; the sums at −ω are the conjugates of those of the conjugate phasors at ω, so
    one table of phasors serves both senses. Returns (m, width), (width,), (width,).
    """
    m, G = z.shape[1], grid.size
    E = phasors(grid, t)
    R = np.concatenate([E.real, E.imag], axis=1)  # (n, 2G): C = cos ωt, D = −sin ωt
    # In real arithmetic: with z = c + is, the sums Σ z·E (at ω) and Σ z·conj(E) (at −ω) both
    # follow from cᵀC, cᵀD, sᵀC, sᵀD — one real product, half the multiplications of the complex
    # ones; a row of ones in it gives ΣE.
    left = np.empty((len(t), 2 * m + 1))
    left[:, :m], left[:, m : 2 * m], left[:, 2 * m] = z.real, z.imag, 1.0
    P = left.T @ R
    cC, cD, sC, sD = P[:m, :G], P[:m, G:], P[m : 2 * m, :G], P[m : 2 * m, G:]
    plus = (cC - sD) + 1j * (sC + cD)
    se = P[2 * m, :G] + 1j * P[2 * m, G:]
    sq = np.einsum("ij,ij->j", R, R)
    see = (sq[:G] - sq[G:]) + 2j * np.einsum("ij,ij->j", R[:, :G], R[:, G:])
    if not signed:
        return plus, se, see
    minus = (cC + sD) + 1j * (sC - cD)
    return np.concatenate([plus, minus], axis=1), np.concatenate([se, se.conj()]), np.concatenate([see, see.conj()])


def coherence_on_grid(zq, tq, zk, tk, grid: np.ndarray, *, signed: bool = False) -> np.ndarray:
    """Q/K-weighted ρ² of each phasor column at each frequency of ``grid`` (exact sums).

    Returns (m, G), or (m, 2G) with the frequencies ``[grid, −grid]`` when ``signed``.
    """
    return _grid_search(zq, tq, zk, tk, grid, signed, statistic=False)[0]


def _grid_search(zq, tq, zk, tk, grid, signed, statistic):
    grid = np.asarray(grid, dtype=np.float64).reshape(-1)
    tq = np.asarray(tq, dtype=np.float64).reshape(-1)
    tk = np.asarray(tk, dtype=np.float64).reshape(-1)
    m = zq.shape[1] if zq.ndim == 2 else zk.shape[1]
    width = 2 * grid.size if signed else grid.size
    # One reference position for both kinds keeps the table-based phasors on small integers.
    t0 = min(tq.min(initial=np.inf), tk.min(initial=np.inf))
    kinds = []
    for z, t in ((zq, tq), (zk, tk)):
        if len(t) == 0:
            kinds.append((np.zeros((m, width), complex), None, None))
        else:
            kinds.append(_grid_sums(z, t - t0, grid, signed))
    R = weighted_r2(kinds[0][0], len(tq), kinds[1][0], len(tk))
    if not statistic:
        return R, None
    full = np.concatenate([grid, -grid]) if signed else grid
    j = np.argmax(R, axis=1)
    cols = np.arange(m)
    stats = []
    for (sue, se, see), z, t in zip(kinds, (zq, zk), (tq, tk)):
        if se is None:
            stats.append(np.full(m, np.nan))
            continue
        stats.append(_statistic(len(t), *_phasor_moments(z), sue[cols, j], se[j], see[j], z, t))
    return R, (full[j], R[cols, j], stats[0], stats[1])


def best_on_grid(zq, tq, zk, tk, grid: np.ndarray, *, signed: bool, statistic: bool = False):
    """The best frequency of ``grid`` (and of ``−grid`` when ``signed``) per column, and its ρ².

    With ``statistic``, also the test statistics of :func:`phase_statistic` of Q and of K at that
    frequency, from the same sums (the grid's phasor table serves both).
    """
    grid = np.asarray(grid, dtype=np.float64).reshape(-1)
    if grid.size == 0:
        nan = np.full(zq.shape[1], np.nan)
        return (nan, nan.copy(), nan.copy(), nan.copy()) if statistic else (nan, nan.copy())
    _, best = _grid_search(zq, tq, zk, tk, grid, signed, statistic=True)
    return best if statistic else best[:2]


def head_arrays(Q, t_q, K, t_k) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One head's query and key vectors and positions as float64, checked for matching shapes."""
    Q = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    t_q = np.asarray(t_q, dtype=np.float64).reshape(-1)
    t_k = np.asarray(t_k, dtype=np.float64).reshape(-1)
    if Q.ndim != 2 or K.ndim != 2 or K.shape[1] != Q.shape[1] or len(t_q) != len(Q) or len(t_k) != len(K):
        raise ValueError(f"shapes disagree: Q{Q.shape}, t_q({len(t_q)}), K{K.shape}, t_k({len(t_k)})")
    return Q, t_q, K, t_k


# ------------------------------------------------------------------ the test of a phase–position relation


def phase_statistic(u: np.ndarray, e: np.ndarray, tau: np.ndarray, ue: np.ndarray | None = None) -> np.ndarray:
    """Permutation-standardised covariance of phase and rotation, one value per column (~χ²₂ under H0).

    For one kind's unit phasors ``u`` and rotations ``e = exp(−iωt)`` (ω per column) the statistic
    is built on ``S = Σ A_n B_n`` with ``A = u − mean(u)``, ``B = e − mean(e)``. Both sides are
    centred because neither has mean zero in real data: an SVD pair of content is an elongated
    blob, queries and keys sit at offsets, and positions drawn unevenly (log-uniform) make
    ``mean(e)`` large at slow ω. Under H0 (phases independent of positions: the vectors are
    exchangeable with respect to their positions) the permutation distribution of S has mean 0,
    ``E|S|² = Σ|A|²·Σ|B|²/(n − 1)`` and ``E[S²] = ΣA²·ΣB²/(n − 1)``. The pseudo-variance E[S²]
    matters: an elongated cloud at a slow ω (B nearly on a line) makes (Re S, Im S) far from
    circular, and the circular approximation ``2|S|²/E|S|² ~ χ²₂`` then over-rejects (twice the
    nominal rate at 1 % in tests/test_plane_tests.py). The statistic is the
    Mahalanobis form ``T = [Re S, Im S] Σ⁻¹ [Re S, Im S]ᵀ``, ~χ²₂ by the permutation central limit
    theorem. Rotating A and B each by the phase that makes ``ΣA²`` and ``ΣB²`` real and positive
    leaves T unchanged and diagonalises Σ, so::

        T = 2(n − 1) [x² / (ab + αβ) + y² / (ab − αβ)],  x + iy = S·exp(−i(arg ΣA² + arg ΣB²)/2)

    with ``a = Σ|A|²``, ``α = |ΣA²|``, ``b = Σ|B|²``, ``β = |ΣB²|``.

    As ω → 0, B → −iω(t − mean t): T tends to ``(n − 1)·R²`` for Mardia's circular–linear R of
    the kind, the test of a slow drift. Columns whose rotations barely vary (ω·sd(t) < 1e-5 rad,
    ω = 0 included) take that limit, computed with ``B = −i(t − mean t)`` (T does not depend on
    the scale of B), instead of a ratio of round-off.

    Parameters
    ----------
    u : ndarray of shape (n, m), complex
        Unit phasors (0 where the angle is undefined).
    e : ndarray of shape (n, m), complex
        ``exp(−iω_c t_n)`` for each column's frequency ω_c.
    tau : ndarray of shape (n,)
        The positions t (for the ω → 0 limit).
    ue : ndarray of shape (m,), complex, optional
        ``Σ_n u e`` when the caller already has it.

    Returns
    -------
    ndarray of shape (m,)
        T; NaN for fewer than 3 rows or a singular Σ (no spread of phases, positions all equal,
        or both the phases and the rotations on lines).
    """
    n, m = u.shape
    if n < 3:
        return np.full(m, np.nan)
    sue = np.einsum("ij,ij->j", u, e) if ue is None else ue
    su, s_abs, suu = _phasor_moments(u)
    se, _, see = _phasor_moments(e)
    return _statistic(n, su, s_abs, suu, sue, se, see, u, tau)


def _phasor_moments(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Σu``, ``Σ|u|²`` and ``Σu²`` per column, in real arithmetic on the parts of u."""
    if u.strides[-1] != u.itemsize:
        u = np.ascontiguousarray(u)
    w = u.view(np.float64)  # (n, 2m): real and imaginary parts interleaved (rows may be strided)
    sq = np.einsum("ij,ij->j", w, w)
    cross = np.einsum("ij,ij->j", w[:, 0::2], w[:, 1::2])
    return np.ones(u.shape[0]) @ u, sq[0::2] + sq[1::2], (sq[0::2] - sq[1::2]) + 2j * cross


def _statistic(n, su, s_abs, suu, sue, se, see, u, tau) -> np.ndarray:
    """T of :func:`phase_statistic` from the raw sums ``Σu, Σ|u|², Σu², Σue, Σe, Σe²`` (|e| = 1)."""
    if n < 3:
        return np.full(np.shape(sue), np.nan)
    a = s_abs - (su.real**2 + su.imag**2) / n
    A2 = suu - su * su / n
    b = n - (se.real**2 + se.imag**2) / n
    B2 = see - se * se / n
    S = sue - su * se / n
    still = ~(b > 1e-10 * n)
    if still.any():
        tc = np.asarray(tau, dtype=np.float64) - np.mean(tau)
        tt = float(tc @ tc)
        S = np.where(still, -1j * (tc @ u), S)
        b = np.where(still, tt, b)
        B2 = np.where(still, -tt, B2)
    return _mahalanobis(S, a, A2, b, B2, n)


def _mahalanobis(S, a, A2, b, B2, n) -> np.ndarray:
    """T of :func:`phase_statistic` from the centred sums (arrays broadcast together)."""
    alpha, beta = np.abs(A2), np.abs(B2)
    ab = a * b
    ab_hi = ab + alpha * beta
    ab_lo = ab - alpha * beta
    # Singular Σ: one side has no spread (a or b ~ 0) or both lie on lines. The floor is far above
    # the round-off of the sums (~1e-16 relative) and far below any real spread.
    ok = (a > 1e-12 * n) & (b > 0) & (ab_lo > 1e-10 * ab)
    turn = np.exp(-0.5j * (np.angle(A2) + np.angle(B2)))
    R = S * turn
    with np.errstate(invalid="ignore", divide="ignore"):
        T = 2.0 * (n - 1) * (R.real**2 / ab_hi + R.imag**2 / ab_lo)
    return np.where(ok, T, np.nan)


def combine_kinds(t_q: np.ndarray, t_k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The statistic ``T_q + T_k`` of a plane and its degrees of freedom (4; 2 when one kind is degenerate).

    Q and K are separate samples permuted separately, so under H0 their statistics are independent
    χ²₂ variables. A kind whose T is NaN is left out; the statistic is NaN (df 0) when both are.
    """
    fq, fk = np.isfinite(t_q), np.isfinite(t_k)
    stat = np.where(fq, t_q, 0.0) + np.where(fk, t_k, 0.0)
    df = 2 * fq.astype(np.int64) + 2 * fk.astype(np.int64)
    return np.where(df > 0, stat, np.nan), df


def chi2_sf_even(x: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Survival function of χ² with 2 or 4 degrees of freedom (closed forms); NaN for other df or NaN x."""
    x = np.asarray(x, dtype=np.float64)
    half = 0.5 * x
    with np.errstate(over="ignore", invalid="ignore"):
        tail = np.exp(-half)
        out = np.where(df == 4, tail * (1.0 + half), tail)
    return np.where((df == 2) | (df == 4), out, np.nan)


def search_p_value(
    stat: np.ndarray,
    df: np.ndarray,
    *,
    n_frequencies: int | None = None,
    bandwidth: float | None = None,
) -> np.ndarray:
    """p-value of a χ² statistic taken at a frequency the data chose, paying for the search.

    Any ω the search may return lies in its set of candidates, so ``P(T(ω̂) > u) ≤ P(sup T > u)``
    over that set, and two bounds on the supremum apply:

    * ``n_frequencies`` (a finite grid of G frequencies): Bonferroni, ``G·P(χ² > u)``;
    * ``bandwidth`` V (a continuous band; V = band width in rad/token × sd(t) in tokens): Davies'
      (1987) bound for the supremum of a χ²_s process, ``P(χ²_s > u) + V u^{(s−1)/2} e^{−u/2}
      2^{−s/2}/Γ(s/2)``. The correlation of the statistic at ω and ω + h is the characteristic
      function of the positions at h, whose curvature at 0 is var(t): hence V. Counting
      "independent frequencies" (~ the position span) instead under-counts a continuous search
      by a factor ~√u: over 2,048 tokens it rejected 3.5 % of null pairs at a nominal 1 %.

    Given both, the smaller bound; the result is capped at 1. NaN statistics give NaN.
    """
    stat = np.asarray(stat, dtype=np.float64)
    p = chi2_sf_even(stat, df)
    bounds = []
    if n_frequencies is not None:
        bounds.append(n_frequencies * p)
    if bandwidth is not None:
        u = np.where(np.isfinite(stat), np.maximum(stat, 0.0), np.nan)
        with np.errstate(over="ignore", invalid="ignore"):
            tail = np.exp(-0.5 * u)
            # 2^{−s/2}/Γ(s/2) is 1/2 for s = 2 and 1/4 for s = 4.
            crossing = np.where(df == 4, 0.25 * u**1.5, 0.5 * np.sqrt(u)) * tail
        bounds.append(p + bandwidth * crossing)
    if bounds:
        p = np.minimum.reduce(bounds) if len(bounds) > 1 else bounds[0]
    return np.minimum(p, 1.0)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of one family; NaN p-values are not tests and stay NaN.

    ``p_adj_(i) = max_{k ≤ i} min(1, (m − k + 1) p_(k))`` over the m finite p-values in ascending
    order: rejecting ``p_adj < α`` controls the family-wise error rate at α under any dependence.
    """
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(stepped)
    return out

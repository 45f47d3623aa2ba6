"""RoPE planes of the raw coordinates (SPEC §4.3) — table ``rope_planes``.

RoPE rotates the coordinate pair of plane ``j`` by ``ω_j·t``: with ``z = x_j + i·x_{j+d/2}``
(rotate-half pairing, transformers' Llama/Qwen/Mistral layout) or ``z = x_{2j} + i·x_{2j+1}``
(interleaved, the original Meta/GPT-J layout), a post-RoPE vector is ``z = z_pre · exp(iω_j t)``.
A pre-RoPE component with a steady direction therefore becomes a ring whose phase, after undoing
RoPE, is locked: ``coherence = |mean z/|z| · exp(−iω_j t)|`` is near 1 while the raw coherence
(without undoing) is near 0 once the plane turns a few times over the positions.

Planes cover the ``r`` dims RoPE turns, from ``rotary_offset`` (partial rotary turns the first
``r < d``; MLA the last): the other dims are not planes. Frequencies are the model's own when a
capture recorded them (``omega``), else ``ω_j = rope_theta^(−2j/r)`` rescaled as the model's
``rope_scaling`` says (:func:`rope_frequencies`), else fitted per plane. Which applies to a model is
decided once per layer by :mod:`qkdb.ingest.engine.plane_layout`.

``rotating`` is a definition and a significance test: the plane makes at least one turn over the
positions (a slower drift is not rotation), and its phase depends on position (H0: independent;
:func:`~qkdb.ingest.metrics.circular.phase_statistic` at ω_j on drift-free phasors, Holm-adjusted over the
head's planes that turn at least once, below :data:`~qkdb.ingest.metrics.circular.PLANE_ALPHA`).
"""

from __future__ import annotations

import json
import math

import numpy as np

from qkdb.errors import InputError
from qkdb.ingest.metrics.circular import (
    PLANE_ALPHA,
    combine_kinds,
    fit_frequency,
    head_arrays,
    holm,
    phase_statistic,
    phasors,
    position_quantum,
    search_p_value,
)
from qkdb.ingest.metrics.complement import MAX_FIT, fit_subsample

PAIRINGS = ("half", "interleaved")
ROTATING_MIN_TURNS = 1.0  # a definition: less than a turn over the data is a drift, not a rotation
SCALING_TYPES = ("default", "linear", "llama3", "yarn")

COLUMNS = (
    "j", "omega", "omega_source", "turns", "coherence_q", "coherence_k", "raw_coherence_q",
    "raw_coherence_k", "radius_q", "radius_k", "var_frac", "statistic", "p_value", "p_adjusted", "rotating",
)


def plane_coordinates(d: int, pairing: str = "half") -> tuple[np.ndarray, np.ndarray]:
    """Indices of the real and imaginary coordinates of RoPE planes ``j = 0 … d/2 − 1``."""
    if pairing not in PAIRINGS:
        raise InputError(f"rope pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    if d % 2:
        raise InputError(f"head_dim {d} is odd: RoPE planes need an even dimension")
    j = np.arange(d // 2)
    if pairing == "half":
        return j, j + d // 2
    return 2 * j, 2 * j + 1


def parse_rope_scaling(rope_scaling) -> dict | None:
    """``rope_scaling`` as a dict (it may come as JSON text from the registry or the CLI); None when plain."""
    if rope_scaling is None or rope_scaling == "":
        return None
    if isinstance(rope_scaling, str):
        try:
            rope_scaling = json.loads(rope_scaling)
        except json.JSONDecodeError as exc:
            raise InputError(f"rope_scaling is not valid JSON ({exc}): {rope_scaling!r}") from None
    if rope_scaling is None:
        return None
    if not isinstance(rope_scaling, dict):
        raise InputError(f"rope_scaling must be a JSON object, got {rope_scaling!r}")
    return dict(rope_scaling)


def rope_frequencies(d: int, rope_theta: float, rope_scaling=None) -> np.ndarray:
    """RoPE's angular frequencies (rad/token) of planes ``j < d/2``, as transformers computes them.

    ``ω_j = rope_theta^(−2j/d)``, then rescaled by ``rope_scaling`` (a transformers-style dict or
    its JSON; key ``rope_type`` or ``type``):

    * ``default`` / absent: unchanged;
    * ``linear``: ``ω_j / factor``;
    * ``llama3`` (Llama 3.1/3.2): ``factor``, ``low_freq_factor``, ``high_freq_factor``,
      ``original_max_position_embeddings`` — long wavelengths divided by ``factor``, short ones
      kept, a smooth blend between;
    * ``yarn``: ``factor``, ``original_max_position_embeddings``, ``beta_fast`` (32),
      ``beta_slow`` (1), ``truncate`` (true) — the YaRN ramp between interpolated and
      extrapolated frequencies. YaRN's attention factor scales magnitudes, not phases: ignored.

    ``dynamic`` NTK and ``longrope`` change the frequencies with each sequence's length and are
    refused (ingest without ``rope_theta`` to fit the frequencies instead).
    """
    if not (isinstance(rope_theta, (int, float)) and math.isfinite(rope_theta) and rope_theta > 1.0):
        raise InputError(f"rope_theta must be a number > 1, got {rope_theta!r}")
    if d < 2 or d % 2:
        raise InputError(f"head_dim {d} is odd or < 2: RoPE planes need an even dimension")
    base = float(rope_theta)
    omega = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    cfg = parse_rope_scaling(rope_scaling)
    if not cfg:
        return omega
    kind = cfg.get("rope_type", cfg.get("type", "default"))
    if kind not in SCALING_TYPES:
        raise InputError(
            f"rope_scaling type {kind!r} is not supported (supported: {', '.join(SCALING_TYPES)}); "
            "its frequencies depend on the sequence length — ingest without rope_theta to fit them"
        )
    if kind == "default":
        return omega

    def number(key, default=None):
        v = cfg.get(key, default)
        if v is None:
            raise InputError(f"rope_scaling of type {kind!r} needs {key!r}: {cfg}")
        try:
            return float(v)
        except (TypeError, ValueError):
            raise InputError(f"rope_scaling {key!r} must be a number, got {v!r}") from None

    factor = number("factor")
    if factor <= 0:
        raise InputError(f"rope_scaling factor must be > 0, got {factor}")
    if kind == "linear":
        return omega / factor
    if kind == "llama3":
        low_ff, high_ff = number("low_freq_factor"), number("high_freq_factor")
        old_len = number("original_max_position_embeddings")
        wavelen = 2.0 * math.pi / omega
        low_wl, high_wl = old_len / low_ff, old_len / high_ff
        scaled = np.where(wavelen > low_wl, omega / factor, omega)
        smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
        blended = (1.0 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        return np.where(medium, blended, scaled)
    # YaRN (Peng et al. 2023), as transformers' _compute_yarn_parameters.
    old_len = number("original_max_position_embeddings")
    beta_fast = number("beta_fast", 32.0)
    beta_slow = number("beta_slow", 1.0)
    truncate = bool(cfg.get("truncate", True))

    def correction_dim(rotations: float) -> float:
        return (d * math.log(old_len / (rotations * 2.0 * math.pi))) / (2.0 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp
    return (omega / factor) * (1.0 - extrapolation) + omega * extrapolation


def rope_planes(
    Q: np.ndarray,
    t_q: np.ndarray,
    K: np.ndarray,
    t_k: np.ndarray,
    *,
    rope_theta: float | None = None,
    pairing: str = "half",
    rope_scaling=None,
    omega: np.ndarray | None = None,
    rotary_dims: int | None = None,
    rotary_offset: int = 0,
    max_fit: int | None = MAX_FIT,
    rng: np.random.Generator,
    cov: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The ``rope_planes`` rows of one head: one per RoPE plane ``j < r/2`` of the ``r`` rotated dims.

    Parameters
    ----------
    Q, K : ndarray of shape (n_q, d), (n_k, d)
        Post-RoPE query vectors and the vectors of their key head.
    t_q, t_k : ndarray
        Token positions.
    rope_theta : float or None
        RoPE base: ``ω_j = rope_theta^(−2j/r)`` rescaled by ``rope_scaling`` (:func:`rope_frequencies`).
        Ignored when ``omega`` is given. Neither: ω_j is fitted per plane (``omega_source =
        'fitted'``) as the ω ≥ 0 maximising the Q/K-weighted coherence ``(n_q ρ_Q² + n_k ρ_K²)/N``,
        and the p-values pay for that search (Davies' bound over [0, π]).
    pairing : {"half", "interleaved"}
        How the rotated dims pair up, within their slice (:func:`plane_coordinates`).
    rope_scaling : dict or JSON str, optional
        See :func:`rope_frequencies`. Ignored when ``rope_theta`` is None.
    omega : ndarray of shape (r/2,), optional
        The planes' frequencies as the model applied them (a capture's recorded ``inv_freq``).
    rotary_dims, rotary_offset : int, optional
        RoPE turns the dims ``[rotary_offset, rotary_offset + rotary_dims)`` (partial rotary:
        GPT-NeoX, Phi, StableLM turn the first ``r``; MLA the last); default every dim. The other
        dims are not RoPE planes and get no rows.
    max_fit : int or None
        Pooled rows (seeded subsample) for the phase statistics and radii; None uses all.
    rng : numpy.random.Generator
    cov : ndarray of shape (d, d), optional
        Pooled population covariance (only its diagonal is used, for var_frac).

    Returns
    -------
    dict
        The columns of :data:`COLUMNS`, one entry per plane. For planes with ``turns ≥ 1``
        (NaN for the others, which are not tested): ``statistic`` is ``T_q + T_k`` at ω_j on the
        drift-free phasors (:func:`_drift_free_phasors`, :func:`~qkdb.ingest.metrics.circular.phase_statistic`),
        ``p_value`` its χ²₄ p-value (times Davies' bound for the search when ω_j is fitted) and
        ``p_adjusted`` Holm's over those planes; ``rotating`` is ``p_adjusted < PLANE_ALPHA``.
    """
    Q, t_q, K, t_k = head_arrays(Q, t_q, K, t_k)
    (n_q, d), n_k = Q.shape, K.shape[0]
    r = d if rotary_dims is None else int(rotary_dims)
    off = int(rotary_offset)
    if rotary_dims is None and d % 2:
        raise InputError(f"head_dim {d} is odd: RoPE planes need an even dimension")
    if r < 2 or r % 2 or off < 0 or off + r > d:
        raise InputError(f"RoPE over dims [{off}, {off + r}) does not fit a {d}-dimensional head in planes")
    re_idx, im_idx = plane_coordinates(r, pairing)
    re_idx, im_idx = re_idx + off, im_idx + off
    J = r // 2
    # The two coordinates of every plane as strided views (no copies).
    re_sl, im_sl = ((slice(off, off + J), slice(off + J, off + r)) if pairing == "half"
                    else (slice(off, off + r, 2), slice(off + 1, off + r, 2)))

    if cov is not None:
        var = np.diag(np.asarray(cov, dtype=np.float64))
    else:
        var = np.concatenate([Q, K]).var(axis=0)
    total = float(var.sum())
    var_frac = (var[re_idx] + var[im_idx]) / total if total > 0 else np.full(J, np.nan)

    t_all = np.concatenate([t_q, t_k])
    t0 = float(t_all.min()) if t_all.size else 0.0
    span = float(t_all.max()) - t0 if t_all.size else 0.0

    iq, ik = fit_subsample(n_q, n_k, max_fit, rng)

    tq, tk = t_q[iq] - t0, t_k[ik] - t0
    Xq, Xk = Q[iq], K[ik]
    uq, rq = _unit(Xq[:, re_sl], Xq[:, im_sl])
    uk, rk = _unit(Xk[:, re_sl], Xk[:, im_sl])

    omega, source = _plane_frequencies(omega, rope_theta, rope_scaling, r, (uq, tq, uk, tk))
    turns = omega * span / (2.0 * math.pi)
    # Only planes that turn at least once can be rotating: the others are not tested, so that
    # Holm's family is the planes a flag could be about (and the test costs nothing for them).
    tested = np.flatnonzero(turns >= ROTATING_MIN_TURNS)

    def derotated(u: np.ndarray, Xs: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Coherence after undoing RoPE, and the test statistic: both from one table of rotations."""
        T = np.full(J, np.nan)
        if u.shape[0] == 0:
            return np.full(J, np.nan), T
        e = phasors(omega, tau)
        coh = np.abs(np.einsum("ij,ij->j", u, e)) / u.shape[0]
        if tested.size and u.shape[0] >= 3:
            # Given frequencies fall with j, so the planes tested are usually the first ones: a view.
            prefix = tested[-1] == tested.size - 1
            e_tested = e[:, : tested.size] if prefix else np.take(e, tested, axis=1)
            cols = np.concatenate([re_idx[tested], im_idx[tested]])
            T[tested] = phase_statistic(_drift_free_phasors(Xs, tau, cols), e_tested, tau)
        return coh, T

    def raw(u: np.ndarray) -> np.ndarray:
        return np.abs(np.ones(u.shape[0]) @ u) / u.shape[0] if u.shape[0] else np.full(J, np.nan)

    def mean(r: np.ndarray) -> np.ndarray:
        return np.ones(r.shape[0]) @ r / r.shape[0] if r.shape[0] else np.full(J, np.nan)

    coh_q, T_q = derotated(uq, Xq, tq)
    coh_k, T_k = derotated(uk, Xk, tk)
    statistic, df = combine_kinds(T_q, T_k)
    p_value = _p_values(statistic, df, source == "fitted", tq, tk)
    p_adjusted = holm(p_value)
    rotating = np.nan_to_num(p_adjusted, nan=1.0) < PLANE_ALPHA
    return {
        "j": np.arange(J, dtype=np.int32),
        "omega": omega,
        "omega_source": np.full(J, source, dtype=object),
        "turns": turns,
        "coherence_q": coh_q,
        "coherence_k": coh_k,
        "raw_coherence_q": raw(uq),
        "raw_coherence_k": raw(uk),
        "radius_q": mean(rq),
        "radius_k": mean(rk),
        "var_frac": var_frac,
        "statistic": statistic,
        "p_value": p_value,
        "p_adjusted": p_adjusted,
        "rotating": rotating,
    }


def _plane_frequencies(omega, rope_theta, rope_scaling, r: int, fit_on) -> tuple[np.ndarray, str]:
    """The planes' ω and where they come from: as given (a capture's ``inv_freq``), from the RoPE
    base, or ``fitted`` on the unit phasors ``fit_on = (uq, tq, uk, tk)`` when neither is known."""
    J = r // 2
    if omega is not None:
        omega = np.asarray(omega, dtype=np.float64).reshape(-1)
        if omega.shape != (J,) or not np.all(np.isfinite(omega)) or np.any(omega < 0):
            raise InputError(f"RoPE frequencies: expected {J} finite values >= 0 (one per plane), got {omega.shape[0]}")
        return omega, "given"
    if rope_theta is None:
        omega, _ = fit_frequency(*fit_on, signed=False)
        return np.nan_to_num(omega, nan=0.0), "fitted"  # positions that do not vary: nothing to fit
    return rope_frequencies(r, rope_theta, rope_scaling), "given"


def _p_values(statistic: np.ndarray, df, fitted: bool, tq: np.ndarray, tk: np.ndarray) -> np.ndarray:
    """χ² p-values of the planes' statistics; a fitted ω_j came from a search of [0, π/g], which
    Davies' bound over that band pays for."""
    if not fitted:
        return search_p_value(statistic, df)
    sd_t = max(float(np.std(tq)) if len(tq) else 0.0, float(np.std(tk)) if len(tk) else 0.0)
    g = position_quantum(np.concatenate([tq, tk])) if len(tq) + len(tk) else 1.0
    return search_p_value(statistic, df, bandwidth=min(math.pi, math.pi / g) * sd_t)


def _unit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit phasors (x + iy)/|x + iy| (0 at the origin) and the radii |x + iy|."""
    r = x * x
    r += y * y
    np.sqrt(r, out=r)
    inv = np.divide(1.0, r, out=np.zeros_like(r), where=r > 0)
    # Written into the parts of one complex array: no complex temporaries (~30 % faster).
    u = np.empty(r.shape, dtype=np.complex128)
    np.multiply(x, inv, out=u.real)
    np.multiply(y, inv, out=u.imag)
    return u, r


def _drift_free_phasors(Xs: np.ndarray, tau: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Unit phasors of planes after removing the kind's linear drift from their coordinates.

    ``cols`` lists the planes' real coordinates, then their imaginary ones. The test of
    :func:`rope_planes` reads these, not the raw phasors: a coordinate that drifts linearly with
    position (the seeds' drift, a Q/K offset) moves the raw phase with position — smoothly, but
    enough to leak into exp(−iω_j t) for a plane making a few turns, even in a NoPE layer (in the
    simulator, half of the NoPE heads got a false flag). RoPE's rings lose little to a linear fit
    once they turn.
    """
    k = cols.size // 2
    Z = np.take(Xs, cols, axis=1)
    n = len(tau)
    tc = tau - tau.mean()
    tt = float(tc @ tc)
    basis = np.stack([np.ones(n), tc])
    fit = basis @ Z  # Σ z and Σ (t − t̄) z: the mean and the slope, once scaled
    fit[0] /= n
    fit[1] = fit[1] / tt if tt > 0 else 0.0
    Z -= basis.T @ fit
    return _unit(Z[:, :k], Z[:, k:])[0]


def strongest_plane(
    rope_cols: dict | None,
    complement_cols: dict | None,
    *,
    n_q: int | None = None,
    n_k: int | None = None,
    position_range: float | None = None,
) -> tuple[float, float]:
    """``rotation.omega`` and ``rotation.omega_r_squared`` of a head (SPEC §4.3, last paragraph).

    When RoPE is known (``rope_cols`` with ``omega_source == 'given'``) and some plane is
    rotating: the ω of the rotating plane with the highest ``(n_q coh_q² + n_k coh_k²)/N`` and that
    value (equal weights when the counts are not given). Otherwise the complement pair with the
    highest ``omega_r_squared`` among those whose ω makes at least one turn over ``position_range``
    (all pairs when the range is not given). NaN, NaN when there is nothing to report.
    """
    if rope_cols is not None and len(rope_cols.get("j", ())):
        given = np.asarray(rope_cols["omega_source"]) == "given"
        rot = np.asarray(rope_cols["rotating"], dtype=bool) & given
        if rot.any():
            wq = 0.5 if not n_q or not n_k else n_q / (n_q + n_k)
            cq = np.nan_to_num(np.asarray(rope_cols["coherence_q"], float))
            ck = np.nan_to_num(np.asarray(rope_cols["coherence_k"], float))
            r2 = np.where(rot, wq * cq**2 + (1.0 - wq) * ck**2, -np.inf)
            i = int(np.argmax(r2))
            return float(rope_cols["omega"][i]), float(r2[i])
    if complement_cols is None or not len(complement_cols.get("pair", ())):
        return math.nan, math.nan
    omega = np.asarray(complement_cols["omega"], float)
    r2 = np.asarray(complement_cols["omega_r_squared"], float)
    ok = np.isfinite(r2) & np.isfinite(omega)
    if position_range is not None and position_range > 0:
        ok &= omega * position_range / (2.0 * math.pi) >= ROTATING_MIN_TURNS
    if not ok.any():
        return math.nan, math.nan
    i = int(np.argmax(np.where(ok, r2, -np.inf)))
    return float(omega[i]), float(r2[i])

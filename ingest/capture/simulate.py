"""A generative model of post-RoPE queries and keys with planted parameters (SPEC §3.2).

``simulate`` writes a dataset in the sniffed-qk layout (SPEC §3.1) whose geometry is known
exactly, so that tests, benchmarks and users can check what the metrics recover.

The model, per head, kind ``κ ∈ {q, k}``, integer token position ``t``::

    x(t) = m0 + μ_κ + α_κ · (t − t_c) · u + Σ_j ring_{κ,j}(t) + ε

* ``u`` (drift direction) and ``w`` (offset direction) are orthonormal; ``μ_κ = mu_κ_a · u + mu_κ_w · w``
  with ``mu_q_w − mu_k_w = sep``. The drift is centred at ``t_c = (max_position − 1) / 2``, the mean
  position, so that the mean of ``Q·u`` is ``mu_q_a`` as the seeds' ``mu_q_a`` (a raw mean) measures it,
  and the planted recency bias is ``bias_strength = mu_q_a · alpha_k``.
* ``ring_{κ,j}(t) = r_j · (cos(ω_j t + φ_{κ,j} + η), sin(ω_j t + φ_{κ,j} + η))`` in the coordinate pair of
  RoPE plane ``j`` (``half``: ``(j, j + d/2)``; ``interleaved``: ``(2j, 2j + 1)``), ``ω_j = θ^(−2j/d)``,
  ``η ~ N(0, phase_jitter²)`` per vector. This is RoPE applied to a constant pre-RoPE component; Q and K
  share ω but not the phase offset. ``rope_theta=None`` means no RoPE: no rings at all.
* ``u``, ``w`` and the common mean ``m0`` live in the coordinates no ring plane uses, so the planted
  drift is exactly linear and the planted axes are recoverable.
* ``ε`` is isotropic Gaussian content noise with standard deviation ``noise`` per coordinate.

GQA: the query heads ``g·r … g·r + r − 1`` of a layer share key head ``g`` (``r = n_q / n_kv``), its
vectors, its frame ``(u, w, m0)``, its ring planes and its key-side parameters.

Every random stream is derived from ``(seed, purpose, layer, head)``, so a head's planted parameters
do not depend on the number of vectors, on which heads are sampled or on the order of generation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from qkdb.errors import QkdbError
from qkdb.ingest.capture import simulate_sinks
from qkdb.ingest.capture.simulate_sinks import Sinks
from qkdb.ingest.sources.layout import HEAD_DIR, METADATA_FILE, write_head, write_metadata

PLANTED_FILE = "planted.json"
PLANTED_FORMAT = "qkdb-planted/1"
PAIRINGS = ("half", "interleaved")
DTYPES = ("float32", "float16")
POSITION_SAMPLING = ("stratified", "iid", "dense")

# Fields of HeadParams that belong to the key head (and its frame) and so are shared by every
# query head of a GQA group. The key mean on w (``mu_k_w``, default ``-sep/2``) is shared too: the
# group takes it from its first head, and a query head places its mean at ``mu_k_w + sep``.
KEY_FIELDS = (
    "mu_k_a",
    "alpha_k",
    "phase_k",
    "ring_planes",
    "ring_radius",
    "noise",
    "phase_jitter",
    "m0_norm",
)
QUERY_FIELDS = ("mu_q_a", "alpha_q", "sep", "phase_q")


@dataclass(frozen=True)
class HeadParams:
    """Planted parameters of one query head together with those of its key head.

    Attributes
    ----------
    mu_q_a, mu_k_a
        Mean of the query / key projections on the drift direction ``u``.
    alpha_q, alpha_k
        Drift slopes per token of ``Q·u`` and ``K·u``.
    sep
        Distance of the query and key means along the offset direction ``w`` (``mu_q_w − mu_k_w``).
    mu_k_w
        Key mean on ``w``; ``None`` means ``−sep / 2`` (so the query mean is ``+sep / 2``).
    noise
        Standard deviation of the isotropic content noise, per coordinate.
    ring_planes
        RoPE planes ``j`` that carry a ring (ignored when ``rope_theta`` is ``None``).
    ring_radius
        Ring radius, one value or one per ring plane.
    phase_q, phase_k
        Phase offsets (radians) of the query and key rings, one value or one per ring plane.
    phase_jitter
        Standard deviation (radians) of the per-vector phase noise of the rings.
    m0_norm
        Norm of the common mean ``m0`` (a random direction orthogonal to ``u``, ``w`` and the rings).
    """

    mu_q_a: float = 5.0
    mu_k_a: float = 1.0
    alpha_q: float = 2.0e-3
    alpha_k: float = 3.6e-3
    sep: float = 30.0
    noise: float = 1.0
    ring_planes: tuple[int, ...] = (0, 2, 4, 6)
    ring_radius: float | tuple[float, ...] = 4.0
    phase_q: float | tuple[float, ...] = 0.0
    phase_k: float | tuple[float, ...] = 1.5
    phase_jitter: float = 0.1
    mu_k_w: float | None = None
    m0_norm: float = 0.0

    @property
    def key_w(self) -> float:
        """The key mean on ``w``."""
        return -self.sep / 2.0 if self.mu_k_w is None else float(self.mu_k_w)

    @property
    def query_w(self) -> float:
        """The query mean on ``w`` (``key_w + sep``)."""
        return self.key_w + self.sep

    @property
    def bias_strength(self) -> float:
        """The planted recency bias ``mu_q_a · alpha_k`` (seed 002)."""
        return self.mu_q_a * self.alpha_k

    def key_side(self) -> tuple:
        """The values of the key-side fields (:data:`KEY_FIELDS`), for comparing two heads' key heads."""
        return tuple(getattr(self, f) for f in KEY_FIELDS)

    def joining(self, key: HeadParams, what: str = "query head") -> HeadParams:
        """These parameters as a query head of ``key``'s group: key side checked, key mean on w adopted.

        Raises :class:`QkdbError` when a key-side field, or an explicit ``mu_k_w``, disagrees with ``key``.
        """
        diff = [f for f in KEY_FIELDS if getattr(self, f) != getattr(key, f)]
        if self.mu_k_w is not None and self.mu_k_w != key.key_w:
            diff.append("mu_k_w")
        if diff:
            raise QkdbError(f"{what} shares a key head but differs from it on {', '.join(diff)}")
        return dataclasses.replace(self, mu_k_w=key.key_w)


@dataclass(frozen=True)
class Frame:
    """The coordinates of one key head's geometry, shared by its query heads.

    ``planes`` are the ring planes, ``coords`` their coordinate pairs (cos, sin), ``omegas`` their
    RoPE frequencies; ``u``, ``w``, ``m0`` are zero on every ring coordinate.
    """

    d: int
    pairing: str
    rope_theta: float | None
    planes: np.ndarray  # (P,) int
    coords: np.ndarray  # (P, 2) int
    omegas: np.ndarray  # (P,) float64
    u: np.ndarray  # (d,) float64
    w: np.ndarray  # (d,) float64
    m0: np.ndarray  # (d,) float64


@dataclass
class SimHead:
    """Simulated vectors of one query head and its key head, with the frame they were drawn in.

    ``Q`` (n_q, d) and ``K`` (n_k, d) are float64; ``t_q``, ``t_k`` integer positions; ``ex_q``,
    ``ex_k`` example ids. Pass ``sim.key`` (or ``sim`` itself) as ``K=`` to :func:`simulate_head`
    to draw another query head of the same GQA group.
    """

    Q: np.ndarray
    t_q: np.ndarray
    ex_q: np.ndarray
    K: np.ndarray
    t_k: np.ndarray
    ex_k: np.ndarray
    u: np.ndarray
    w: np.ndarray
    m0: np.ndarray
    frame: Frame
    params: HeadParams
    drift_center: float

    @property
    def key(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(K, t_k, ex_k)``."""
        return self.K, self.t_k, self.ex_k


# --------------------------------------------------------------------------- geometry helpers


def rope_coords(planes: Sequence[int] | np.ndarray, d: int, pairing: str = "half") -> np.ndarray:
    """Coordinate pairs ``(P, 2)`` of RoPE planes: ``(j, j + d/2)`` for ``half``, ``(2j, 2j+1)`` for ``interleaved``."""
    if pairing not in PAIRINGS:
        raise QkdbError(f"rope pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    p = np.asarray(planes, dtype=np.int64).reshape(-1)
    if pairing == "half":
        return np.stack([p, p + d // 2], axis=1)
    return np.stack([2 * p, 2 * p + 1], axis=1)


def rope_omegas(planes: Sequence[int] | np.ndarray, d: int, rope_theta: float) -> np.ndarray:
    """RoPE frequencies ``ω_j = rope_theta^(−2j/d)`` in radians per token."""
    p = np.asarray(planes, dtype=np.float64).reshape(-1)
    return np.power(float(rope_theta), -2.0 * p / d)


def position_buckets(positions: np.ndarray) -> np.ndarray:
    """``floor(log2(position + 1))``, exactly (via the binary exponent, not a rounded log)."""
    _, exponent = np.frexp(np.asarray(positions, dtype=np.float64) + 1.0)
    return (exponent - 1).astype(np.int32)


def draw_positions(
    n: int, max_position: int, n_examples: int, rng: np.random.Generator, positions: str = "stratified"
) -> tuple[np.ndarray, np.ndarray]:
    """Integer positions in ``[0, max_position)`` and example ids uniform in ``[0, n_examples)``.

    ``positions="iid"`` draws each position independently and uniformly. ``"stratified"`` (the default)
    cuts ``[0, max_position)`` into ``n`` equal strata and draws one position uniformly in each, in
    shuffled order: every position is still uniform on its own, but the sample's mean and spread match
    the uniform law to O(max_position / n) instead of O(max_position / √n). Independent draws would let
    the Q and K mean positions differ by ~max_position/√n, and that difference times the Q/K offset
    (``sep``) tilts the pooled position covariance away from ``u`` by tens of degrees at a few thousand
    vectors — a sampling artefact that would hide the planted drift axis. ``"dense"`` takes every
    position of every text, text after text (``n`` must be ``max_position × n_examples``): short texts
    captured whole, as sink studies need.
    """
    if positions not in POSITION_SAMPLING:
        raise QkdbError(f"positions must be one of {', '.join(POSITION_SAMPLING)}, got {positions!r}")
    if positions == "dense":
        if n != max_position * n_examples:
            raise QkdbError(f"dense positions keep every position of every text: {max_position} × {n_examples} = "
                            f"{max_position * n_examples} vectors, not {n}")
        return np.tile(np.arange(max_position, dtype=np.int64), n_examples), \
            np.repeat(np.arange(n_examples, dtype=np.int64), max_position)
    ex = rng.integers(0, n_examples, size=n, dtype=np.int64)
    if positions == "iid":
        t = rng.integers(0, max_position, size=n, dtype=np.int64)
    else:
        u01 = (np.arange(n) + rng.random(n)) / n
        t = np.minimum(np.floor(u01 * max_position).astype(np.int64), max_position - 1)
        t = rng.permutation(t)
    return t, ex


def _validate_planes(planes: Sequence[int], d: int) -> np.ndarray:
    p = np.asarray(tuple(planes), dtype=np.int64).reshape(-1)
    if d % 2:
        raise QkdbError(f"head_dim must be even for RoPE, got {d}")
    if p.size and (p.min() < 0 or p.max() >= d // 2):
        raise QkdbError(f"ring planes {tuple(int(x) for x in p)} out of range: head_dim {d} has planes 0..{d // 2 - 1}")
    if len(np.unique(p)) != p.size:
        raise QkdbError(f"ring planes {tuple(int(x) for x in p)} repeat a plane")
    return np.sort(p)


def _per_plane(value, n_planes: int, name: str) -> np.ndarray:
    if n_planes == 0:  # no rings (no RoPE): per-plane values are moot
        return np.zeros(0)
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        return np.full(n_planes, float(arr[0]))
    if arr.size != n_planes:
        raise QkdbError(f"{name} has {arr.size} values for {n_planes} ring planes")
    return arr


def _unit_in(free: np.ndarray, d: int, rng: np.random.Generator, against: Sequence[np.ndarray] = ()) -> np.ndarray:
    """A random unit vector supported on the ``free`` coordinates, orthogonal to ``against``."""
    for _ in range(100):
        v = np.zeros(d)
        v[free] = rng.standard_normal(free.size)
        for a in against:
            v -= (v @ a) * a
        norm = np.linalg.norm(v)
        if norm > 1e-8:
            return v / norm
    raise QkdbError("could not draw a direction in the coordinates free of rings")  # pragma: no cover


def make_frame(
    params: HeadParams,
    d: int,
    *,
    rope_theta: float | None,
    pairing: str,
    rng: np.random.Generator,
    u: np.ndarray | None = None,
    w: np.ndarray | None = None,
    m0: np.ndarray | None = None,
) -> Frame:
    """The frame of a key head: ring planes and their coordinates, and ``u``, ``w``, ``m0`` in the free coordinates.

    Directions not given are drawn from ``rng`` (``u`` first, then ``w``, then ``m0``); given ones are
    checked to be unit, orthogonal and zero on the ring coordinates.
    """
    if d < 2:
        raise QkdbError(f"head_dim must be at least 2, got {d}")
    if pairing not in PAIRINGS:
        raise QkdbError(f"rope pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    if rope_theta is None:
        planes = np.zeros(0, dtype=np.int64)
        omegas = np.zeros(0)
    else:
        if not (math.isfinite(rope_theta) and rope_theta > 1.0):
            raise QkdbError(f"rope_theta must be a number > 1, got {rope_theta}")
        planes = _validate_planes(params.ring_planes, d)
        omegas = rope_omegas(planes, d, rope_theta)
    coords = rope_coords(planes, d, pairing) if planes.size else np.zeros((0, 2), dtype=np.int64)
    used = np.zeros(d, dtype=bool)
    used[coords.reshape(-1)] = True
    free = np.flatnonzero(~used)
    if free.size < 2:
        raise QkdbError(
            f"ring planes {tuple(int(p) for p in planes)} leave {free.size} of {d} coordinates free; "
            "the drift and offset directions need at least 2"
        )

    def given(v: np.ndarray | None, name: str) -> np.ndarray | None:
        if v is None:
            return None
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        if v.shape != (d,):
            raise QkdbError(f"{name} has {v.size} coordinates, expected head_dim {d}")
        if used.any() and np.max(np.abs(v[used])) > 1e-9 * max(1.0, np.linalg.norm(v)):
            raise QkdbError(f"{name} must be zero on the ring-plane coordinates")
        return v

    u, w, m0 = given(u, "u"), given(w, "w"), given(m0, "m0")
    if u is None:
        u = _unit_in(free, d, rng)
    elif abs(np.linalg.norm(u) - 1.0) > 1e-9:
        raise QkdbError("u must be a unit vector")
    if w is None:
        w = _unit_in(free, d, rng, against=(u,))
    elif abs(np.linalg.norm(w) - 1.0) > 1e-9 or abs(u @ w) > 1e-9:
        raise QkdbError("w must be a unit vector orthogonal to u")
    if m0 is None:
        m0 = np.zeros(d)
        if params.m0_norm and free.size > 2:
            m0 = params.m0_norm * _unit_in(free, d, rng, against=(u, w))
    return Frame(d, pairing, rope_theta, planes, coords, omegas, u, w, m0)


def _vectors(
    frame: Frame,
    *,
    mu_a: float,
    mu_w: float,
    alpha: float,
    phases: np.ndarray,
    radii: np.ndarray,
    noise: float,
    phase_jitter: float,
    t: np.ndarray,
    drift_center: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Vectors of one kind at positions ``t`` (float64, (n, d)), vectorised over vectors.

    Built as a (d, n) array and returned transposed (a Fortran-ordered (n, d) view): adding the rings
    to whole coordinate rows is then contiguous, several times faster than column fancy-indexing.
    """
    n, d = t.size, frame.d
    xt = np.empty((d, n))
    rng.standard_normal(out=xt)
    xt *= noise
    tf = t.astype(np.float64)
    # Mean and drift live on the free coordinates only (u, w, m0 vanish on ring coordinates).
    xt += (frame.m0 + mu_a * frame.u + mu_w * frame.w)[:, None]
    xt += np.multiply.outer(frame.u, alpha * (tf - drift_center))
    if frame.planes.size:
        angle = np.multiply.outer(frame.omegas, tf)
        angle += phases[:, None]
        if phase_jitter:
            angle += phase_jitter * rng.standard_normal(angle.shape)
        # Ring coordinates are disjoint from each other and from u, w, m0: adding in place is exact.
        xt[frame.coords[:, 0]] += radii[:, None] * np.cos(angle)
        xt[frame.coords[:, 1]] += radii[:, None] * np.sin(angle)
    return xt.T


def _check_counts(n: int, name: str) -> None:
    if int(n) != n or n < 1:
        raise QkdbError(f"{name} must be a positive integer, got {n}")


def _check_params(params: HeadParams) -> None:
    for f in ("mu_q_a", "mu_k_a", "alpha_q", "alpha_k", "sep", "noise", "phase_jitter", "m0_norm"):
        v = getattr(params, f)
        if not math.isfinite(v):
            raise QkdbError(f"HeadParams.{f} must be finite, got {v}")
    if params.noise < 0 or params.phase_jitter < 0 or params.m0_norm < 0:
        raise QkdbError("HeadParams.noise, phase_jitter and m0_norm must be >= 0")
    n_planes = len(tuple(params.ring_planes))
    for f in ("ring_radius", "phase_q", "phase_k"):
        size = np.asarray(getattr(params, f), dtype=np.float64).size
        if size != 1 and size != n_planes:
            raise QkdbError(f"HeadParams.{f} has {size} values for {n_planes} ring planes")


def _kind_vectors(
    params: HeadParams,
    frame: Frame,
    n: int,
    kind: str,
    *,
    max_position: int,
    n_examples: int,
    rng: np.random.Generator,
    positions: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X, t, ex)`` of one kind; ring radius, noise and jitter always come from the key side."""
    _check_counts(n, f"n_{kind}")
    t, ex = draw_positions(n, max_position, n_examples, rng, positions)
    P = frame.planes.size
    X = _vectors(
        frame,
        mu_a=params.mu_k_a if kind == "k" else params.mu_q_a,
        mu_w=params.key_w if kind == "k" else params.query_w,
        alpha=params.alpha_k if kind == "k" else params.alpha_q,
        phases=_per_plane(params.phase_k if kind == "k" else params.phase_q, P, f"phase_{kind}"),
        radii=_per_plane(params.ring_radius, P, "ring_radius"),
        noise=params.noise,
        phase_jitter=params.phase_jitter,
        t=t,
        drift_center=(max_position - 1) / 2.0,
        rng=rng,
    )
    return X, t, ex


def key_vectors(
    params: HeadParams, frame: Frame, n_k: int, *, max_position: int, n_examples: int,
    rng: np.random.Generator, positions: str = "stratified",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(K, t_k, ex_k)`` of a key head in ``frame`` from the key-side fields of ``params``."""
    return _kind_vectors(params, frame, n_k, "k", max_position=max_position, n_examples=n_examples,
                         rng=rng, positions=positions)


def query_vectors(
    params: HeadParams, frame: Frame, n_q: int, *, max_position: int, n_examples: int,
    rng: np.random.Generator, positions: str = "stratified",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Q, t_q, ex_q)`` of a query head in ``frame`` (ring radius, noise and jitter from the key side)."""
    return _kind_vectors(params, frame, n_q, "q", max_position=max_position, n_examples=n_examples,
                         rng=rng, positions=positions)


def simulate_head(
    params: HeadParams,
    d: int,
    n_q: int,
    n_k: int,
    *,
    rope_theta: float | None = 10000.0,
    pairing: str = "half",
    max_position: int = 4096,
    n_examples: int = 8,
    rng: np.random.Generator,
    u: np.ndarray | None = None,
    w: np.ndarray | None = None,
    m0: np.ndarray | None = None,
    K: tuple | SimHead | None = None,
    positions: str = "stratified",
) -> SimHead:
    """Simulate one query head and its key head.

    Parameters
    ----------
    params
        Planted parameters. With ``K`` a :class:`SimHead`, the key-side fields (:data:`KEY_FIELDS`)
        must equal the ones that generated it, and the key mean on ``w`` is adopted from it (so the
        query mean sits at ``key_w + sep``); the returned ``params`` say so explicitly. With ``K`` a
        tuple, the caller vouches that ``params``' key side generated it.
    d, n_q, n_k
        Head dimension and numbers of query and key vectors (``n_k`` is ignored when ``K`` is given).
    rope_theta
        RoPE base; ``None`` means no RoPE, hence no rings whatever ``params.ring_planes`` says.
    pairing
        ``"half"`` (rotate-half: planes ``(j, j + d/2)``) or ``"interleaved"`` (``(2j, 2j + 1)``).
    max_position, n_examples
        Positions are uniform in ``[0, max_position)``, example ids uniform in ``[0, n_examples)``.
    positions
        ``"stratified"`` (default) or ``"iid"`` position sampling, see :func:`draw_positions`.
    rng
        Source of all randomness (frame directions not given, positions, noise, jitter).
    u, w, m0
        The frame's drift and offset directions and common mean; drawn when not given.
    K
        A key head to share: a :class:`SimHead` of the same group (its frame is reused), or a tuple
        ``(K, t_k, ex_k)`` (then ``u`` and ``w``, and ``m0`` if nonzero, must be the ones it was drawn with).

    Returns
    -------
    SimHead
    """
    _check_params(params)
    _check_counts(max_position, "max_position")
    _check_counts(n_examples, "n_examples")
    if isinstance(K, SimHead):
        src = K
        if (src.frame.d, src.frame.pairing, src.frame.rope_theta, src.drift_center) != (
            d, pairing, rope_theta, (max_position - 1) / 2.0
        ):
            raise QkdbError("K comes from a head simulated with another head_dim, pairing, rope_theta or max_position")
        if u is not None or w is not None or m0 is not None:
            raise QkdbError("simulate_head: u, w and m0 come from K when K is a SimHead; do not pass them")
        params = params.joining(src.params)
        frame = src.frame
        keys = src.key
    else:
        if K is not None and (u is None or w is None):
            raise QkdbError("simulate_head: pass u and w (the key head's frame) together with a K tuple")
        frame = make_frame(params, d, rope_theta=rope_theta, pairing=pairing, rng=rng, u=u, w=w, m0=m0)
        keys = None
        if K is not None:
            keys = tuple(np.asarray(a) for a in K)
            if len(keys) != 3 or keys[0].ndim != 2 or keys[0].shape[1] != d:
                raise QkdbError(f"K must be (K (n_k, {d}), t_k, ex_k)")
    if keys is None:
        keys = key_vectors(params, frame, n_k, max_position=max_position, n_examples=n_examples, rng=rng,
                           positions=positions)
    Q, t_q, ex_q = query_vectors(params, frame, n_q, max_position=max_position, n_examples=n_examples, rng=rng,
                                 positions=positions)
    Kv, t_k, ex_k = keys
    return SimHead(
        Q=Q,
        t_q=t_q,
        ex_q=ex_q,
        K=Kv,
        t_k=t_k,
        ex_k=ex_k,
        u=frame.u,
        w=frame.w,
        m0=frame.m0,
        frame=frame,
        params=params,
        drift_center=(max_position - 1) / 2.0,
    )


def simulate_group(
    params: Sequence[HeadParams],
    d: int,
    n_q: int,
    n_k: int,
    *,
    rope_theta: float | None = 10000.0,
    pairing: str = "half",
    max_position: int = 4096,
    n_examples: int = 8,
    rng: np.random.Generator,
    positions: str = "stratified",
) -> list[SimHead]:
    """Several query heads sharing one key head (a GQA group), drawn in one frame.

    The key head is generated from ``params[0]``'s key side; the other heads must agree with it on
    :data:`KEY_FIELDS` and adopt its key mean on ``w`` (see :meth:`HeadParams.joining`).
    """
    if not params:
        raise QkdbError("simulate_group needs at least one HeadParams")
    for i, p in enumerate(params[1:], start=1):
        p.joining(params[0], what=f"query head {i} of the group")
    first = simulate_head(
        params[0], d, n_q, n_k, rope_theta=rope_theta, pairing=pairing, max_position=max_position,
        n_examples=n_examples, rng=rng, positions=positions,
    )
    rest = [
        simulate_head(
            p, d, n_q, n_k, rope_theta=rope_theta, pairing=pairing, max_position=max_position,
            n_examples=n_examples, rng=rng, K=first, positions=positions,
        )
        for p in params[1:]
    ]
    return [first, *rest]


# --------------------------------------------------------------------------- parameter draws


@dataclass(frozen=True)
class Ranges:
    """Ranges the per-head parameters of :func:`simulate` are drawn from (resembling the seeds)."""

    alpha_k: tuple[float, float] = (1.0e-3, 6.0e-3)  # per token
    slope_ratio: float = 1.8  # median |alpha_k| / |alpha_q|
    slope_ratio_spread: float = 0.25  # sd of log(ratio) around log(slope_ratio)
    mu_q_a: tuple[float, float] = (2.0, 8.0)  # magnitude; sign negative with negative_fraction
    negative_fraction: float = 0.013
    mu_k_a: tuple[float, float] = (-2.0, 2.0)
    sep: tuple[float, float] = (10.0, 50.0)
    noise: tuple[float, float] = (0.8, 1.2)
    ring_radius: tuple[float, float] = (2.0, 6.0)
    phase_jitter: float = 0.1
    m0_norm: tuple[float, float] = (0.0, 3.0)
    ring_fraction: float = 0.125  # ring planes per head as a fraction of head_dim (16 of 128)
    min_turns: float = 16.0  # ring planes turn at least this often over the position range (slow rings leak
    # linear position covariance, ≈ radius / ω per coordinate, which would tilt the drift axis)
    # How alike the heads of one layer are, and the query heads of one key head besides: the correlation
    # of the normal scores behind their drawn values (0: independent draws, the draws of earlier versions).
    layer_likeness: float = 0.0
    group_likeness: float = 0.0

    def __post_init__(self) -> None:
        if not (self.slope_ratio > 0 and math.isfinite(self.slope_ratio)):
            raise QkdbError(f"slope ratio must be a positive number, got {self.slope_ratio}")
        if not 0.0 <= self.negative_fraction <= 1.0:
            raise QkdbError(f"negative fraction must be in [0, 1], got {self.negative_fraction}")
        for name in ("alpha_k", "mu_q_a", "mu_k_a", "sep", "noise", "ring_radius", "m0_norm"):
            lo, hi = getattr(self, name)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise QkdbError(f"range {name} = ({lo}, {hi}) is not an interval")
        if self.noise[0] < 0 or self.m0_norm[0] < 0 or self.phase_jitter < 0 or self.slope_ratio_spread < 0:
            raise QkdbError("noise, m0_norm, phase_jitter and slope_ratio_spread ranges must be >= 0")
        lk, gk = self.layer_likeness, self.group_likeness
        if not (0.0 <= lk <= 1.0 and 0.0 <= gk <= 1.0 and lk + gk <= 1.0):
            raise QkdbError(f"layer and group likeness must be >= 0 with a sum <= 1, got {lk} and {gk}")

    @property
    def alike(self) -> bool:
        """Whether heads share part of their draws (:attr:`layer_likeness`, :attr:`group_likeness`)."""
        return self.layer_likeness > 0.0 or self.group_likeness > 0.0


# Normal scores per drawn quantity that heads of one layer (or one key head) share when alike: a
# fixed slot per quantity, so that a head's draw of one does not depend on how many others it drew.
_SLOTS = ("alpha_k", "mu_k_a", "sep_ref", "noise", "m0_norm", "radius", "sign", "mu_q_a", "ratio", "sep")


def shared_scores(rng: np.random.Generator) -> np.ndarray:
    """The normal scores a layer or a key head shares with its heads (one per drawn quantity)."""
    return rng.standard_normal(len(_SLOTS))


class _Alike:
    """Uniforms and normals for one head: its own scores mixed with its layer's and its key head's.

    ``z = √λ_L z_layer + √λ_G z_group + √(1 − λ_L − λ_G) z_own`` per quantity, so two query heads of
    one key head correlate λ_L + λ_G in every score and two heads of one layer λ_L.
    """

    def __init__(self, rng: np.random.Generator, layer_w: float, layer: np.ndarray | None,
                 group_w: float = 0.0, group: np.ndarray | None = None):
        z = rng.standard_normal(len(_SLOTS)) * math.sqrt(max(0.0, 1.0 - layer_w - group_w))
        if layer is not None:
            z += math.sqrt(layer_w) * layer
        if group is not None:
            z += math.sqrt(group_w) * group
        self.z = dict(zip(_SLOTS, z))

    def normal(self, slot: str) -> float:
        return float(self.z[slot])

    def uniform(self, slot: str, lo: float, hi: float) -> float:
        return lo + (hi - lo) * 0.5 * math.erfc(-self.z[slot] / math.sqrt(2.0))


def ring_plane_candidates(d: int, rope_theta: float, max_position: int, min_turns: float) -> np.ndarray:
    """Planes whose ring turns at least ``min_turns`` times over ``[0, max_position)`` (plane 0 at least)."""
    planes = np.arange(d // 2)
    turns = rope_omegas(planes, d, rope_theta) * max_position / (2 * np.pi)
    ok = planes[turns >= min_turns]
    return ok if ok.size else planes[:1]


def draw_key_params(
    rng: np.random.Generator, d: int, *, rope_theta: float | None, max_position: int, ranges: Ranges,
    layer_scores: np.ndarray | None = None,
) -> HeadParams:
    """Key-side parameters of one key head (query-side fields are placeholders, see :func:`draw_query_params`).

    With ``ranges.layer_likeness`` > 0, ``layer_scores`` (:func:`shared_scores`, one draw per layer)
    make the key heads of a layer alike; without likeness the draws are those of earlier versions.
    """
    if ranges.alike:
        # A key head's values are shared by its query heads: it mixes its layer's scores into its own.
        alike = _Alike(rng, ranges.layer_likeness, layer_scores)
        alpha_k = alike.uniform("alpha_k", *ranges.alpha_k)
        mu_k_a = alike.uniform("mu_k_a", *ranges.mu_k_a)
        sep_ref = alike.uniform("sep_ref", *ranges.sep)
        noise = alike.uniform("noise", *ranges.noise)
        m0_norm = alike.uniform("m0_norm", *ranges.m0_norm)
        radius_u = alike.uniform("radius", 0.0, 1.0)
    else:
        alpha_k = rng.uniform(*ranges.alpha_k)
        mu_k_a = rng.uniform(*ranges.mu_k_a)
        sep_ref = rng.uniform(*ranges.sep)
        noise = rng.uniform(*ranges.noise)
        m0_norm = rng.uniform(*ranges.m0_norm)
    planes: tuple[int, ...] = ()
    radius: tuple[float, ...] = ()
    phase_k: tuple[float, ...] = ()
    if rope_theta is not None:
        cand = ring_plane_candidates(d, rope_theta, max_position, ranges.min_turns)
        # Keep at least two coordinates free for u and w.
        n = min(cand.size, max(1, int(round(ranges.ring_fraction * d))), max(0, (d - 2) // 2))
        planes = tuple(int(p) for p in np.sort(rng.choice(cand, size=n, replace=False))) if n else ()
        if ranges.alike:
            # (one shared level for the head's rings, spread around it by a quarter of the range)
            lo, hi = ranges.ring_radius
            centre = lo + (hi - lo) * radius_u
            radius = tuple(float(np.clip(r, lo, hi)) for r in centre + 0.25 * (hi - lo) * rng.uniform(-1, 1, size=n))
        else:
            radius = tuple(float(r) for r in rng.uniform(*ranges.ring_radius, size=n))
        phase_k = tuple(float(p) for p in rng.uniform(0, 2 * np.pi, size=n))
    return HeadParams(
        mu_k_a=float(mu_k_a),
        alpha_k=float(alpha_k),
        mu_k_w=float(-sep_ref / 2),
        noise=float(noise),
        ring_planes=planes,
        ring_radius=radius,
        phase_k=phase_k,
        phase_q=phase_k,
        phase_jitter=float(ranges.phase_jitter),
        m0_norm=float(m0_norm),
    )


def draw_query_params(
    rng: np.random.Generator, key: HeadParams, *, ranges: Ranges,
    layer_scores: np.ndarray | None = None, group_scores: np.ndarray | None = None,
) -> HeadParams:
    """A query head of the group of ``key``: its own mu_q_a, alpha_q, sep and ring phases.

    With likeness (``ranges.layer_likeness``, ``ranges.group_likeness``) its draws share the scores of
    its layer and of its key head (:func:`shared_scores`): the query heads of one key head become
    near-copies as ``group_likeness`` approaches 1 − ``layer_likeness``.
    """
    if ranges.alike:
        alike = _Alike(rng, ranges.layer_likeness, layer_scores, ranges.group_likeness, group_scores)
        sign = -1.0 if alike.uniform("sign", 0.0, 1.0) < ranges.negative_fraction else 1.0
        mu_q_a = sign * alike.uniform("mu_q_a", *ranges.mu_q_a)
        ratio = ranges.slope_ratio * math.exp(ranges.slope_ratio_spread * alike.normal("ratio"))
        sep = alike.uniform("sep", *ranges.sep)
    else:
        sign = -1.0 if rng.random() < ranges.negative_fraction else 1.0
        mu_q_a = sign * rng.uniform(*ranges.mu_q_a)
        ratio = ranges.slope_ratio * math.exp(ranges.slope_ratio_spread * rng.standard_normal())
        sep = rng.uniform(*ranges.sep)
    alpha_q = key.alpha_k / ratio
    phase_q = tuple(float(p) for p in rng.uniform(0, 2 * np.pi, size=len(key.ring_planes)))
    return dataclasses.replace(key, mu_q_a=float(mu_q_a), alpha_q=float(alpha_q), sep=float(sep), phase_q=phase_q)


# --------------------------------------------------------------------------- writing a dataset

# Purposes of the independent random streams: (seed, purpose, layer, head).
_SAMPLE, _KEY_PARAMS, _QUERY_PARAMS, _FRAME, _KEY_VECTORS, _QUERY_VECTORS, _LAYER_SCORES, _GROUP_SCORES, _SINKS = range(9)


def _stream(seed: int, purpose: int, layer: int = 0, head: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), purpose, layer, head]))


def sample_query_heads(
    layers: int, q_heads: int, n: int | None, seed: int, keep: Sequence[tuple[int, int]] = ()
) -> list[tuple[int, int]]:
    """A seeded sample of ``n`` (layer, head) pairs (all heads when ``n`` is None), always containing ``keep``."""
    every = [(l, h) for l in range(layers) for h in range(q_heads)]
    if n is None:
        return every
    if n < 1 or n > len(every):
        raise QkdbError(f"sample of {n} query heads asked for; the model has {len(every)} (layers × q_heads)")
    keep = sorted(set(keep))
    if len(keep) > n:
        raise QkdbError(f"{len(keep)} overridden heads do not fit in a sample of {n} query heads")
    kept = set(keep)
    rest = [hd for hd in every if hd not in kept]
    idx = _stream(seed, _SAMPLE).choice(len(rest), size=n - len(keep), replace=False)
    return sorted(keep + [rest[i] for i in idx])


def _clear_previous(out: Path) -> None:
    """Remove what an earlier simulation left at the top level of ``out`` (head folders, metadata)."""
    for entry in out.iterdir():
        if entry.is_dir() and not entry.is_symlink() and HEAD_DIR.match(entry.name):
            shutil.rmtree(entry)
        elif entry.name in (PLANTED_FILE, METADATA_FILE) and entry.is_file():
            entry.unlink()


def _head_record(layer: int, head: int, kv: int, p: HeadParams, frame: Frame, max_position: int) -> dict:
    P = frame.planes.size
    radii = _per_plane(p.ring_radius, P, "ring_radius")
    ph_q = _per_plane(p.phase_q, P, "phase_q")
    ph_k = _per_plane(p.phase_k, P, "phase_k")
    return {
        "layer": layer,
        "head": head,
        "kv_head": kv,
        "mu_q_a": p.mu_q_a,
        "mu_k_a": p.mu_k_a,
        "alpha_q": p.alpha_q,
        "alpha_k": p.alpha_k,
        "bias_strength": p.bias_strength,
        "slope_ratio": abs(p.alpha_k) / abs(p.alpha_q) if p.alpha_q else None,
        "sep": p.sep,
        "mu_q_w": p.query_w,
        "mu_k_w": p.key_w,
        "noise": p.noise,
        "phase_jitter": p.phase_jitter,
        "m0_norm": float(np.linalg.norm(frame.m0)),
        "u": frame.u.tolist(),
        "w": frame.w.tolist(),
        "m0": frame.m0.tolist(),
        "ring_planes": [
            {
                "plane": int(frame.planes[i]),
                "coords": [int(c) for c in frame.coords[i]],
                "omega": float(frame.omegas[i]),
                "turns": float(frame.omegas[i] * max_position / (2 * np.pi)),
                "radius": float(radii[i]),
                "phase_q": float(ph_q[i]),
                "phase_k": float(ph_k[i]),
            }
            for i in range(P)
        ],
    }


@dataclass(frozen=True)
class SimSpec:
    """What :func:`simulate` writes: the architecture, the sampling and the planted parameters' ranges.

    Attributes
    ----------
    layers, q_heads, kv_heads, head_dim
        Architecture; ``q_heads`` must be a multiple of ``kv_heads``.
    vectors
        Vectors per head file (queries and keys alike).
    rope_theta, pairing
        RoPE base (``None``: no RoPE, no rings) and coordinate pairing (``half`` or ``interleaved``).
    sample_q_heads
        Write only a seeded sample of this many query heads across all layers (plus the key heads they
        need); ``None`` writes every head. Overridden heads are always in the sample.
    max_position, n_examples
        Each vector's position is uniform in ``[0, max_position)``, its example id in ``[0, n_examples)``.
    seed
        Seeds every draw; the same spec gives identical files.
    overrides
        ``{(layer, query_head): HeadParams}`` replacing the drawn parameters of those heads. Their key-side
        fields (:data:`KEY_FIELDS`) set the group's key head; overrides in one group must agree on them.
    dtype
        ``float32`` or ``float16`` for the written vectors (generation is float64).
    model, family
        Names recorded in ``qkdb_dataset.json``.
    nope_layers
        Layers without RoPE rings (like SmolLM3's NoPE layers): a built-in control.
    ranges
        Ranges of the drawn parameters (:class:`Ranges`).
    positions
        ``"stratified"`` (default) or ``"iid"`` position sampling, see :func:`draw_positions`.
    layer_seed
        Seeds what the heads of a layer share when ``ranges.layer_likeness`` > 0 (default ``seed``):
        the same ``layer_seed`` with other ``seed`` values gives new heads in the same layers (one model's
        heads drawn again, as a calibration of intervals about that model needs).
    sinks
        Attention sinks planted at position 0 and each query's softmax normaliser written as ``lse``
        (:class:`~qkdb.ingest.capture.simulate_sinks.Sinks`); needs ``positions="dense"``.

    Raises
    ------
    QkdbError
        Naming the value that cannot be simulated.
    """

    layers: int = 4
    q_heads: int = 8
    kv_heads: int = 2
    head_dim: int = 64
    vectors: int = 2000
    rope_theta: float | None = 10000.0
    pairing: str = "half"
    sample_q_heads: int | None = None
    max_position: int = 4096
    n_examples: int = 8
    seed: int = 0
    overrides: Mapping[tuple[int, int], HeadParams] = dataclasses.field(default_factory=dict)
    dtype: str = "float32"
    model: str = "simulated"
    family: str = "Simulated"
    nope_layers: tuple[int, ...] = ()
    ranges: Ranges = dataclasses.field(default_factory=Ranges)
    positions: str = "stratified"
    layer_seed: int | None = None
    sinks: Sinks | None = None

    def __post_init__(self) -> None:
        for name in ("layers", "q_heads", "kv_heads", "head_dim", "vectors", "max_position", "n_examples"):
            _check_counts(getattr(self, name), name)
        if self.q_heads % self.kv_heads:
            raise QkdbError(f"q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})")
        for name, value, allowed in (("dtype", self.dtype, DTYPES), ("rope pairing", self.pairing, PAIRINGS),
                                     ("positions", self.positions, POSITION_SAMPLING)):
            if value not in allowed:
                raise QkdbError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.positions == "dense" and self.vectors != self.max_position * self.n_examples:
            raise QkdbError(f"positions='dense' keeps every position of every text: vectors must be max_position × "
                            f"n_examples = {self.max_position * self.n_examples}, got {self.vectors}")
        if self.sinks is not None and self.positions != "dense":
            raise QkdbError("planted sinks need positions='dense': a query's normaliser runs over every key of its text")
        if self.rope_theta is not None and self.head_dim % 2:
            raise QkdbError(f"head_dim must be even for RoPE, got {self.head_dim}")
        nope = tuple(sorted({int(x) for x in self.nope_layers}))
        if nope and (nope[0] < 0 or nope[-1] >= self.layers):
            raise QkdbError(f"nope_layers {list(nope)} out of range 0..{self.layers - 1}")
        object.__setattr__(self, "nope_layers", nope)
        for (l, h), p in self.overrides.items():
            if not (0 <= l < self.layers and 0 <= h < self.q_heads):
                raise QkdbError(f"override for head ({l}, {h}) outside {self.layers} layers × {self.q_heads} query heads")
            if not isinstance(p, HeadParams):
                raise QkdbError(f"override for head ({l}, {h}) is not a HeadParams")
            _check_params(p)

    @property
    def ratio(self) -> int:
        """Query heads per key head (GQA)."""
        return self.q_heads // self.kv_heads

    def layer_theta(self, layer: int) -> float | None:
        """The RoPE base of a layer (None in NoPE layers)."""
        return None if layer in self.nope_layers else self.rope_theta


def simulate(
    out: str | os.PathLike,
    spec: SimSpec | None = None,
    *,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    **fields,
) -> Path:
    """Write a simulated dataset in the sniffed-qk layout with its planted parameters.

    Parameters
    ----------
    out
        Dataset root; created if missing. Head folders, ``planted.json`` and ``qkdb_dataset.json`` that
        an earlier run left at its top level are replaced; other files are left alone.
    spec
        What to simulate (:class:`SimSpec`); ``**fields`` set its fields by name, over ``spec``.
    workers
        Threads writing parquet files while the next group is generated.
    progress
        Called as ``progress(files_written, files_total)``.

    Returns
    -------
    Path
        The dataset root.
    """
    spec = dataclasses.replace(spec or SimSpec(), **fields) if fields else (spec or SimSpec())
    groups = _plan_groups(spec)
    # Settled before touching the disk, so that a conflict or a bad ring layout fails without
    # leaving half a dataset behind.
    overrides, override_keys = _settle_overrides(spec)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise QkdbError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    _clear_previous(out)
    records, key_records = _write_groups(out, spec, groups, overrides, override_keys, workers, progress)
    _write_description(out, spec, records, key_records)
    return out


def _plan_groups(spec: SimSpec) -> dict[tuple[int, int], list[int]]:
    """The sampled query heads by (layer, key head)."""
    chosen = sample_query_heads(spec.layers, spec.q_heads, spec.sample_q_heads, spec.seed, keep=list(spec.overrides))
    groups: dict[tuple[int, int], list[int]] = {}
    for l, h in chosen:
        groups.setdefault((l, h // spec.ratio), []).append(h)
    return groups


def _settle_overrides(spec: SimSpec) -> tuple[dict[tuple[int, int], HeadParams], dict[tuple[int, int], HeadParams]]:
    """Overridden heads joined to their key heads: the lowest overridden query head of a group
    defines its key head; the group's other overrides must agree with it."""
    overrides = dict(spec.overrides)
    override_keys: dict[tuple[int, int], HeadParams] = {}
    defined_by: dict[tuple[int, int], int] = {}
    for layer, h in sorted(overrides):
        kv = h // spec.ratio
        if (layer, kv) not in override_keys:
            key_p = overrides[(layer, h)]
            override_keys[(layer, kv)] = dataclasses.replace(key_p, mu_k_w=key_p.key_w)
            defined_by[(layer, kv)] = h
            make_frame(key_p, spec.head_dim, rope_theta=spec.layer_theta(layer), pairing=spec.pairing,
                       rng=np.random.default_rng(0))
        overrides[(layer, h)] = overrides[(layer, h)].joining(
            override_keys[(layer, kv)],
            what=f"override for l{layer:02d}h{h:02d} "
            f"(key head {kv}, set by l{layer:02d}h{defined_by[(layer, kv)]:02d})",
        )
    return overrides, override_keys


@dataclass(frozen=True)
class SimFile:
    """One generated head file: its kind (``"q"`` or ``"k"``), where it sits, and its vectors."""

    kind: str
    layer: int
    head: int  # the query head, or for a key file its key head
    kv_head: int
    params: HeadParams  # the query head's parameters (for a key file: its group's key side)
    frame: Frame
    vectors: tuple[np.ndarray, np.ndarray, np.ndarray]  # (X, t, example_id)
    lse: np.ndarray | None = None  # each query's softmax normaliser (planted sinks only)
    sink: str | None = None  # the query head's sink role (planted sinks only)


def generate(spec: SimSpec) -> Iterator[SimFile]:
    """Every file of the dataset ``spec`` describes, in memory: each key head, then its query heads.

    What :func:`simulate` writes, without writing it (benchmarks compute metrics from these directly).
    """
    overrides, override_keys = _settle_overrides(spec)
    yield from _generate(spec, _plan_groups(spec), overrides, override_keys)


def _as_stored(X: np.ndarray, dtype: str) -> np.ndarray:
    """``X`` as its file will hold it (float64 again): a planted normaliser must fit the stored vectors."""
    return np.asarray(X, dtype=dtype).astype(np.float64)


def sink_roles(spec: SimSpec, groups) -> dict[tuple[int, int], str] | None:
    """Each written query head's planted sink role (``None`` without planted sinks)."""
    if spec.sinks is None:
        return None
    heads = sorted((layer, h) for (layer, _), hs in groups.items() for h in hs)
    return simulate_sinks.assign_roles(heads, spec.sinks, _stream(spec.seed, _SINKS))


def _generate(spec: SimSpec, groups, overrides, override_keys) -> Iterator[SimFile]:
    sampling = dict(max_position=spec.max_position, n_examples=spec.n_examples, positions=spec.positions)
    roles = sink_roles(spec, groups)
    gain = simulate_sinks.gain(spec.sinks, spec.head_dim) if spec.sinks else 0.0
    alike = spec.ranges.alike
    for (layer, kv), heads in groups.items():
        theta = spec.layer_theta(layer)
        layer_seed = spec.seed if spec.layer_seed is None else spec.layer_seed
        layer_scores = shared_scores(_stream(layer_seed, _LAYER_SCORES, layer)) if alike else None
        group_scores = shared_scores(_stream(spec.seed, _GROUP_SCORES, layer, kv)) if alike else None
        key_p = override_keys.get((layer, kv)) or draw_key_params(
            _stream(spec.seed, _KEY_PARAMS, layer, kv), spec.head_dim, rope_theta=theta,
            max_position=spec.max_position, ranges=spec.ranges, layer_scores=layer_scores,
        )
        frame = make_frame(key_p, spec.head_dim, rope_theta=theta, pairing=spec.pairing,
                           rng=_stream(spec.seed, _FRAME, layer, kv))
        keys = key_vectors(key_p, frame, spec.vectors, rng=_stream(spec.seed, _KEY_VECTORS, layer, kv), **sampling)
        if roles is not None:
            direction = simulate_sinks.sink_direction(frame.u, frame.w, _stream(spec.seed, _SINKS, layer, kv))
            keys = (_as_stored(simulate_sinks.plant_key(keys[0], keys[1], direction, gain), spec.dtype), *keys[1:])
        yield SimFile("k", layer, kv, kv, key_p, frame, keys)
        for h in heads:
            p = overrides.get((layer, h)) or draw_query_params(
                _stream(spec.seed, _QUERY_PARAMS, layer, h), key_p, ranges=spec.ranges,
                layer_scores=layer_scores, group_scores=group_scores,
            )
            queries = query_vectors(p, frame, spec.vectors, rng=_stream(spec.seed, _QUERY_VECTORS, layer, h), **sampling)
            if roles is None:
                yield SimFile("q", layer, h, kv, p, frame, queries)
                continue
            Q = _as_stored(simulate_sinks.plant_queries(queries[0], roles[(layer, h)], direction, gain,
                                                        _stream(spec.seed, _SINKS, layer, h)), spec.dtype)
            lse = simulate_sinks.causal_lse(Q, queries[1], queries[2], *keys, scaling=spec.head_dim ** -0.5)
            yield SimFile("q", layer, h, kv, p, frame, (Q, *queries[1:]), lse=lse, sink=roles[(layer, h)])


def _write_groups(out, spec: SimSpec, groups, overrides, override_keys, workers, progress) -> tuple[dict, dict]:
    """Generate every group (its key head, then its query heads) and write their files on threads."""
    records: dict[str, dict] = {}
    key_records: dict[str, dict] = {}
    total = sum(len(h) for h in groups.values()) + len(groups)
    done = 0
    pending: list[Future] = []

    def settle(limit: int) -> None:
        # Bound memory: at most `limit` generated files wait to be written.
        nonlocal done
        while len(pending) > limit:
            pending.pop(0).result()
            done += 1
            if progress:
                progress(done, total)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for f in _generate(spec, groups, overrides, override_keys):
            x, t, ex = f.vectors
            pending.append(pool.submit(
                write_head, out, f.layer, f.head, f.kind, x, t, example_id=ex, bucket=position_buckets(t),
                dtype=spec.dtype, lse=f.lse,
            ))
            if f.kind == "k":
                key_records[f"l{f.layer:02d}h{f.kv_head:02d}"] = {
                    "layer": f.layer, "kv_head": f.kv_head, "q_heads": groups[(f.layer, f.kv_head)],
                    "rope": spec.layer_theta(f.layer) is not None,
                }
            else:
                records[f"l{f.layer:02d}h{f.head:02d}"] = _head_record(
                    f.layer, f.head, f.kv_head, f.params, f.frame, spec.max_position)
                if f.sink is not None:
                    records[f"l{f.layer:02d}h{f.head:02d}"]["sink"] = f.sink
            settle(2 * max(1, workers))
        settle(0)
    return records, key_records


def _write_description(out: Path, spec: SimSpec, records: dict, key_records: dict) -> None:
    """planted.json (every planted parameter) and qkdb_dataset.json (the model's facts)."""
    capture = {
        "seed": int(spec.seed),
        "vectors": int(spec.vectors),
        "max_position": int(spec.max_position),
        "n_examples": int(spec.n_examples),
        "positions": spec.positions,
        "sample_q_heads": spec.sample_q_heads,
        "dtype": spec.dtype,
        "drift_center": (spec.max_position - 1) / 2.0,
        "planted": PLANTED_FILE,
    }
    if spec.sinks is not None:
        # (what qkdb sniff records: the logits are the stored vectors' scaling · q·k, causal, no softcap)
        capture["normaliser"] = {
            "column": "lse", "logits_from_stored_vectors": True, "how": "planted: causal log-sum-exp over the text",
            "layers": [{"layer": l, "scaling": spec.head_dim ** -0.5, "softcap": None} for l in range(spec.layers)],
        }
    facts = {
        "model": spec.model,
        "family": spec.family,
        "n_layers": spec.layers,
        "n_q_heads": spec.q_heads,
        "n_kv_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "rope_theta": spec.rope_theta,
        "rope_pairing": spec.pairing,
    }
    settings = {
        **facts,
        "nope_layers": list(spec.nope_layers),
        **{k: v for k, v in capture.items() if k != "planted"},
        "ranges": dataclasses.asdict(spec.ranges),
        "sinks": dataclasses.asdict(spec.sinks) if spec.sinks else None,
        "layer_seed": spec.layer_seed,
        "overridden_heads": sorted(f"l{l:02d}h{h:02d}" for l, h in spec.overrides),
    }
    planted = {"format": PLANTED_FORMAT, "settings": settings, "heads": records, "key_heads": key_records}
    (out / PLANTED_FILE).write_text(json.dumps(planted, indent=1, sort_keys=True) + "\n")
    # The simulation's "weights": everything that decides its vectors (not the names it is given), so
    # that one simulation under two names in a series is a repeated checkpoint, as it would be on the Hub.
    decides = {**planted, "settings": {k: v for k, v in settings.items() if k not in ("model", "family")}}
    capture["weights_sha256"] = hashlib.sha256(json.dumps(decides, sort_keys=True).encode()).hexdigest()
    write_metadata(out, {
        **facts, "rope_scaling": None, "nope_layers": list(spec.nope_layers), "source": "simulate", "capture": capture,
        # (the planted rings turn over the simulated positions: its context is the one it was "trained" on)
        "trained_context": capture.get("max_position"), "trained_context_source": "simulate: max_position",
    })


def read_planted(root: str | os.PathLike) -> dict:
    """The ``planted.json`` of a simulated dataset."""
    path = Path(root) / PLANTED_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise QkdbError(f"{path}: no planted parameters (not a simulated dataset?)") from None
    except (OSError, ValueError) as exc:
        raise QkdbError(f"{path}: not a readable JSON file ({exc})") from exc

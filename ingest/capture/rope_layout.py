"""What rotation a layer applied, read from what the model does (``qkdb sniff``).

Two things a layer shows during a forward pass establish its RoPE, without reading its code or
trusting its config's ``model_type``:

1. **The cos/sin its attention module is called with** (``position_embeddings``). They give the
   rotated width, the frequencies and the amplitude. :func:`read_cos_sin` accepts the forms
   transformers' models use — ``(cos, sin)`` as ``cat(f, f)`` (Llama and most others),
   ``repeat_interleave(f, 2)`` (Cohere), one column per plane (GPT-J, which also passes them as
   ``(sin, cos)``), or one complex tensor (DeepSeek-V2) — and tells them apart by their values
   (which of the two is zero at position 0, which columns repeat), never by the model's name.
2. **Which rotation of the layer's own projection output reproduces the rows attention
   receives** (:func:`candidates`, :class:`Rotation`). The cos/sin layout alone does not say how
   the model pairs coordinates: GLM builds ``cat(f, f)`` like Llama and then rotates interleaved
   pairs; DeepSeek-V3 rotates interleaved pairs and writes them back as [evens | odds]. The
   recorder tries rotate-half and interleaved pairings on the first or the last ``r`` dims and keeps
   the one that reproduces the rows.

Frequencies. The angle at position 1 of each plane is its frequency ω_j (float32 cos/sin give it
to ~1e-7, relative, at every scale, since ``sin ω ≈ ω`` keeps relative precision); it is refined
with the largest kept position. When one of the model's ``*inv_freq`` buffers equals that estimate
(to 1e-5), the buffer's own values are recorded (:class:`FrequencySource`) — the frequencies as
the model's rotary module computed them, scaling included (for longrope, the factor set of the
text's length). Every kept position's angle must then be ``t · ω_j`` (to float32 rounding),
and the amplitude ``sqrt(cos² + sin²)`` constant: a layer whose cos/sin are not a rotation by
position × frequency is not a RoPE qkdb can record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAIRINGS = ("half", "interleaved")

# Frequencies read from cos/sin match a model buffer when they agree to this (relative). float32
# cos/sin give ~1e-7; a different scaling differs by 1e-3 and more.
SNAP_TOLERANCE = 1e-5
# Amplitude read from cos/sin (float32) matches the rotary module's attention scaling to this.
AMPLITUDE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Rotation:
    """A RoPE layout: which coordinates are paired, and where the rotated slice lies.

    ``pairing`` None is no rotation. Plane j pairs, within the slice ``[offset, offset + dims)`` of
    the vector attention receives, ``(offset + j, offset + j + dims/2)`` (``half``) or
    ``(offset + 2j, offset + 2j + 1)`` (``interleaved``). ``deinterleave``: the slice's input
    coordinates are reordered to [evens | odds] before a rotate-half rotation (DeepSeek-V3's
    ``rope_interleave``): the stored vectors are in that order, and their planes are ``half``.
    """

    pairing: str | None
    dims: int = 0
    offset: int = 0
    deinterleave: bool = False

    def planes(self) -> tuple[np.ndarray, np.ndarray]:
        """(first, second) coordinate of each plane, in the stored vector."""
        j = np.arange(self.dims // 2)
        if self.pairing == "half":
            return self.offset + j, self.offset + j + self.dims // 2
        return self.offset + 2 * j, self.offset + 2 * j + 1

    def _reorder(self, x: np.ndarray) -> np.ndarray:
        if not self.deinterleave:
            return x
        x = x.copy()
        part = x[:, self.offset:self.offset + self.dims]
        x[:, self.offset:self.offset + self.dims] = np.concatenate([part[:, 0::2], part[:, 1::2]], axis=1)
        return x

    def apply(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Rotate rows ``x`` (n, d) by per-row, per-plane ``cos``/``sin`` (n, dims/2) (which carry any amplitude)."""
        if self.pairing is None:
            return x
        x = self._reorder(x)
        i1, i2 = self.planes()
        out = x.copy()
        out[:, i1] = x[:, i1] * cos - x[:, i2] * sin
        out[:, i2] = x[:, i2] * cos + x[:, i1] * sin
        return out

    def undo(self, y: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`apply` (dividing out the amplitude): the pre-rotation rows, in stored order."""
        if self.pairing is None:
            return y
        i1, i2 = self.planes()
        norm = cos * cos + sin * sin
        out = y.copy()
        out[:, i1] = (y[:, i1] * cos + y[:, i2] * sin) / norm
        out[:, i2] = (y[:, i2] * cos - y[:, i1] * sin) / norm
        return out

    def same_planes(self, other: Rotation) -> bool:
        """Whether two layouts turn the same coordinate pairs (one plane: half and interleaved coincide)."""
        if (self.pairing is None) != (other.pairing is None):
            return False
        if self.pairing is None:
            return True
        a, b = self.planes(), other.planes()
        return (self.deinterleave == other.deinterleave and self.dims == other.dims
                and {tuple(p) for p in zip(*a)} == {tuple(p) for p in zip(*b)})

    def describe(self) -> str:
        if self.pairing is None:
            return "no rotation"
        where = f"dims {self.offset}–{self.offset + self.dims - 1}"
        extra = ", input de-interleaved" if self.deinterleave else ""
        return f"{self.pairing} pairing on {where}{extra}"


NO_ROTATION = Rotation(None)


def candidates(d: int, r: int) -> list[Rotation]:
    """Every layout qkdb knows for ``r`` rotated dims of a ``d``-dimensional head (no rotation first)."""
    out = [NO_ROTATION]
    for offset in sorted({0, d - r}):
        out += [Rotation("half", r, offset), Rotation("interleaved", r, offset), Rotation("half", r, offset, True)]
    return out


@dataclass
class CosSin:
    """A layer's cos/sin for one text, read from what its attention module was called with.

    ``cos``/``sin`` (n_kept, dims/2) hold one column per plane at the kept positions (amplitude
    included); ``omega`` (dims/2,) the frequencies they carry (rad/token); ``layout`` how the model
    laid them out (``cat``: ``cat(f, f)``; ``repeat``: ``repeat_interleave(f, 2)``; ``planes``: one
    column per plane; ``complex``: one complex tensor), ``swapped`` whether they came as (sin, cos).
    ``eps`` is the machine epsilon of the dtype they came in (float32, or bfloat16/float16 when the
    model computes in it) and ``omega_error`` the absolute error of ``omega`` that dtype allows
    (0 for float32). :meth:`at` gives them at any position they were read at.
    """

    layout: str
    swapped: bool
    dims: int
    cos: np.ndarray
    sin: np.ndarray
    omega: np.ndarray | None
    amplitude: float
    eps: float = float(np.finfo(np.float32).eps)
    omega_error: float = 0.0
    table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (positions, cos, sin) of every row read

    def describe(self) -> str:
        form = {"cat": "cat(f, f)", "repeat": "repeat_interleave(f, 2)", "planes": "one column per plane",
                "complex": "one complex tensor (cos + i·sin)"}[self.layout]
        return f"{form}{', given as (sin, cos)' if self.swapped else ''}"

    def at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) (n, dims/2) at ``positions``, which must be among the rows read."""
        rows, cos, sin = self.table
        i = np.searchsorted(rows, positions)
        if np.any(i >= len(rows)) or np.any(rows[np.minimum(i, len(rows) - 1)] != positions):
            raise ValueError("cos/sin were not read at these positions")
        return cos[i], sin[i]


class NotRoPE(ValueError):
    """The position embeddings a layer is given are not a rotation qkdb can read (one line why)."""


@dataclass
class GatheredPE:
    """A layer's position embeddings at some positions: the two parts (cos and sin, or real and imaginary).

    Gathered on the device during the forward pass (:func:`gather_pe`); read on the host
    (:func:`interpret_pe`) once :meth:`host` has them there.
    """

    a: object  # tensor (n_rows, w)
    b: object
    complex: bool
    eps: float

    def tensors(self) -> list:
        return [self.a, self.b]

    def with_tensors(self, tensors: list) -> GatheredPE:
        return GatheredPE(tensors[0], tensors[1], self.complex, self.eps)


def _rows_of(t, rows, seq_len: int):
    """Rows ``rows`` (an int64 tensor) of a (…, seq, w) tensor whose leading dims are 1, as float32 (n, w)."""
    arr = t.detach()
    if arr.dim() < 2 or arr.shape[-2] != seq_len or arr[..., 0, 0].numel() != 1:
        raise NotRoPE(f"position embeddings of shape {tuple(arr.shape)} for a text of {seq_len} tokens")
    flat = arr.reshape(seq_len, arr.shape[-1])
    return flat.index_select(0, rows.to(flat.device, non_blocking=True)).float()


def gather_pe(pe, rows, seq_len: int) -> GatheredPE:
    """A layer's ``position_embeddings`` at ``rows`` (an int64 tensor of positions), still where they are.

    Raises
    ------
    NotRoPE
        When they are neither a (cos, sin) pair of tensors of one shape nor one complex tensor.
    """
    import torch

    if isinstance(pe, torch.Tensor) and pe.is_complex():
        full = pe.detach()
        eps = float(torch.finfo(full.real.dtype).eps)
        return GatheredPE(_rows_of(full.real, rows, seq_len), _rows_of(full.imag, rows, seq_len), True, eps)
    if isinstance(pe, (tuple, list)) and len(pe) == 2 and all(isinstance(p, torch.Tensor) for p in pe):
        if pe[0].shape != pe[1].shape:
            raise NotRoPE(f"position embeddings of shapes {tuple(pe[0].shape)} and {tuple(pe[1].shape)}")
        eps = float(torch.finfo(pe[0].dtype).eps) if pe[0].is_floating_point() else 0.0
        return GatheredPE(_rows_of(pe[0], rows, seq_len), _rows_of(pe[1], rows, seq_len), False, eps)
    raise NotRoPE(f"position embeddings of type {type(pe).__name__}")


def _wrap(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2.0 * np.pi) - np.pi


def pe_rows(kept: np.ndarray, seq_len: int) -> np.ndarray:
    """The positions :func:`interpret_pe` needs besides ``kept``: 0 (the amplitude) and 1 (the frequencies)."""
    return np.unique(np.concatenate([[0], np.asarray(kept, np.int64), [1] if seq_len > 1 else []]).astype(np.int64))


def read_cos_sin(pe, kept: np.ndarray, seq_len: int) -> CosSin:
    """Read a layer's ``position_embeddings`` at the kept positions (sorted) of a ``seq_len``-token text.

    :func:`gather_pe` then :func:`interpret_pe`, in one step.
    """
    import torch

    rows = pe_rows(kept, seq_len)
    g = gather_pe(pe, torch.as_tensor(rows), seq_len)
    return interpret_pe(g.with_tensors([t.cpu().numpy() for t in g.tensors()]), rows, kept, seq_len)


def interpret_pe(g: GatheredPE, rows: np.ndarray, kept: np.ndarray, seq_len: int) -> CosSin:
    """The :class:`CosSin` of gathered position embeddings (numpy parts, at ``rows`` = :func:`pe_rows` ⊇ ``kept``).

    Tolerances follow the dtype the embeddings came in: float32's are those below; bfloat16 and
    float16 round cos and sin to 2⁻⁸ and 2⁻¹¹, so amplitude and angle may be off by twice their epsilon.

    Raises
    ------
    NotRoPE
        When they are not a per-position rotation: neither of the pair is zero at position 0,
        the amplitude varies, or the angles are not position × frequency.
    """
    a, b = np.asarray(g.a, np.float64), np.asarray(g.b, np.float64)
    rows = np.asarray(rows, np.int64)
    tol = max(1e-5, 2.0 * g.eps)
    if g.complex:
        layout, swapped = "complex", False
    else:
        layout = None
        # at position 0 every angle is 0: cos is the amplitude, sin is 0
        swapped = bool(np.all(a[0] == 0.0) and np.any(b[0] != 0.0))
        if swapped:
            a, b = b, a
    if rows[0] != 0:
        raise ValueError("position embeddings must be read at position 0")
    if np.any(b[0] != 0.0) or np.any(a[0] == 0.0):
        raise NotRoPE("position embeddings that are not cos/sin of angle 0 at position 0")
    w = a.shape[1]
    amplitude = float(a[0, 0])
    if not np.allclose(a[0], amplitude, rtol=max(1e-6, g.eps), atol=0.0):
        raise NotRoPE("cos/sin whose amplitude differs between columns")
    c, s = a, b
    if layout is None:
        if seq_len < 2:  # one token: no angle to tell the layouts apart; the rows decide alone
            layout = "cat"
        else:
            ang = np.arctan2(s[rows == 1][0], c[rows == 1][0])
            h = w // 2
            if w % 2 == 0 and np.allclose(ang[:h], ang[h:], rtol=1e-6, atol=1e-12) \
                    and np.array_equal(c[:, :h], c[:, h:]) and np.array_equal(s[:, :h], s[:, h:]):
                layout = "cat"
            elif w % 2 == 0 and np.allclose(ang[0::2], ang[1::2], rtol=1e-6, atol=1e-12) \
                    and np.array_equal(c[:, 0::2], c[:, 1::2]) and np.array_equal(s[:, 0::2], s[:, 1::2]):
                layout = "repeat"
            else:
                layout = "planes"
    if layout == "cat":
        c, s, dims = c[:, :w // 2], s[:, :w // 2], w
    elif layout == "repeat":
        c, s, dims = c[:, 0::2], s[:, 0::2], w
    else:
        dims = 2 * w
    radius = np.sqrt(c * c + s * s)
    if np.max(np.abs(radius - amplitude)) > tol * amplitude:
        raise NotRoPE(f"cos/sin whose amplitude varies with position (from {radius.min():.6g} to {radius.max():.6g})")
    omega = None
    omega_error = 0.0
    if seq_len > 1:
        theta = np.arctan2(s, c)
        omega = theta[rows == 1][0].copy()
        # refine at the largest kept position: |T · error| stays far below π
        t_max = int(rows[-1])
        if t_max > 1:
            omega = omega + _wrap(theta[-1] - t_max * omega) / t_max
        off = np.abs(_wrap(theta - rows[:, None] * omega[None, :]))
        allowed = tol + 1e-6 * rows[:, None] * omega[None, :]
        if np.any(off > allowed):
            i, j = np.unravel_index(int(np.argmax(off - allowed)), off.shape)
            raise NotRoPE(f"cos/sin whose angle at position {int(rows[i])} is not position × frequency "
                          f"(plane {j}: off by {off[i, j]:.3g} rad)")
        if g.eps > 1e-6:  # half-precision cos/sin: the angle is known to ~tol, the frequency to tol / t_max
            omega_error = tol / max(t_max, 1)
    at = np.searchsorted(rows, kept)
    return CosSin(layout, swapped, dims, c[at], s[at], omega, amplitude, eps=max(g.eps, 0.0),
                  omega_error=omega_error, table=(rows, c, s))


class FrequencySource:
    """Where a layer's frequencies come from, most exact first: the model's buffers, its config, float32 cos/sin.

    1. The model's ``*inv_freq`` buffers (and ``*attention_scaling`` values), read when asked
       (longrope and dynamic scaling rewrite them for each text's length): the frequencies as its
       rotary module computed them.
    2. Without such a buffer (GPT-J keeps a sin/cos table), the **config**: ``rope_theta`` (and
       ``rope_scaling``) over the rotated dims, or transformers' default base 10,000 where the config
       gives none — used only when it explains the measured frequencies within the cos/sin's precision.
    3. Otherwise, in a half-precision capture, the model's rotary module run again in **float32** at
       positions 0, 1 and the text's last (its cos/sin before the cast to the compute dtype), so that
       the planes are exact in every compute dtype.

    Parameters
    ----------
    model
        The loaded model.
    config_rope : list of (str, float, dict or None), optional
        ``(label, rope_theta, rope_scaling)`` candidates from the config (:func:`config_candidates`).
    """

    def __init__(self, model, config_rope: list | None = None) -> None:
        self.buffers: list[tuple[str, object, str]] = []
        self.scalings: list[tuple[str, float]] = []
        self.rotary: list[tuple[str, object]] = []
        self.config_rope = list(config_rope or [])
        self._float32: dict = {}  # (rotary module, positions) -> CosSin or None: run once per text length
        for name, module in model.named_modules():
            for bname, _ in module.named_buffers(recurse=False):
                if bname.endswith("inv_freq") and "original" not in bname:
                    self.buffers.append((f"{name}.{bname}" if name else bname, module, bname))
            if type(module).__name__.endswith("RotaryEmbedding"):  # transformers' naming of rotary modules
                self.rotary.append((name, module))
            if any(m is module for _, m, _ in self.buffers):
                for attr in dir(module):
                    if attr.endswith("attention_scaling"):
                        value = getattr(module, attr, None)
                        if isinstance(value, (int, float)) and not isinstance(value, bool):
                            self.scalings.append((f"{name}.{attr}" if name else attr, float(value)))

    def frequencies(self, omega: np.ndarray, error: float = 0.0,
                    positions: np.ndarray | None = None) -> tuple[np.ndarray, str | None]:
        """The most exact frequencies equal to ``omega`` (to :data:`SNAP_TOLERANCE`, relative, beyond ``error``,
        absolute) and where they come from, else ``omega`` and None. ``error`` is what half-precision cos/sin
        leave unknown (:class:`CosSin`); ``positions`` the positions they were read at (the float32 re-run's)."""
        best, best_diff = None, SNAP_TOLERANCE
        for name, module, bname in self.buffers:
            values = getattr(module, bname, None)
            if values is None or values.numel() != omega.size:
                continue
            v = values.detach().double().cpu().numpy().ravel()
            diff = _snap_difference(v, omega, error)
            if diff <= best_diff:
                best, best_diff = (v, name), diff
        if best is not None:
            return best
        found = self._from_config(omega, error)
        if found is None and error > 0 and positions is not None:
            found = self._from_float32(omega, error, positions)
        return found if found is not None else (omega, None)

    def _from_config(self, omega: np.ndarray, error: float):
        from qkdb.errors import InputError
        from qkdb.ingest.metrics.rope_planes import rope_frequencies

        for label, theta, scaling in self.config_rope:
            try:
                # in float32, as the model's rotary code computes its frequencies
                v = rope_frequencies(2 * omega.size, theta, scaling).astype(np.float32).astype(np.float64)
            except InputError:  # (a length-dependent scaling: not a formula of the config alone)
                continue
            if _snap_difference(v, omega, error) <= SNAP_TOLERANCE:
                return v, f"{label} over {2 * omega.size} rotated dims (explains the cos/sin given to attention)"
        return None

    def _from_float32(self, omega: np.ndarray, error: float, positions: np.ndarray):
        """The rotary module's own cos/sin recomputed in float32, if one of them gives ``omega`` within ``error``."""
        t_max = int(np.max(positions))
        rows = np.unique(np.asarray([0, 1, t_max], np.int64))
        for name, module in self.rotary:
            key = (name, t_max)
            if key not in self._float32:
                self._float32[key] = self._run_float32(module, rows, t_max)
            cs = self._float32[key]
            if cs is not None and cs.omega is not None and cs.omega.shape == omega.shape \
                    and np.all(np.abs(cs.omega - omega) <= error + SNAP_TOLERANCE * np.abs(omega)):
                return cs.omega, f"{name} recomputed in float32 (the cos/sin before the cast to the compute dtype)"
        return None

    @staticmethod
    def _run_float32(module, rows: np.ndarray, t_max: int):
        """A rotary module's (cos, sin) at positions ``rows``, run on a float32 copy of it (None when it cannot run so)."""
        import copy

        import torch

        eps = float(np.finfo(np.float32).eps)
        try:
            twin = copy.deepcopy(module).float()
            device = next(iter(twin.buffers()), torch.zeros(0)).device
            x = torch.zeros((1, len(rows), 1), dtype=torch.float32, device=device)
            with torch.no_grad():
                out = twin(x, torch.as_tensor(rows, device=device)[None])
            complex_ = isinstance(out, torch.Tensor) and out.is_complex()
            parts = (out.real, out.imag) if complex_ else tuple(out)
            a, b = (p.detach().reshape(len(rows), -1).float().cpu().numpy() for p in parts)
            return interpret_pe(GatheredPE(a, b, complex_, eps), rows, rows, t_max + 1)
        except Exception:  # noqa: BLE001 - a module that cannot run alone like this is simply not a source
            return None

    def amplitude(self, measured: float, frequencies_from: str | None = None,
                  eps: float = 0.0) -> tuple[float, str | None]:
        """The module's attention scaling equal to ``measured`` (to :data:`AMPLITUDE_TOLERANCE`, or the
        cos/sin dtype's ``eps`` when larger), else ``measured``.

        Among equal ones, the one beside the frequencies' buffer (Gemma3's ``full_attention_…``).
        """
        prefix = frequencies_from[:-len("inv_freq")] if frequencies_from and frequencies_from.endswith("inv_freq") \
            else None
        tol = max(AMPLITUDE_TOLERANCE, eps if eps > 1e-6 else 0.0)
        found = [(name, value) for name, value in self.scalings
                 if abs(value - measured) <= tol * max(abs(value), 1.0)]
        found.sort(key=lambda nv: not (prefix is not None and nv[0] == prefix + "attention_scaling"))
        return (found[0][1], found[0][0]) if found else (measured, None)


def _snap_difference(values: np.ndarray, omega: np.ndarray, error: float) -> float:
    """The largest relative difference of ``omega`` from ``values`` beyond the absolute ``error`` it may carry."""
    return float(np.max(np.maximum(np.abs(values - omega) - error, 0.0) / np.maximum(np.abs(values), 1e-300)))


def config_candidates(rope_theta: float | None, rope_scaling: dict | None, layer_thetas=None, layer_scalings=None,
                      declared: bool = True) -> list[tuple[str, float, dict | None]]:
    """The config's RoPE bases as :class:`FrequencySource` candidates: ``(label, theta, scaling)``.

    The global base and each layer's; transformers' default base 10,000 where the config declares none
    (GPT-J's rotary code uses it without a config field).
    """
    out = []
    pairs = [(rope_theta, rope_scaling)] + list(zip(layer_thetas or (), layer_scalings or [None] * len(layer_thetas or ())))
    for theta, scaling in pairs:
        if theta is not None:
            label = f"the config's rope_theta {theta:g}" + (f" with its {scaling.get('rope_type', scaling.get('type'))} "
                                                            "scaling" if scaling else "")
            out.append((label, float(theta), scaling))
    if rope_theta is None or not declared:
        out.append(("transformers' default rope_theta 10000 (the config declares none)", 10000.0, None))
    unique, seen = [], set()
    for label, theta, scaling in out:
        key = (theta, repr(scaling))
        if key not in seen:
            seen.add(key)
            unique.append((label, theta, scaling))
    return unique

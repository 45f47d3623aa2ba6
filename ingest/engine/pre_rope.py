"""A ``--pre-rope`` capture turned into the vectors attention received, with the RoPE its capture recorded.

Every table of the warehouse describes post-RoPE queries and keys (SPEC §4): ``rope_planes``
undoes RoPE to measure phase locking, ``rotation.omega`` is the frequency of the most coherent
rotating plane, the complement's rings are RoPE's shared rotation. Ingested as they are, the
vectors a ``qkdb sniff --pre-rope`` capture stores would swap the meaning of those columns
without a word (``coherence_q`` would read like ``raw_coherence_q``, no plane would rotate). The
capture records what each layer applied — the pairing and rotated slice it established from the
model's own rows, each layer's frequencies (``rope_inv_freq``, ``layer_rope_inv_freq``) and the
cos/sin amplitude (``rope_attention_factor``, ``layer_rope_attention_factor``), and which layers
apply none (``nope_layers``) — and positions are stored with every vector, so the ingest rotates
each vector by ``t · ω_j`` in float64 and the tables mean what they mean for any capture
(docs/rotation-planes.md, "Pre-RoPE captures"). A pre-RoPE dataset without that record cannot
be rotated exactly and is refused: a formula the model may not have run is a guess.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkdb.errors import InputError
from qkdb.ingest.engine.plane_layout import layer_layout

Rotate = Callable[[np.ndarray, np.ndarray], np.ndarray]


def apply_rope(x: np.ndarray, t: np.ndarray, *, pairing: str, offset: int, dims: int, omega: np.ndarray,
               amplitude: float = 1.0) -> np.ndarray:
    """Rows ``x`` (n, d) rotated by RoPE at positions ``t``: plane j turned by ``t · ω_j``, scaled by ``amplitude``.

    Parameters
    ----------
    x : ndarray of shape (n, d)
        Pre-rotation vectors.
    t : ndarray of shape (n,)
        Their token positions.
    pairing : {'half', 'interleaved'}
        Plane j pairs dims ``(offset + j, offset + j + dims/2)`` or ``(offset + 2j, offset + 2j + 1)``.
    offset, dims : int
        The rotated slice ``[offset, offset + dims)``; the other dims are returned unchanged.
    omega : ndarray of shape (dims/2,)
        Each plane's frequency (rad/token).
    amplitude : float
        The cos/sin amplitude (YaRN's attention factor; 1 for plain RoPE), applied to the rotated dims only.

    Returns
    -------
    ndarray of shape (n, d), float64
    """
    x = np.asarray(x, dtype=np.float64)
    omega = np.asarray(omega, dtype=np.float64)
    if pairing not in ("half", "interleaved"):
        raise ValueError(f"pairing must be 'half' or 'interleaved', got {pairing!r}")
    if dims % 2 or omega.shape != (dims // 2,) or offset < 0 or offset + dims > x.shape[1]:
        raise ValueError(f"RoPE over dims [{offset}, {offset + dims}) with {omega.size} frequencies does not fit "
                         f"vectors of {x.shape[1]} dims")
    j = np.arange(dims // 2)
    i1, i2 = (offset + j, offset + j + dims // 2) if pairing == "half" else (offset + 2 * j, offset + 2 * j + 1)
    angle = np.asarray(t, dtype=np.float64)[:, None] * omega[None, :]
    cos, sin = amplitude * np.cos(angle), amplitude * np.sin(angle)
    out = x.copy()
    out[:, i1] = x[:, i1] * cos - x[:, i2] * sin
    out[:, i2] = x[:, i2] * cos + x[:, i1] * sin
    return out


def check_pre_rope(spec) -> list[str]:
    """Refuse, once and before any file is read, a pre-RoPE capture whose RoPE was not recorded; the note to say.

    Returns
    -------
    list of str
        One note for a pre-RoPE capture (its vectors are rotated at ingest), none otherwise.

    Raises
    ------
    InputError
        When the capture stored pre-RoPE vectors but did not record the pairing and frequencies
        its model applied.
    """
    if not spec.pre_rope:
        return []
    if spec.rope == "none":
        return [f"{spec.model}: captured before RoPE (--pre-rope), but its model applies none: its vectors are "
                "what attention received"]
    if spec.rope_pairing is None or spec.rope_inv_freq is None:
        missing = "the pairing" if spec.rope_pairing is None else "the frequencies (rope_inv_freq)"
        raise InputError(
            f"model {spec.model}: its capture stored vectors before RoPE (capture.pre_rope) but did not record "
            f"{missing} its model applied, so they cannot be rotated to what attention received; every "
            "positional metric would describe other vectors. Capture it again without --pre-rope, or with a "
            "qkdb sniff that records its RoPE"
        )
    return [f"{spec.model}: captured before RoPE (--pre-rope): the ingest rotates every vector by the RoPE its "
            "capture recorded (pairing, slice, each layer's frequencies and amplitude; NoPE layers as they are), "
            "so its tables describe what attention received (models.pre_rope; docs/rotation-planes.md)"]


def layer_rotation(spec, layer: int, head_dim: int) -> Rotate | None:
    """The function turning one layer's stored pre-RoPE rows into post-RoPE rows; None when nothing turns.

    None for a post-RoPE capture, a model without RoPE, and the capture's NoPE layers.
    """
    if not spec.pre_rope or spec.rope == "none" or layer in spec.nope_layers:
        return None
    layout = layer_layout(spec, layer, head_dim)
    if layout is None or layout.source != "recorded":
        raise InputError(f"model {spec.model}: layer {layer}'s RoPE was not recorded by its capture; its pre-RoPE "
                         "vectors cannot be rotated to what attention received")
    per_layer = spec.layer_rope_attention_factor
    amplitude = per_layer[layer] if per_layer is not None and layer < len(per_layer) else None
    if amplitude is None:
        amplitude = spec.rope_attention_factor if spec.rope_attention_factor is not None else 1.0
    omega = np.asarray(layout.omega, dtype=np.float64)

    def rotate(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return apply_rope(x, t, pairing=layout.pairing, offset=layout.offset, dims=layout.dims, omega=omega,
                          amplitude=float(amplitude))

    return rotate

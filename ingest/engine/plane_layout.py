"""Which head dims RoPE turns, how they pair up, and at which frequencies: one layer's RoPE layout.

``rope_planes`` (SPEC §4.3) is exact only where the layout is: the pairing (rotate-half or
interleaved), the rotated slice (partial rotary turns the first ``r`` dims; MLA the last ones) and
each plane's frequency. This module decides them from a model's facts, in this order, and never
guesses:

1. **recorded** — a ``qkdb sniff`` capture records what the model's rotary module applied
   (``rope_inv_freq``, per layer where layers differ, with the pairing and the rotated slice it
   established from the model's own rows): used as they are, and options that would give other
   frequencies or another pairing are refused;
2. **derived** — from ``rope_theta`` and ``rope_scaling`` (the registry's, the dataset's or the
   options'): ``ω_j = θ^(−2j/r)`` over the ``r`` rotated dims, rescaled as transformers does
   (linear, llama3, YaRN);
3. **fitted** — when neither is known, or the scaling makes the frequencies depend on the
   sequence's length (longrope, dynamic NTK) and nothing recorded which were used: each plane's ω
   is fitted from the data (``omega_source = 'fitted'``), never computed from a formula the model
   did not run.

A capture that could not establish the pairing records none: such a model gets no RoPE planes
(said once), rather than planes on coordinates RoPE may not pair.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import numpy as np

from qkdb.errors import InputError
from qkdb.ingest.metrics.rope_planes import SCALING_TYPES, parse_rope_scaling, rope_frequencies
from qkdb.ingest.sources.trained_context import original_length

# rope_planes.omega agrees with a recorded frequency to this relative difference (float32 inv_freq
# round trips through JSON as float64: ~6e-8)
SAME_FREQUENCY = 1e-6


@dataclass(frozen=True)
class RopeLayout:
    """One layer's RoPE, as :func:`qkdb.ingest.metrics.rope_planes.rope_planes` takes it."""

    pairing: str
    offset: int  # first rotated dim
    dims: int  # rotated dims r (even)
    omega: tuple[float, ...] | None  # (r/2,) rad/token; None: fitted per plane
    source: str  # 'recorded', 'derived' or 'fitted'

    def planes_kwargs(self) -> dict:
        return {
            "pairing": self.pairing, "rotary_dims": self.dims, "rotary_offset": self.offset,
            "omega": None if self.omega is None else np.asarray(self.omega, dtype=np.float64),
        }


def rotated_dims(spec, head_dim: int) -> int:
    """The number of dims RoPE turns: recorded, else an older capture's ``partial_rotary_factor``, else all."""
    if spec.rotary_dims is not None:
        return int(spec.rotary_dims)
    factor = (parse_rope_scaling(spec.rope_scaling) or {}).get("partial_rotary_factor")
    if factor not in (None, 1, 1.0):
        # transformers: int(head_dim * partial_rotary_factor) (GPT-NeoX's rotary_pct likewise)
        return int(head_dim * float(factor))
    return head_dim


def _length_dependent(scaling: str | None) -> str | None:
    cfg = parse_rope_scaling(scaling) or {}
    kind = cfg.get("rope_type", cfg.get("type", "default"))
    return None if kind in SCALING_TYPES else str(kind)


def layer_layout(spec, layer: int, head_dim: int) -> RopeLayout | None:
    """The RoPE layout of ``layer`` for heads of ``head_dim``; None when the model has no RoPE planes.

    None for a model without RoPE (``rope = 'none'``), for a capture that could not establish
    its pairing, and for heads of odd width whose rotated slice nobody recorded. NoPE layers of a RoPE model get the model's layout: their planes are the control.

    Raises
    ------
    InputError
        When the recorded slice does not fit the head, or recorded frequencies do not match it.
    """
    if spec.rope == "none" or spec.rope_pairing is None:
        return None
    r = rotated_dims(spec, head_dim)
    if spec.rotary_dims is None and r == head_dim and head_dim % 2:
        return None  # an odd width with no recorded slice: no planes (the engine notes it per head)
    off = int(spec.rotary_offset or 0)
    if r < 2 or r % 2 or off < 0 or off + r > head_dim:
        raise InputError(
            f"model {spec.model}: RoPE over dims [{off}, {off + r}) does not fit its {head_dim}-dimensional heads"
        )
    recorded = spec.rope_inv_freq
    if spec.layer_rope_inv_freq is not None and layer < len(spec.layer_rope_inv_freq):
        recorded = spec.layer_rope_inv_freq[layer] or spec.rope_inv_freq
    if recorded is not None:
        if len(recorded) != r // 2:
            raise InputError(
                f"model {spec.model}: {len(recorded)} recorded RoPE frequencies for {r} rotated dims "
                f"(expected {r // 2}, one per plane)"
            )
        return RopeLayout(spec.rope_pairing, off, r, tuple(float(w) for w in recorded), "recorded")
    theta, scaling = _layer_rope(spec, layer)
    if theta is None or _length_dependent(scaling):
        return RopeLayout(spec.rope_pairing, off, r, None, "fitted")
    omega = rope_frequencies(r, theta, scaling)
    return RopeLayout(spec.rope_pairing, off, r, tuple(float(w) for w in omega), "derived")


def _layer_rope(spec, layer: int) -> tuple[float | None, str | None]:
    """The RoPE base and scaling of ``layer``: its own where the layers differ (Gemma3), else the model's."""
    if spec.layer_rope_theta is not None and layer < len(spec.layer_rope_theta):
        return spec.layer_rope_theta[layer], (spec.layer_rope_scaling[layer] if spec.layer_rope_scaling
                                              and layer < len(spec.layer_rope_scaling) else None)
    return spec.rope_theta, spec.rope_scaling


def trained_frequencies(spec, layer: int, head_dim: int) -> tuple[float, ...] | None:
    """The frequencies ``layer``'s planes were trained with over ``spec.trained_context``, where they are not
    the ones applied: under a scaled RoPE whose original length is the trained context, the base
    frequencies ``θ^(−2j/r)`` (Liu et al.'s critical dimension is theirs). None: the applied ones."""
    theta, scaling = _layer_rope(spec, layer)
    original = original_length(scaling)
    if theta is None or original is None or original != spec.trained_context:
        return None
    return tuple(float(w) for w in rope_frequencies(rotated_dims(spec, head_dim), theta))


def model_layouts(spec, head_dim: int) -> list[RopeLayout | None]:
    """Every layer's layout (the model's layers, or the layers its facts describe)."""
    n = spec.n_layers or max(len(spec.layer_rope_theta or ()), len(spec.layer_rope_inv_freq or ()), 1)
    return [layer_layout(spec, layer, head_dim) for layer in range(n)]


def check_rope(spec, options) -> list[str]:
    """Refuse unusable RoPE facts once, up front (not once per head), and say what the user should know.

    Returns
    -------
    list of str
        One note per thing worth knowing: frequencies that will be fitted because the scaling
        depends on the sequence's length, a pairing the capture could not establish.
    """
    if not options.complement or spec.rope == "none":
        return []
    notes = []
    if spec.rope_pairing is None:
        notes.append(
            f"{spec.model}: its capture could not establish how RoPE pairs the head's dims (recorded as "
            "rope_pairing null, e.g. captured --unchecked): no RoPE planes are computed; give "
            "--rope-pairing half|interleaved if you know it"
        )
        return notes
    if spec.rope_inv_freq is not None:
        return notes
    thetas = [(spec.rope_theta, spec.rope_scaling)]
    thetas += list(zip(spec.layer_rope_theta or (), spec.layer_rope_scaling or ()))
    for theta, scaling in dict.fromkeys(thetas):
        kind = _length_dependent(scaling)
        if theta is None:
            notes.append(
                f"{spec.model}: no rope_theta is known and no capture recorded its frequencies: rope_planes fits "
                "each plane's frequency (omega_source 'fitted'), within ~2% for planes that turn at least once over "
                "the captured positions but 13–51% off for slower ones (docs/rotation-planes.md); give --rope-theta "
                "if you know it"
            )
        elif kind is None:
            rope_frequencies(2, theta, scaling)  # a malformed scaling: refused here, once
        else:
            notes.append(
                f"{spec.model}: rope_scaling of type {kind!r} makes RoPE's frequencies depend on the text's "
                "length and no capture recorded which were used: rope_planes fits each plane's frequency "
                "(omega_source 'fitted')"
            )
    return list(dict.fromkeys(notes))


def reconcile_options(spec, options, metadata: dict):
    """Options against what a capture recorded: the recorded frequencies and pairing win, contradictions are refused.

    ``--rope-theta`` / ``--rope-scaling`` given for a capture that recorded its frequencies must give
    the same ones (they then change nothing); ``--rope-pairing`` must equal a pairing the capture
    established. Without recorded frequencies, options replace the capture's per-layer RoPE.
    """
    given = options.rope_theta is not None or options.rope_scaling is not None
    recorded_pairing = metadata.get("rope_pairing") if "rope_inv_freq" in metadata else None
    if options.rope_pairing is not None and recorded_pairing and options.rope_pairing != recorded_pairing:
        raise InputError(
            f"model {spec.model}: its capture established rope_pairing {recorded_pairing!r} from the model's own "
            f"rows; --rope-pairing {options.rope_pairing} contradicts it (drop the option)"
        )
    if not given:
        return spec
    if spec.rope_inv_freq is None:
        # RoPE given for the whole model replaces the capture's per-layer RoPE.
        return replace(spec, layer_rope_theta=None, layer_rope_scaling=None)
    recorded = np.asarray(spec.rope_inv_freq, dtype=np.float64)
    r = 2 * len(recorded)
    theta = spec.rope_theta
    kind = _length_dependent(spec.rope_scaling)
    flag = " and ".join(f for f, v in (("--rope-theta", options.rope_theta), ("--rope-scaling", options.rope_scaling))
                        if v is not None)
    if theta is None or kind:
        why = "no rope_theta" if theta is None else f"a {kind!r} scaling, whose frequencies depend on the length"
        raise InputError(
            f"model {spec.model}: its capture recorded the frequencies the model applied; {flag} ({why}) cannot "
            "reproduce them: drop the option"
        )
    derived = rope_frequencies(r, theta, spec.rope_scaling)
    worst = int(np.argmax(np.abs(derived - recorded) / np.maximum(recorded, 1e-300)))
    if abs(derived[worst] - recorded[worst]) > SAME_FREQUENCY * recorded[worst]:
        raise InputError(
            f"model {spec.model}: its capture recorded the frequencies the model applied; {flag} would give others "
            f"(plane {worst}: {derived[worst]:.6g} instead of the recorded {recorded[worst]:.6g} rad/token): drop "
            "the option"
        )
    return spec


def layout_columns(layouts: list[RopeLayout | None]) -> dict:
    """What ``models`` records of the layouts used: the slice, the frequencies, and where they came from.

    ``rope_inv_freq`` holds the frequencies of the first layer with RoPE; ``layer_rope_inv_freq`` every
    layer's when they differ (NULL entries: fitted).
    """
    used = [lay for lay in layouts if lay is not None]
    if not used:
        return {"rotary_dims": None, "rotary_offset": None, "rope_source": None, "rope_inv_freq": None,
                "layer_rope_inv_freq": None}
    first = used[0]
    freqs = [None if lay is None or lay.omega is None else list(lay.omega) for lay in layouts]
    differ = len({json.dumps(f) for f in freqs}) > 1
    return {
        "rotary_dims": first.dims,
        "rotary_offset": first.offset,
        "rope_source": first.source,
        "rope_inv_freq": None if first.omega is None else list(first.omega),
        "layer_rope_inv_freq": freqs if differ else None,
    }


def same_layouts(a: list[RopeLayout | None], b: list[RopeLayout | None]) -> bool:
    """Whether two models' layer layouts give the same RoPE planes (frequencies to :data:`SAME_FREQUENCY`)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        if (x.pairing, x.offset, x.dims, x.omega is None) != (y.pairing, y.offset, y.dims, y.omega is None):
            return False
        if x.omega is not None and not all(
            math.isclose(u, v, rel_tol=SAME_FREQUENCY, abs_tol=0.0) for u, v in zip(x.omega, y.omega)
        ):
            return False
    return True

"""The RoPE facts a ``qkdb sniff`` capture records in ``qkdb_dataset.json``, from what its layers did.

:class:`~qkdb.ingest.capture.sniff_recorder.Recorder` establishes each captured layer's rotation,
frequencies, amplitude and attention scale (:class:`~qkdb.ingest.capture.sniff_recorder.LayerRope`);
:func:`rope_facts` turns them into the top-level keys the ingest reads (``rope``, ``rope_pairing``,
``rotary_dims``, ``rotary_offset``, ``rope_inv_freq``, ``layer_rope_inv_freq``,
``rope_attention_factor``, ``attention_scale``, ``layer_attention_scale``, ``nope_layers``) and the
provenance in ``capture.rope`` / ``capture.attention``. Nothing here is read from the config
except to say which longrope factor set the recorded frequencies are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qkdb.ingest.capture.rope_layout import SNAP_TOLERANCE


@dataclass
class RopeFacts:
    top: dict
    rope: dict
    attention: dict
    notes: list[str] = field(default_factory=list)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and np.allclose(a, b, rtol=1e-7, atol=0.0)


def _common(values: list):
    """The most common value (first seen on ties); values compared with :func:`_same`."""
    groups: list[list] = []
    for v in values:
        for g in groups:
            if _same(g[0], v) if isinstance(v, np.ndarray) else g[0] == v:
                g.append(v)
                break
        else:
            groups.append([v])
    return max(groups, key=len)[0] if groups else None


def _per_layer(values: dict[int, object], chosen, n_layers: int, to_json) -> list | None:
    """One entry per layer when some layer differs from ``chosen``, else None."""
    differs = any(not (_same(v, chosen) if isinstance(v, np.ndarray) else v == chosen) for v in values.values())
    if not differs:
        return None
    return [to_json(values[l]) if l in values else None for l in range(n_layers)]


def _floats(v):
    return None if v is None else [float(x) for x in np.asarray(v, np.float64)]


def rope_facts(recorder, n_layers: int, config_nope: list[int], rope_parameters: dict, text_lengths) -> RopeFacts:
    """The RoPE keys of ``qkdb_dataset.json`` from the layers a capture saw.

    Parameters
    ----------
    recorder : Recorder
        After the forward passes.
    n_layers : int
        The model's layers (per-layer lists have one entry each; layers without a captured head: null).
    config_nope : list of int
        The config's NoPE layers (used for layers the capture did not reach).
    rope_parameters : dict
        The config's (global layers') RoPE parameters, to name a longrope factor set.
    text_lengths : sequence of int
        The texts' lengths in tokens.
    """
    states = recorder.rope
    notes: list[str] = []
    rotating = {l: s for l, s in states.items() if s.rotation is not None and s.rotation.pairing is not None}
    still = {l for l, s in states.items() if s.rotation is not None and s.rotation.pairing is None}
    unknown = {l: s for l, s in states.items() if s.rotation is None}
    given = {l for l, s in unknown.items() if s.cos_sin is not None}
    rope = "rotary" if rotating or given else "none"

    if rope == "none":
        nope = list(range(n_layers))
    else:
        nope = sorted((set(config_nope) - set(rotating) - set(still)) | still)
        contradict_rope = sorted(set(rotating) & set(config_nope))
        contradict_nope = sorted(still - set(config_nope))
        if contradict_rope:
            notes.append(f"layers {_list(contradict_rope)} apply RoPE although the config lists them as NoPE layers: "
                         "recorded as the model does it")
        if contradict_nope:
            notes.append(f"layers {_list(contradict_nope)} are given cos/sin but do not rotate their queries and keys: "
                         "recorded as NoPE layers (nope_layers)")

    pairing = dims = offset = None
    rot_layers = dict(rotating)
    if rotating:
        first = next(iter(rotating.values())).rotation
        pairing, dims, offset = first.pairing, first.dims, first.offset
    elif given:
        widths = {s.cos_sin.dims for s in unknown.values() if s.cos_sin is not None}
        if len(widths) == 1:
            dims = widths.pop()
            d = recorder.d
            offset = 0 if dims == d else None
    if rope == "rotary" and (given or pairing is None):
        which = sorted(given) or sorted(unknown)
        reasons = sorted({s.reason for l, s in unknown.items() if s.reason})
        notes.append(
            f"the RoPE layout of layers {_list(which)} could not be established from their rows ({'; '.join(reasons)})"
            + ("; rope_pairing and rotary_offset are recorded as null: the ingest computes no RoPE planes for this "
               "capture" if pairing is None else "; recorded as the other layers' layout")
        )
    rot_layers.update({l: s for l, s in unknown.items() if s.cos_sin is not None})

    # global (full-attention) layers: those without a sliding window, else all
    def global_of(layers):
        full = [l for l in layers if recorder.sliding.get(l) is None]
        return full or list(layers)

    omegas = {l: s.omega for l, s in rot_layers.items()}
    inv_freq = _common([omegas[l] for l in global_of(sorted(omegas))]) if omegas else None
    layer_inv = _per_layer(omegas, inv_freq, n_layers, _floats) if omegas else None
    amps = {l: s.amplitude for l, s in rot_layers.items()}
    factor = _common([amps[l] for l in global_of(sorted(amps))]) if amps else None
    layer_factor = _per_layer(amps, factor, n_layers, float) if amps else None
    scales = dict(recorder.scale)
    scale = _common([scales[l] for l in global_of(sorted(scales))]) if scales else None
    layer_scale = _per_layer(scales, scale, n_layers, float) if scales else None

    top = {
        "rope": rope,
        "rope_pairing": pairing,
        "rotary_dims": dims if rope == "rotary" else None,
        "rotary_offset": offset if rope == "rotary" else None,
        "rope_inv_freq": _floats(inv_freq),
        "layer_rope_inv_freq": layer_inv,
        "rope_attention_factor": float(factor) if factor is not None else None,
        "layer_rope_attention_factor": layer_factor,
        "attention_scale": float(scale) if scale is not None else None,
        "layer_attention_scale": layer_scale,
        "nope_layers": nope,
    }
    return RopeFacts(top, _provenance(recorder, rotating, unknown, rope_parameters, inv_freq, text_lengths),
                     _attention(recorder), notes)


def _provenance(recorder, rotating, unknown, rope_parameters, inv_freq, text_lengths) -> dict:
    """``capture.rope``: how each recorded fact was established."""
    out: dict = {}
    if rotating:
        layers = sorted(rotating)
        st = rotating[layers[0]]
        out["layout_from"] = "rows"
        out["layout"] = {
            "established_on_layers": layers,
            "method": ("the one rotation of the layer's projection output (pairing, offset of the rotated slice) "
                       "that reproduces every sampled row of the first text"),
            "projection": st.labels,
        }
        if st.rotation.deinterleave:
            out["layout"]["input_order"] = ("the rotated slice's coordinates are de-interleaved ([evens | odds]) "
                                            "before a rotate-half rotation; the stored vectors are in that order")
        if any(s.shared_key for s in rotating.values()):
            out["shared_rotary_key"] = {
                "layers": sorted(l for l, s in rotating.items() if s.shared_key),
                "meaning": ("every key head's rotated slice is one vector per position (multi-head latent "
                            "attention's shared rotary key), established from the keys attention receives"),
            }
    elif any(s.cos_sin is not None for s in unknown.values()):
        out["layout_from"] = None
    states = dict(rotating) or {l: s for l, s in unknown.items() if s.cos_sin is not None}
    if states:
        full = [l for l in sorted(states) if recorder.sliding.get(l) is None] or sorted(states)
        st = states[full[0]]  # a global layer's: the one rope_inv_freq describes
        out["cos_sin"] = st.cos_sin.describe()
        estimated = ("the cos/sin given to attention (angle at position 1, refined at the largest kept position; "
                     "float32: ~1e-7 relative)")
        out["frequencies_from"] = st.omega_source or estimated
        out["attention_factor_from"] = st.amplitude_source or "the cos/sin amplitude at position 0"
        sources = {s.omega_source or estimated for s in states.values()}
        if len(sources) > 1:
            out["layer_frequencies_from"] = {str(l): s.omega_source or estimated for l, s in sorted(states.items())}
    unest = {l: s.reason for l, s in unknown.items() if s.reason}
    if unest:
        out["not_established"] = [{"layers": ls, "reason": r} for r, ls in _group(unest).items()]
    kind = (rope_parameters or {}).get("rope_type", (rope_parameters or {}).get("type"))
    if kind == "longrope" and inv_freq is not None:
        out["longrope"] = _longrope(rope_parameters, inv_freq, text_lengths)
    return out


def _longrope(rp: dict, inv_freq, text_lengths) -> dict:
    """Which longrope factor set the recorded frequencies are, and the threshold it switches at."""
    r = 2 * len(inv_freq)
    base = float(rp.get("rope_theta", 10000.0))
    shape = base ** (np.arange(0, r, 2, dtype=np.float64) / r)
    used = None
    for name in ("short_factor", "long_factor"):
        factors = rp.get(name)
        if isinstance(factors, list) and len(factors) == len(inv_freq):
            expected = 1.0 / (np.asarray(factors, np.float64) * shape)
            if np.allclose(expected, inv_freq, rtol=SNAP_TOLERANCE, atol=0.0):
                used = name
                break
    lengths = np.asarray(list(text_lengths), np.int64)
    return {
        "factor_set": used,
        "original_max_position_embeddings": rp.get("original_max_position_embeddings"),
        "text_lengths": [int(lengths.min()), int(lengths.max())] if lengths.size else None,
        "rule": "transformers uses long_factor when a text is longer than original_max_position_embeddings",
    }


def _attention(recorder) -> dict:
    """``capture.attention``: the implementation handed on to, and the softcap attention was called with."""
    out = {"implementation": recorder.backend.name}
    if recorder.backend.why:
        out["why"] = recorder.backend.why
    caps = {v for v in recorder.softcap.values()}
    if caps - {None}:
        out["softcap"] = caps.pop() if len(caps) == 1 else [recorder.softcap.get(l) for l in sorted(recorder.softcap)]
    return out


def _group(by_layer: dict[int, str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for layer in sorted(by_layer):
        out.setdefault(by_layer[layer], []).append(layer)
    return out


def _list(layers) -> str:
    layers = list(layers)
    return ", ".join(map(str, layers[:8])) + (f" and {len(layers) - 8} more" if len(layers) > 8 else "")


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
    # layers whose layout was not established: the config's NoPE layers are taken as NoPE (their
    # rows unverified, as everything under --unchecked); the others given cos/sin are unknown RoPE
    given = {l for l, s in unknown.items() if s.cos_sin is not None and l not in config_nope}
    rope = "rotary" if rotating or given else "none"

    if rope == "none":
        nope = list(range(n_layers))
    else:
        nope = sorted((set(config_nope) - set(rotating) - set(still)) | still)
        contradict_rope = sorted(set(rotating) & set(config_nope))
        contradict_nope = sorted(still - set(config_nope))
        if contradict_rope:
            notes.append(f"{_layers(contradict_rope)} {_verb(contradict_rope, 'applies', 'apply')} RoPE although "
                         "the config lists them as NoPE layers: recorded as the model does it")
        if contradict_nope:
            notes.append(f"{_layers(contradict_nope)} {_verb(contradict_nope, 'is', 'are')} given cos/sin but "
                         f"{_verb(contradict_nope, 'does', 'do')} not rotate "
                         f"{_verb(contradict_nope, 'its', 'their')} queries and keys: recorded as NoPE layers (nope_layers)")

    pairing = dims = offset = None
    if rotating and not given:
        first = next(iter(rotating.values())).rotation
        pairing, dims, offset = first.pairing, first.dims, first.offset
    elif given:  # never a guessed layout: the width the cos/sin show, the rest unknown
        widths = {states[l].cos_sin.dims for l in given} | {s.rotation.dims for s in rotating.values()}
        if len(widths) == 1:
            dims = widths.pop()
            offset = 0 if dims == recorder.d else None
        reasons = sorted({states[l].reason for l in given if states[l].reason})
        notes.append(
            f"the RoPE layout of {_layers(sorted(given))} could not be established from "
            f"{_verb(given, 'its', 'their')} rows "
            f"({'; '.join(reasons)}): rope_pairing{' and rotary_offset are' if offset is None else ' is'} recorded as "
            "null, and the ingest computes no RoPE planes for this capture"
        )
    rot_layers = {**rotating, **{l: states[l] for l in given}}

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
    return RopeFacts(top, _provenance(recorder, rotating, {l: states[l] for l in given}, unknown, rope_parameters,
                                      inv_freq, text_lengths),
                     _attention(recorder), notes)


def _provenance(recorder, rotating, given, unknown, rope_parameters, inv_freq, text_lengths) -> dict:
    """``capture.rope``: how each recorded fact was established."""
    out: dict = {}
    if rotating and not given:
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
    elif given:
        out["layout_from"] = None
    states = {**rotating, **given}
    if states:
        full = [l for l in sorted(states) if recorder.sliding.get(l) is None] or sorted(states)
        st = states[full[0]]  # a global layer's: the one rope_inv_freq describes
        out["cos_sin"] = st.cos_sin.describe()
        estimated = ("the cos/sin given to attention (angle at position 1, refined at the largest kept position; "
                     "float32: ~1e-7 relative)")
        out["frequencies_from"] = st.omega_source or estimated
        if st.omega_source is None and st.cos_sin.omega_error > 0:
            # half-precision cos/sin: each angle is known to ~2 epsilons, so each frequency to that / position
            out["frequencies_error"] = float(st.cos_sin.omega_error)
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


def _layers(layers) -> str:
    """'layer 3' or 'layers 1, 3'."""
    layers = list(layers)
    return f"layer{'s' if len(layers) != 1 else ''} {_list(layers)}"


def _verb(layers, one: str, many: str) -> str:
    return one if len(list(layers)) == 1 else many


def _list(layers) -> str:
    layers = list(layers)
    return ", ".join(map(str, layers[:8])) + (f" and {len(layers) - 8} more" if len(layers) > 8 else "")



def summary(meta: dict) -> str:
    """One line saying what RoPE a capture recorded (for the CLI)."""
    scale = meta.get("attention_scale")
    tail = f"; attention scale {scale:.6g}" if scale is not None else ""
    if meta.get("rope") != "rotary":
        return f"rope: none (no layer rotates its queries and keys){tail}"
    dims, off, pairing = meta.get("rotary_dims"), meta.get("rotary_offset"), meta.get("rope_pairing")
    if pairing is None:
        width = f" over {dims} of {meta['head_dim']} dims" if dims else ""
        return f"rope: layout not established{width} (rope_pairing null: no RoPE planes at ingest){tail}"
    src = (meta.get("capture") or {}).get("rope", {}).get("frequencies_from") or "cos/sin"
    per_layer = " (per layer: layer_rope_inv_freq)" if meta.get("layer_rope_inv_freq") else ""
    return (f"rope: {pairing} pairs on dims {off}–{off + dims - 1} of {meta['head_dim']} ({dims // 2} planes), "
            f"frequencies from {src.split(' (')[0]}{per_layer}{tail}")

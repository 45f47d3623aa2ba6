"""The attention function ``qkdb sniff`` registers: what it keeps, and the check behind every row.

transformers hands every attention layer's ``query`` and ``key`` — after RoPE, after any q/k norm,
after anything else the model's attention code does to them — to a function looked up by name in
``transformers.AttentionInterface``. :class:`Recorder` is that function. For each sampled row it

1. reads the row exactly as attention received it;
2. divides out the model's known position-dependent scalings that are not RoPE
   (:class:`PositionScaling`, e.g. Ministral3's llama-4 query scale) unless told to keep them;
3. **establishes** the layer's RoPE on the first text (:mod:`qkdb.ingest.capture.rope_layout`): the
   cos/sin the layer's attention module was called with give the rotated width, frequencies and
   amplitude; the one rotation (pairing, offset of the rotated slice) of the layer's own
   projection output (:mod:`qkdb.ingest.capture.qk_sources`: its ``q_proj``/``k_proj``, fused or
   latent projections, through its q/k norm) that reproduces the rows attention receives gives
   the layout — or none, for a layer without RoPE;
4. **checks** every row of every text against that recomputation in float64. Anything else
   between the projection and attention (a scale, a norm after RoPE, another rotation) makes the
   two differ, and the capture stops with an error naming the layer, instead of storing a
   positional signal nothing records;
5. stores it, or (``pre_rope``) its pre-rotation vector, into arrays allocated once for the whole
   capture.

Then it hands everything on to the attention implementation :mod:`qkdb.ingest.capture.attention_backend`
chose, recording the ``scaling`` and any ``softcap`` attention was called with.

Why arrays allocated up front: the per-text chunks the first version kept (a few tens of KB per head
file and text) were the only long-lived allocations made between forward passes. glibc raises its
mmap threshold after the first large ``free`` (dynamic threshold), so the forward passes' multi-MB
temporaries come from the heap, and every text's small survivors pinned the heap above them: peak
memory grew by ~13 times the data kept (1.2 → 3.5–4.1 GB from 1 to 16 texts on SmolLM2-135M).
With one array per head file, allocated before the first text, nothing survives a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qkdb.errors import SniffError
from qkdb.ingest.capture import qk_sources
from qkdb.ingest.capture.rope_layout import (
    NO_ROTATION, SNAP_TOLERANCE, CosSin, FrequencySource, NotRoPE, Rotation, candidates, read_cos_sin,
)

# Relative difference (max |captured − recomputed| / max |recomputed| over a head's rows of a text)
# below which a row counts as the recomputation. float32 rounding of RoPE gives ~1e-7; a real
# scale or a missing rotation gives 1e-3 and more.
CHECK_TOLERANCE = 1e-4



class StopForward(Exception):
    """Raised after the deepest sampled layer: the rest of the forward pass is not needed."""


@dataclass(frozen=True)
class PositionScaling:
    """A factor the model multiplies queries (or keys) by that depends on position and is not RoPE.

    ``llama4``: ``1 + beta · ln(1 + floor(position / original_max_position_embeddings))`` —
    transformers' ``get_llama_4_attn_scale``, applied to the queries of every layer by Ministral3
    (and Mistral4) after RoPE: 1 below ``original_max_position_embeddings``, then growing by steps
    (Ministral-3: beta 0.1, 16,384 → ×1.07 from 16k, ×1.22 at 128k).
    """

    kind: str
    type: str
    layers: tuple[int, ...]
    params: dict

    FORMULAS = {"llama4": "1 + beta * ln(1 + floor(position / original_max_position_embeddings))"}

    def factor(self, positions: np.ndarray) -> np.ndarray:
        """The factor at each position (float64)."""
        if self.type != "llama4":  # pragma: no cover - only known types are constructed
            raise ValueError(self.type)
        beta = float(self.params["beta"])
        orig = float(self.params["original_max_position_embeddings"])
        return 1.0 + beta * np.log1p(np.floor(np.asarray(positions, np.float64) / orig))

    def record(self, removed: bool, max_position: int | None) -> dict:
        """The entry of ``position_scaling`` in ``qkdb_dataset.json``."""
        out = {
            "kind": self.kind,
            "type": self.type,
            "formula": self.FORMULAS[self.type],
            **self.params,
            "layers": list(self.layers),
            "removed": removed,
        }
        if max_position is not None:
            out["max_factor_in_capture"] = float(self.factor(np.asarray([max_position]))[0])
        return out


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| / max |b| (absolute when b is all zero)."""
    if a.size == 0:
        return 0.0
    scale = float(np.max(np.abs(b)))
    diff = float(np.max(np.abs(a - b)))
    return diff / scale if scale > 0 else diff


@dataclass
class LayerRope:
    """What one layer was established to do (on the first text that reached it)."""

    rotation: Rotation | None  # None: not established (--unchecked, or no projection to follow)
    variants: dict[str, int] = field(default_factory=dict)  # kind -> index into its sources' variants
    labels: dict[str, str] = field(default_factory=dict)  # kind -> the variant's description
    cos_sin: CosSin | None = None  # as given on the establishing text (None: no cos/sin)
    omega: np.ndarray | None = None  # the frequencies recorded (rad/token)
    omega_source: str | None = None  # the model buffer they equal, None when read from cos/sin only
    amplitude: float | None = None
    amplitude_source: str | None = None
    shared_key: bool = False  # every key head's rotated slice is one vector (MLA)
    reason: str | None = None  # why the layout was not established


class Recorder:
    """The registered attention function, the check, and the rows kept.

    Parameters
    ----------
    torch
        The torch module.
    backend
        :class:`qkdb.ingest.capture.attention_backend.Backend`: the attention everything is handed on to.
    plan
        :class:`qkdb.ingest.capture.sniff.CapturePlan`: the head files, their positions per text, and the
        arrays the rows go into.
    nope_layers : set of int
        Layers the config says apply no RoPE (what the layers do is established, and wins).
    scalings : list of PositionScaling
        Known non-RoPE position-dependent factors.
    remove_scalings : bool
        Divide them out of the stored rows (the default) or keep the rows as attention saw them.
    pre_rope : bool
        Store pre-rotation vectors.
    check : bool
        Compare every row with the recomputation (``--unchecked`` turns it off; the layout is then
        still looked up on the first text where the projection can be followed, and left unknown
        where it cannot).
    attn_modules : dict of int to module
        Each layer's attention module, for the hooks.
    dims : tuple of int
        ``(n_q_heads, n_kv_heads, head_dim)``.
    frequencies : FrequencySource
        The model's ``inv_freq`` buffers, to record exact frequencies.
    """

    def __init__(self, torch, backend, plan, *, nope_layers, scalings, remove_scalings, pre_rope, check,
                 attn_modules, dims, frequencies: FrequencySource):
        self.torch = torch
        self.backend = backend
        self.plan = plan
        self.by_layer: dict[int, dict[str, list[int]]] = {}
        for layer, head, kind in plan.files:
            self.by_layer.setdefault(layer, {"q": [], "k": []})[kind].append(head)
        self.last_layer = max(self.by_layer)
        self.nope_layers = set(nope_layers)
        self.scalings = {(s.kind, layer): s for s in scalings for layer in s.layers}
        self.remove_scalings = remove_scalings
        self.pre_rope = pre_rope
        self.check = check
        self.n_q, self.n_kv, self.d = dims
        self.frequencies = frequencies
        self.active = False
        self.text = -1
        self.seq_len = 0
        self.sliding: dict[int, int | None] = {}
        self.scale: dict[int, float] = {}  # layer -> the scaling attention was called with
        self.softcap: dict[int, float | None] = {}
        self.seen_layers: set[int] = set()
        self.rope: dict[int, LayerRope] = {}
        self.max_difference: dict[int, float] = {}  # layer -> largest relative difference checked
        self.unchecked: dict[int, str] = {}  # layer -> why it could not be checked
        self._union: dict[int, np.ndarray] = {}  # layer -> sorted positions any of its files keeps (this text)
        self._cos_sin: dict[int, CosSin | NotRoPE | None] = {}
        self._proj: dict[int, dict[str, object]] = {}
        self._pre: dict[tuple[int, str, int], np.ndarray | None] = {}
        self._handles = []
        self._sources: dict[int, qk_sources.LayerSources] = {}
        for layer in self.by_layer:
            attn = attn_modules.get(layer)
            if attn is None:
                self._sources[layer] = qk_sources.LayerSources(reason="its attention module was not found")
                continue
            self._handles.append(attn.register_forward_pre_hook(self._pre_hook(layer), with_kwargs=True))
            sources = qk_sources.sources_of(attn, self.n_q, self.n_kv, self.d)
            self._sources[layer] = sources
            for module, key in sources.hooks:
                self._handles.append(module.register_forward_hook(self._proj_hook(layer, key)))

    def close(self) -> None:
        """Remove the hooks from the model."""
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- per text -------------------------------------------------------------------------------

    def begin_text(self, text: int, length: int) -> None:
        self.text = text
        self.seq_len = int(length)
        self._union = {
            layer: np.unique(np.concatenate([
                self.plan.positions_of((layer, h, kind), text) for kind in ("q", "k") for h in heads[kind]
            ]))
            for layer, heads in self.by_layer.items()
        }
        self._clear()
        self.active = True

    def end_text(self) -> None:
        self.active = False
        self._clear()

    def _clear(self) -> None:
        self._cos_sin.clear()
        self._proj.clear()
        self._pre.clear()

    # -- hooks: only the rows some head keeps are copied out of the forward pass -----------------

    def _rows(self, tensor, layer: int):
        """Rows of the union of kept positions from a tensor of one text, (n_kept, width) float32 torch."""
        t = tensor.detach()
        t = t.reshape(self.seq_len, t.shape[-1]) if t[..., 0].numel() == self.seq_len else t[0]
        # numpy's fancy indexing of a (seq, width) view: ~100x faster than torch's for this
        return self.torch.from_numpy(t.float().cpu().numpy()[self._union[layer]])

    def _pre_hook(self, layer: int):
        def grab(module, args, kwargs):
            if not self.active:
                return
            pe = kwargs.get("position_embeddings")
            if pe is None or (isinstance(pe, (tuple, list)) and any(p is None for p in pe)):
                self._cos_sin[layer] = None
                return
            try:
                self._cos_sin[layer] = read_cos_sin(pe, self._union[layer], self.seq_len)
            except NotRoPE as exc:
                self._cos_sin[layer] = exc
        return grab

    def _proj_hook(self, layer: int, key: str):
        def grab(module, args, output):
            if self.active:
                out = output[0] if isinstance(output, tuple) else output
                self._proj.setdefault(layer, {})[key] = self._rows(out, layer)
        return grab

    # -- the attention function -----------------------------------------------------------------

    def __call__(self, module, query, key, value, attention_mask, *args, **kwargs):
        layer = getattr(module, "layer_idx", None)
        if self.active and layer is not None and layer in self.by_layer:
            self._layer(module, layer, query, key, kwargs)
        elif self.active and layer is not None:
            self.seen_layers.add(layer)
        if self.active and layer == self.last_layer:
            raise StopForward
        return self.backend.forward(module, query, key, value, attention_mask, *args, **kwargs)

    def _layer(self, module, layer: int, query, key, kwargs) -> None:
        if query.shape[0] != 1:
            raise SniffError("internal: qkdb sniff runs one text per forward pass")
        if query.shape[-1] != self.d or key.shape[-1] != self.d:
            raise SniffError(f"layer {layer}: attention receives queries of {query.shape[-1]} and keys of "
                             f"{key.shape[-1]} dims, but the config gives head_dim {self.d}: qkdb sniff cannot "
                             "tell how this model's heads are laid out")
        if query.shape[1] != self.n_q or key.shape[1] != self.n_kv:
            raise SniffError(f"layer {layer}: attention receives {query.shape[1]} query and {key.shape[1]} key heads, "
                             f"but the config gives {self.n_q} and {self.n_kv}: qkdb sniff cannot tell how this "
                             "model's heads are laid out")
        self.seen_layers.add(layer)
        sw = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
        self.sliding.setdefault(layer, int(sw) if sw else None)
        scaling = kwargs.get("scaling")
        # sdpa's own default when no scaling is passed
        self.scale.setdefault(layer, float(scaling) if scaling is not None else self.d ** -0.5)
        softcap = kwargs.get("softcap")
        self.softcap.setdefault(layer, float(softcap) if softcap else None)
        if softcap and not self.backend.name.startswith("eager"):
            raise SniffError(f"layer {layer}: attention is called with logit softcapping (softcap {softcap:g}) that "
                             "the config does not declare (attn_logit_softcapping): qkdb sniff handed it on to "
                             f"{self.backend.name}, which does not support it")
        cs = self._cos_sin.pop(layer, None)
        rows = {(kind, head): self._observed(states, layer, head, kind)
                for kind, states in (("q", query), ("k", key)) for head in self.by_layer[layer][kind]}
        state = self.rope.get(layer)
        if state is None:
            state = self.rope[layer] = self._establish(layer, cs, rows, key)
        else:
            self._same_rope(layer, state, cs)
        for (kind, head), obs in rows.items():
            self._take(layer, head, kind, obs, state, cs)
        # this layer's projections are done with: free them before the next layer runs
        self._proj.pop(layer, None)
        for k in [k for k in self._pre if k[0] == layer]:
            del self._pre[k]

    def _observed(self, states, layer: int, head: int, kind: str):
        """(positions, their index among the layer's kept rows, row as received, row with scalings divided out)."""
        idx = self.plan.positions_of((layer, head, kind), self.text)
        # a numpy view of the (seq, d) slice, then fancy indexing: ~200x faster than torch's for this
        raw = states[0, head].detach().cpu().numpy()[idx]
        y = raw.astype(np.float64)
        scaling = self.scalings.get((kind, layer))
        if scaling is not None:
            y = y / scaling.factor(idx)[:, None]
        return idx, np.searchsorted(self._union[layer], idx), raw, y

    # -- establishing a layer's RoPE --------------------------------------------------------------

    def _pre_rows(self, layer: int, kind: str, variant: int) -> np.ndarray | None:
        """All heads' pre-RoPE rows (heads, n_kept, d) of ``kind`` by one variant, this text (cached)."""
        key = (layer, kind, variant)
        if key not in self._pre:
            outputs = self._proj.get(layer, {})
            n_heads = self.n_q if kind == "q" else self.n_kv
            self._pre[key] = qk_sources.evaluate(self._sources[layer].variants[kind][variant], outputs, n_heads, self.d)
        return self._pre[key]

    def _establish(self, layer: int, cs, rows: dict, key) -> LayerRope:
        """The layer's rotation, frequencies and amplitude, from its cos/sin and the rows of this text."""
        state = LayerRope(rotation=None, cos_sin=cs if isinstance(cs, CosSin) else None)
        if isinstance(cs, CosSin):
            if cs.dims > self.d:
                raise SniffError(f"layer {layer}: RoPE over {cs.dims} dimensions of a {self.d}-dimensional head")
            if cs.omega is not None:
                state.omega, state.omega_source = self.frequencies.frequencies(cs.omega)
            state.amplitude, state.amplitude_source = self.frequencies.amplitude(cs.amplitude, state.omega_source)
        sources = self._sources[layer]
        if sources.reason is not None:
            state.reason = sources.reason
            self.unchecked[layer] = sources.reason
            return state
        rotations = candidates(self.d, cs.dims) if isinstance(cs, CosSin) else [NO_ROTATION]
        found, best = self._search(layer, rotations, cs, rows)
        common = [r for r in found["q"] if any(r.same_planes(o) for o in found["k"])]
        distinct = [r for i, r in enumerate(common) if not any(r.same_planes(o) for o in common[:i])]
        if len(distinct) == 1:
            rot = distinct[0]
            state.rotation = rot
            for kind in ("q", "k"):
                v = next(v for r, v in found[kind].items() if r.same_planes(rot))
                state.variants[kind] = v
                state.labels[kind] = sources.variants[kind][v][0]
            if rot.pairing is not None and self.n_kv > 1:
                part = key[0].detach()[:, self.torch.as_tensor(self._union[layer]), rot.offset:rot.offset + rot.dims]
                state.shared_key = bool(self.torch.equal(part, part[:1].expand_as(part)))
            self._same_layout(layer, rot)
            return state
        if not best:  # no variant gave rows of the heads' shape
            state.reason = "its projection outputs were not seen or do not split into the heads attention receives"
            self.unchecked[layer] = state.reason
            return state
        if not common and found["q"] and found["k"]:
            why = (f"layer {layer}: its queries are reproduced by {next(iter(found['q'])).describe()} and its keys by "
                   f"{next(iter(found['k'])).describe()}: qkdb sniff records one RoPE layout per layer")
        elif distinct:
            why = (f"layer {layer}: the rows are reproduced by several RoPE layouts ("
                   + "; ".join(r.describe() for r in distinct) + ")")
        elif "q" not in best or "k" not in best:
            state.reason = "its projection outputs were not seen or do not split into the heads attention receives"
            self.unchecked[layer] = state.reason
            return state
        else:
            kind = "q" if best["q"][0] > CHECK_TOLERANCE else "k"
            why = self._explain(layer, cs, kind, best[kind], rows)
        if self.check:
            raise SniffError(why + HINT)
        state.reason = f"on the first text, {why.split(': ', 1)[-1]}"
        return state

    def _same_layout(self, layer: int, rot: Rotation) -> None:
        """Refuse layers that rotate in different layouts (no known model does; one record could not say it)."""
        for other, st in self.rope.items():
            r = st.rotation
            if r is not None and r.pairing is not None and rot.pairing is not None and not r.same_planes(rot):
                raise SniffError(f"layer {layer} applies RoPE as {rot.describe()}, layer {other} as {r.describe()}: "
                                 "qkdb sniff records one RoPE layout per capture")

    def _search(self, layer: int, rotations: list[Rotation], cs, rows: dict):
        """Per kind, the rotations (with the variant) that reproduce every sampled head's rows; and the closest miss."""
        found: dict[str, dict[Rotation, int]] = {"q": {}, "k": {}}
        best: dict[str, tuple] = {}
        for kind in ("q", "k"):
            heads = self.by_layer[layer][kind]
            for v in range(len(self._sources[layer].variants[kind])):
                pre = self._pre_rows(layer, kind, v)
                if pre is None:
                    continue
                for rot in rotations:
                    worst = (-1.0, None)
                    for head in heads:
                        idx, at, raw, y = rows[(kind, head)]
                        expected = rot.apply(pre[head][at], cs.cos[at], cs.sin[at]) if rot.pairing else pre[head][at]
                        diff = relative_difference(y, expected)
                        if diff > worst[0]:
                            worst = (diff, head)
                    if worst[0] <= CHECK_TOLERANCE:
                        found[kind].setdefault(rot, v)
                    if kind not in best or worst[0] < best[kind][0]:
                        best[kind] = (worst[0], worst[1], rot, v)
        return found, best

    def _same_rope(self, layer: int, state: LayerRope, cs) -> None:
        """Refuse a later text whose cos/sin carry other frequencies or another amplitude than the first's."""
        first = state.cos_sin
        if isinstance(cs, NotRoPE) or (first is None) != (cs is None):
            if state.rotation is not None and state.rotation.pairing is None:
                return  # a layer without RoPE: whatever it is given, it does not use it
            raise SniffError(f"layer {layer}: text {self.text} gives its attention other position embeddings than "
                             "the first text did: qkdb sniff cannot record one RoPE for the capture")
        if cs is None or first is None or cs.omega is None or state.omega is None:
            return
        omega, _ = self.frequencies.frequencies(cs.omega)
        diff = float(np.max(np.abs(omega - state.omega) / state.omega))
        if cs.dims != first.dims or diff > SNAP_TOLERANCE \
                or abs(cs.amplitude - first.amplitude) > SNAP_TOLERANCE * first.amplitude:
            raise SniffError(
                f"layer {layer}: the RoPE frequencies (or cos/sin amplitude) of text {self.text} ({self.seq_len} tokens) "
                f"differ from those of the first text (by up to {diff:.3g}, relative): the model changes its RoPE with "
                "the text's length (dynamic or longrope scaling); capture texts of one length (see --max-length, "
                "--no-pack)"
            )

    # -- per row --------------------------------------------------------------------------------

    def _take(self, layer: int, head: int, kind: str, obs, state: LayerRope, cs) -> None:
        idx, at, raw, y = obs
        rot = state.rotation
        cos = sin = None
        if isinstance(cs, CosSin) and rot is not None and rot.pairing is not None:
            cos, sin = cs.cos[at], cs.sin[at]
        if self.check and rot is not None and layer not in self.unchecked:
            pre = self._pre_rows(layer, kind, state.variants[kind])
            if pre is None:
                self.unchecked[layer] = "its projection output was not seen"
            else:
                expected = rot.apply(pre[head][at], cos, sin) if rot.pairing else pre[head][at]
                diff = relative_difference(y, expected)
                if diff > CHECK_TOLERANCE:
                    miss = (diff, head, rot, state.variants[kind])
                    raise SniffError(self._explain(layer, cs, kind, miss, {(kind, head): obs}) + HINT)
                self.max_difference[layer] = max(self.max_difference.get(layer, 0.0), diff)
        if self.pre_rope:
            if rot is None:
                raise SniffError(f"--pre-rope: layer {layer}'s RoPE layout could not be established "
                                 f"({state.reason}), so its rotation cannot be undone")
            out = rot.undo(y, cos, sin) if rot.pairing else y
        elif (kind, layer) in self.scalings and not self.remove_scalings:
            out = raw
        else:
            out = y if (kind, layer) in self.scalings else raw
        self.plan.store((layer, head, kind), self.text, out)

    # -- why rows differ ------------------------------------------------------------------------

    def _explain(self, layer: int, cs, kind: str, miss: tuple, rows: dict) -> str:
        """One line saying how the vectors attention receives differ from the closest recomputation ``miss``."""
        diff, head, rot, v = miss
        label = self._sources[layer].variants[kind][v][0]
        what = f"layer {layer} {'queries' if kind == 'q' else 'keys'} (head {head})"
        idx, at, raw, y = rows[(kind, head)]
        pre = self._pre_rows(layer, kind, v)[head][at]
        expected = rot.apply(pre, cs.cos[at], cs.sin[at]) if rot.pairing else pre
        rotated = "RoPE of " if rot.pairing else ""
        scaling = self.scalings.get((kind, layer))
        if scaling is not None and relative_difference(raw.astype(np.float64), expected) <= CHECK_TOLERANCE:
            return (f"{what}: the config declares a {scaling.type} position scaling, but the model does not apply "
                    "it to these vectors")
        # A row-wise factor: y_i = c_i · expected_i up to rounding.
        denom = np.einsum("ij,ij->i", expected, expected)
        c = np.divide(np.einsum("ij,ij->i", y, expected), denom, out=np.ones_like(denom), where=denom > 0)
        if relative_difference(y, c[:, None] * expected) <= CHECK_TOLERANCE:
            lo, hi = int(np.argmin(c)), int(np.argmax(c))
            return (f"{what}: attention receives {rotated}the {label} output times a factor that varies from "
                    f"{c[lo]:.4g} (position {int(idx[lo])}) to {c[hi]:.4g} (position {int(idx[hi])}) — a scaling "
                    "that is not RoPE and that qkdb sniff does not know")
        given = (f"; its position embeddings are not a rotation qkdb knows ({cs})" if isinstance(cs, NotRoPE) else
                 f"; it is given cos/sin over {cs.dims} dims ({cs.describe()})" if isinstance(cs, CosSin) else
                 "; it is given no cos/sin")
        return (f"{what}: attention receives vectors that differ from every rotation qkdb sniff knows of the "
                f"{label} output (closest: {rot.describe()}, off by up to {diff:.2g}, relative){given}")


HINT = ("; the stored vectors would carry it into the warehouse unrecorded. --unchecked captures them anyway "
        "(recorded as unchecked in qkdb_dataset.json)")


def check_summary(recorder: Recorder, layers: list[int]) -> dict:
    """What the check established, for ``capture.check`` in ``qkdb_dataset.json``."""
    if not recorder.check:
        return {"method": "none (--unchecked)", "checked_layers": [], "unchecked_layers": sorted(layers)}
    checked = sorted(l for l in layers if l in recorder.max_difference and l not in recorder.unchecked)
    out = {
        "method": ("every stored row equals the layer's own projection output (q_proj/k_proj, fused or latent "
                   "projections, through its q/k norm), rotated by the layer's own cos/sin in the layout "
                   "established on the first text (capture.rope) unless it applies no RoPE, with the position "
                   "scalings listed in position_scaling divided out"),
        "tolerance": CHECK_TOLERANCE,
        "checked_layers": checked,
        "max_relative_difference": max((recorder.max_difference[l] for l in checked), default=None),
    }
    reasons: dict[str, list[int]] = {}
    for layer in sorted(l for l in layers if l not in checked):
        reasons.setdefault(recorder.unchecked.get(layer, "no row was checked"), []).append(layer)
    if reasons:
        out["unchecked"] = [{"layers": ls, "reason": r} for r, ls in reasons.items()]
    return out

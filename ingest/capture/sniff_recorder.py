"""The attention function ``qkdb sniff`` registers: what it keeps, and the check behind every row.

transformers hands every attention layer's ``query`` and ``key`` — after RoPE, after any q/k norm,
after anything else the model's attention code does to them — to a function looked up by name in
``transformers.AttentionInterface``. :class:`Recorder` is that function. For each sampled row it

1. reads the row exactly as attention received it;
2. divides out the model's known position-dependent scalings that are not RoPE
   (:class:`PositionScaling`, e.g. Ministral3's llama-4 query scale) unless told to keep them;
3. **checks** the row against an independent recomputation from the same layer: the model's own
   ``q_proj``/``k_proj`` output (caught by a forward hook), through the layer's own ``q_norm``/
   ``k_norm`` when it has one, rotated in float64 by the layer's own ``cos``/``sin`` (the
   ``position_embeddings`` its attention module was called with) — or not rotated, for a layer
   without RoPE. Anything else between the projection and attention (a scale, a norm after RoPE,
   another rotation) makes the two differ, and the capture stops with an error naming the layer,
   instead of storing a positional signal nothing records;
4. stores it, or (``pre_rope``) its pre-rotation vector, into arrays allocated once for the whole
   capture.

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

# Relative difference (max |captured − recomputed| / max |recomputed| over a head's rows of a text)
# below which a row counts as the recomputation. float32 rounding of RoPE gives ~1e-7; a real
# scale or a missing rotation gives 1e-3 and more.
CHECK_TOLERANCE = 1e-4

# Fused projections whose output is [q | k | v] along the last axis (GPT-2's c_attn, Phi-3's qkv_proj).
FUSED_QKV = ("c_attn", "qkv_proj")


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


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE of rows ``x`` (n, d) by per-row ``cos``/``sin`` (n, r), r ≤ d (partial RoPE: the first r)."""
    r = cos.shape[1]
    h = r // 2
    x_r = x[:, :r]
    turned = np.concatenate([-x_r[:, h:], x_r[:, :h]], axis=1)
    return np.concatenate([x_r * cos + turned * sin, x[:, r:]], axis=1)


def unrotate(y: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """The inverse of :func:`rotate`: ``(y·cos − rot(y)·sin) / (cos² + sin²)``.

    cos and sin repeat across the two halves, so this recovers x exactly (up to rounding), and the
    division undoes any constant folded into both (YaRN's attention factor).
    """
    r = cos.shape[1]
    h = r // 2
    y_r = y[:, :r]
    turned = np.concatenate([-y_r[:, h:], y_r[:, :h]], axis=1)
    return np.concatenate([(y_r * cos - turned * sin) / (cos * cos + sin * sin), y[:, r:]], axis=1)


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| / max |b| (absolute when b is all zero)."""
    if a.size == 0:
        return 0.0
    scale = float(np.max(np.abs(b)))
    diff = float(np.max(np.abs(a - b)))
    return diff / scale if scale > 0 else diff


@dataclass
class Projection:
    """Where a layer's pre-RoPE queries and keys come from, for the check."""

    hooks: list[tuple[object, str]] = field(default_factory=list)  # (module, "q" | "k" | "qkv")
    reason: str | None = None  # why the layer cannot be checked


def projection_of(attn, n_q: int, n_kv: int, d: int) -> Projection:
    """The modules whose outputs are the layer's q and k projections, or why there are none."""
    q, k = getattr(attn, "q_proj", None), getattr(attn, "k_proj", None)
    if q is not None and k is not None:
        return Projection([(q, "q"), (k, "k")])
    for name in FUSED_QKV:
        fused = getattr(attn, name, None)
        if fused is not None:
            return Projection([(fused, "qkv")])
    return Projection(reason=f"{type(attn).__name__} has no q_proj/k_proj (nor a fused {'/'.join(FUSED_QKV)})")


class Recorder:
    """The registered attention function, the check, and the rows kept.

    Parameters
    ----------
    torch, sdpa
        The torch module and transformers' ``sdpa_attention_forward`` everything is handed on to.
    plan
        :class:`qkdb.ingest.capture.sniff.CapturePlan`: the head files, their positions per text, and the
        arrays the rows go into.
    nope_layers : set of int
        Layers that apply no RoPE (the config's), checked against what the layer does.
    expects_rope : bool
        Whether the config declares RoPE at all (False: a model without rotary embeddings).
    scalings : list of PositionScaling
        Known non-RoPE position-dependent factors.
    remove_scalings : bool
        Divide them out of the stored rows (the default) or keep the rows as attention saw them.
    pre_rope : bool
        Store pre-rotation vectors.
    check : bool
        Compare every row with the recomputation (``--unchecked`` turns it off).
    attn_modules : dict of int to module
        Each layer's attention module, for the hooks.
    dims : tuple of int
        ``(n_q_heads, n_kv_heads, head_dim)``.
    """

    def __init__(self, torch, sdpa, plan, *, nope_layers, expects_rope, scalings, remove_scalings, pre_rope,
                 check, attn_modules, dims):
        self.torch = torch
        self.sdpa = sdpa
        self.plan = plan
        self.by_layer: dict[int, dict[str, list[int]]] = {}
        for layer, head, kind in plan.files:
            self.by_layer.setdefault(layer, {"q": [], "k": []})[kind].append(head)
        self.last_layer = max(self.by_layer)
        self.nope_layers = set(nope_layers)
        self.expects_rope = expects_rope
        self.scalings = {(s.kind, layer): s for s in scalings for layer in s.layers}
        self.remove_scalings = remove_scalings
        self.pre_rope = pre_rope
        self.check = check
        self.n_q, self.n_kv, self.d = dims
        self.active = False
        self.text = -1
        self.sliding: dict[int, int | None] = {}
        self.seen_layers: set[int] = set()
        self.rope_layers: set[int] = set()  # layers whose attention got cos/sin
        self.max_difference: dict[int, float] = {}  # layer -> largest relative difference checked
        self.unchecked: dict[int, str] = {}  # layer -> why it could not be checked
        self._union: dict[int, np.ndarray] = {}  # layer -> sorted positions any of its files keeps (this text)
        self._cos_sin: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
        self._proj: dict[tuple[int, str], object] = {}
        self._handles = []
        self._projections: dict[int, Projection] = {}
        for layer in self.by_layer:
            attn = attn_modules.get(layer)
            if attn is None:
                self._projections[layer] = Projection(reason="its attention module was not found")
                continue
            self._handles.append(attn.register_forward_pre_hook(self._pre_hook(layer), with_kwargs=True))
            proj = projection_of(attn, self.n_q, self.n_kv, self.d) if check else Projection(reason="--unchecked")
            self._projections[layer] = proj
            for module, kind in proj.hooks:
                self._handles.append(module.register_forward_hook(self._proj_hook(layer, kind)))

    def close(self) -> None:
        """Remove the hooks from the model."""
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- per text -------------------------------------------------------------------------------

    def begin_text(self, text: int) -> None:
        self.text = text
        self._union = {
            layer: np.unique(np.concatenate([
                self.plan.positions_of((layer, h, kind), text) for kind in ("q", "k") for h in heads[kind]
            ]))
            for layer, heads in self.by_layer.items()
        }
        self._cos_sin.clear()
        self._proj.clear()
        self.active = True

    def end_text(self) -> None:
        self.active = False
        self._cos_sin.clear()
        self._proj.clear()

    # -- hooks: only the rows some head keeps are copied out of the forward pass -----------------

    def _rows(self, tensor, layer: int) -> np.ndarray:
        """Rows of the union of kept positions from a (1, seq, ...) tensor, as float32 numpy."""
        arr = tensor.detach()[0].float().cpu().numpy()
        return arr[self._union[layer]]

    def _pre_hook(self, layer: int):
        def grab(module, args, kwargs):
            if not self.active:
                return
            pe = kwargs.get("position_embeddings")
            if isinstance(pe, (tuple, list)) and len(pe) == 2 and pe[0] is not None:
                cos, sin = pe
                if cos.dim() == 2:  # (seq, r): no batch axis
                    cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
                self._cos_sin[layer] = (self._rows(cos, layer).astype(np.float64),
                                        self._rows(sin, layer).astype(np.float64))
            else:
                self._cos_sin[layer] = None
        return grab

    def _proj_hook(self, layer: int, kind: str):
        def grab(module, args, output):
            if self.active:
                out = output[0] if isinstance(output, tuple) else output
                self._proj[(layer, kind)] = self.torch.from_numpy(self._rows(out, layer))
        return grab

    # -- the attention function -----------------------------------------------------------------

    def __call__(self, module, query, key, value, attention_mask, *args, **kwargs):
        layer = getattr(module, "layer_idx", None)
        if self.active and layer is not None and layer in self.by_layer:
            if query.shape[0] != 1:
                raise SniffError("internal: qkdb sniff runs one text per forward pass")
            self.seen_layers.add(layer)
            sw = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
            self.sliding.setdefault(layer, int(sw) if sw else None)
            cos_sin = self._cos_sin.pop(layer, None)
            if cos_sin is not None:
                self.rope_layers.add(layer)
            for kind, states in (("q", query), ("k", key)):
                for head in self.by_layer[layer][kind]:
                    self._take(module, states, layer, head, kind, cos_sin)
            for kind in ("q", "k", "qkv"):
                self._proj.pop((layer, kind), None)
        elif self.active and layer is not None:
            self.seen_layers.add(layer)
        if self.active and layer == self.last_layer:
            raise StopForward
        return self.sdpa(module, query, key, value, attention_mask, *args, **kwargs)

    def _take(self, module, states, layer: int, head: int, kind: str, cos_sin) -> None:
        f = (layer, head, kind)
        idx = self.plan.positions_of(f, self.text)
        # a numpy view of the (seq, d) slice, then fancy indexing: ~200x faster than torch's for this
        raw = states[0, head].detach().cpu().numpy()[idx]
        rotates = cos_sin is not None and layer not in self.nope_layers
        if rotates and cos_sin[0].shape[1] > raw.shape[1]:
            raise SniffError(f"layer {layer}: RoPE over {cos_sin[0].shape[1]} dimensions of a {raw.shape[1]}-dimensional head")
        scaling = self.scalings.get((kind, layer))
        y = raw.astype(np.float64)
        if scaling is not None:
            y = y / scaling.factor(idx)[:, None]
        at = np.searchsorted(self._union[layer], idx)
        cos = sin = None
        if cos_sin is not None:
            cos, sin = cos_sin[0][at], cos_sin[1][at]
        if self.check:
            self._check(module, layer, head, kind, raw, y, at, idx, cos, sin, rotates, scaling)
        if self.pre_rope:
            if rotates:
                y = unrotate(y, cos, sin)
            elif self.expects_rope and layer not in self.nope_layers:
                raise SniffError(
                    f"--pre-rope: layer {layer} is given no cos/sin (position_embeddings) by the model, so its "
                    "rotation cannot be undone; this architecture is not supported with --pre-rope"
                )
            out = y
        elif scaling is not None and not self.remove_scalings:
            out = raw
        else:
            out = y if scaling is not None else raw
        self.plan.store(f, self.text, out)

    # -- the check ------------------------------------------------------------------------------

    def _pre_rows(self, module, layer: int, head: int, kind: str, at: np.ndarray) -> np.ndarray | None:
        """The layer's own pre-RoPE rows of this head (its projection, through its q/k norm), float64."""
        torch = self.torch
        n_heads = self.n_q if kind == "q" else self.n_kv
        d = self.d
        proj = self._proj.get((layer, kind))
        if proj is None and (layer, "qkv") in self._proj:
            fused = self._proj[(layer, "qkv")]
            start = 0 if kind == "q" else self.n_q * d
            if fused.shape[1] < (self.n_q + 2 * self.n_kv) * d:
                self.unchecked[layer] = f"its fused projection has {fused.shape[1]} outputs, not q|k|v"
                return None
            proj = fused[:, start:start + n_heads * d]
        if proj is None:
            self.unchecked.setdefault(layer, "its projection output was not seen")
            return None
        rows = proj[torch.as_tensor(at)]
        if rows.shape[1] != n_heads * d:
            self.unchecked[layer] = f"its {kind}_proj has {rows.shape[1]} outputs, not {n_heads} × {d}"
            return None
        norm = getattr(module, f"{kind}_norm", None)
        with torch.inference_mode():
            if norm is None:
                pre = rows.view(-1, n_heads, d)[:, head]
            else:
                weight = getattr(norm, "weight", None)
                size = weight.numel() if weight is not None else d
                if size == d:  # per-head norm (Qwen3, Gemma3, OLMo3 ...)
                    pre = norm(rows.view(-1, n_heads, d)[:, head])
                elif size == n_heads * d:  # a norm over all heads at once (OLMo2)
                    pre = norm(rows).view(-1, n_heads, d)[:, head]
                else:
                    self.unchecked[layer] = f"its {kind}_norm has {size} weights, neither {d} nor {n_heads * d}"
                    return None
        return pre.double().numpy()

    def _check(self, module, layer, head, kind, raw, y, at, idx, cos, sin, rotates, scaling) -> None:
        proj = self._projections[layer]
        if proj.reason is not None:
            self.unchecked[layer] = proj.reason
            return
        if layer in self.unchecked:
            return
        if not rotates and layer not in self.nope_layers and cos is None and self.expects_rope:
            self.unchecked[layer] = "its attention module is given no cos/sin (position_embeddings)"
            return
        pre = self._pre_rows(module, layer, head, kind, at)
        if pre is None:
            return
        expected = rotate(pre, cos, sin) if rotates else pre
        diff = relative_difference(y, expected)
        if diff <= CHECK_TOLERANCE:
            self.max_difference[layer] = max(self.max_difference.get(layer, 0.0), diff)
            return
        raise SniffError(self._explain(layer, head, kind, raw, y, pre, expected, idx, cos, sin, rotates, scaling, diff))

    def _explain(self, layer, head, kind, raw, y, pre, expected, idx, cos, sin, rotates, scaling, diff) -> str:
        """One line saying how the vectors attention receives differ from the recomputation."""
        what = f"layer {layer} {'queries' if kind == 'q' else 'keys'} (head {head})"
        hint = ("; the stored vectors would carry it into the warehouse unrecorded. --unchecked captures "
                "them anyway (recorded as unchecked in qkdb_dataset.json)")
        if scaling is not None and relative_difference(raw.astype(np.float64), expected) <= CHECK_TOLERANCE:
            return (f"{what}: the config declares a {scaling.type} position scaling, but the model does not apply "
                    f"it to these vectors{hint}")
        other = pre if rotates else (rotate(pre, cos, sin) if cos is not None else None)
        if other is not None and relative_difference(y, other) <= CHECK_TOLERANCE:
            said = "applies no RoPE" if layer in self.nope_layers else "applies RoPE"
            did = "rotated" if not rotates else "not rotated"
            return f"{what}: the config says this layer {said}, but attention receives them {did}{hint}"
        # A row-wise factor: y_i = c_i · expected_i up to rounding.
        denom = np.einsum("ij,ij->i", expected, expected)
        c = np.divide(np.einsum("ij,ij->i", y, expected), denom, out=np.ones_like(denom), where=denom > 0)
        if relative_difference(y, c[:, None] * expected) <= CHECK_TOLERANCE:
            lo, hi = int(np.argmin(c)), int(np.argmax(c))
            return (f"{what}: attention receives {'RoPE of ' if rotates else ''}the {kind}_proj output times a "
                    f"factor that varies from "
                    f"{c[lo]:.4g} (position {int(idx[lo])}) to {c[hi]:.4g} (position {int(idx[hi])}) — a scaling "
                    f"that is not RoPE and that qkdb sniff does not know{hint}")
        return (f"{what}: attention receives vectors that differ from "
                f"{'RoPE of ' if rotates else ''}the {kind}_proj output by up to {diff:.2g} (relative), "
                f"which qkdb sniff cannot explain{hint}")


def check_summary(recorder: Recorder, layers: list[int]) -> dict:
    """What the check established, for ``capture.check`` in ``qkdb_dataset.json``."""
    if not recorder.check:
        return {"method": "none (--unchecked)", "checked_layers": [], "unchecked_layers": sorted(layers)}
    checked = sorted(l for l in layers if l in recorder.max_difference and l not in recorder.unchecked)
    out = {
        "method": ("every stored row equals the layer's q_proj/k_proj output (through its q_norm/k_norm), "
                   "rotated by the layer's own cos/sin unless it applies no RoPE, with the position "
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

"""Where a layer's pre-RoPE queries and keys come from, for the row check of ``qkdb sniff``.

Each attention layer's projections are caught by forward hooks (only the rows some head keeps).
A layer has several candidate ways of turning those outputs into per-head pre-RoPE rows —
*variants* — and the recorder keeps the one (with one :class:`~qkdb.ingest.capture.rope_layout.Rotation`)
that reproduces what attention receives. The variants cover the layouts transformers' models use:

* separate ``q_proj``/``k_proj`` (Llama and most others), split into heads;
* one fused projection (``c_attn``, ``qkv_proj``, ``query_key_value``, ``W_pack``, ``Wqkv``) split as
  [q | k | v] (GPT-2, Phi-3), per head as [q_h | k_h | v_h] (GPT-NeoX/Pythia, Persimmon), or per
  KV group as [q … q | k | v] (Falcon's new decoder architecture);
* multi-head latent attention (DeepSeek-V2/V3): queries from ``q_proj``/``q_b_proj``; keys from
  ``kv_b_proj`` (the per-head non-rotated part) and ``kv_a_proj_with_mqa`` (the one rotary key all
  heads share);

each through the layer's own q/k norm when it has one (``q_norm``/``k_norm`` or
``q_layernorm``/``k_layernorm``), applied the three ways models apply them: per head, on a
heads-first tensor (StableLM's one norm per head), or over all heads at once (OLMo-2). The norm
modules are the model's own; which application is right is decided by the rows, like the rest.
Last, OLMo's and OLMoE's ``clip_qkv``: the config's clamp of every query and key to ±c, applied
after the norm and before RoPE, as their attention code does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

FUSED_NAMES = ("c_attn", "qkv_proj", "query_key_value", "W_pack", "Wqkv")
NORM_NAMES = (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm"))

# outputs (hook key -> torch tensor (n, width) of the kept rows) -> all heads' rows (n, heads, d)
Variant = tuple[str, Callable[[dict], object]]


@dataclass
class LayerSources:
    """The modules to hook and, per kind (``q``/``k``), the candidate ways to the pre-RoPE rows."""

    hooks: list[tuple[object, str]] = field(default_factory=list)  # (module, output key)
    variants: dict[str, list[Variant]] = field(default_factory=dict)
    reason: str | None = None  # why the layer's rows cannot be recomputed
    shared_key: tuple[int, int] | None = None  # MLA: (offset, dims) of the key slice all heads share


def _heads(n_heads: int, d: int, key: str, start: int = 0):
    def get(out):
        t = out[key]
        return t[:, start:start + n_heads * d].reshape(t.shape[0], n_heads, d)
    return get


def sources_of(attn, n_q: int, n_kv: int, d: int) -> LayerSources:
    """The candidate sources of one attention module's pre-RoPE rows, or why there are none."""
    name = type(attn).__name__
    if getattr(attn, "kv_a_proj_with_mqa", None) is not None and getattr(attn, "kv_b_proj", None) is not None:
        base = _mla(attn, n_q, n_kv, d)
    elif getattr(attn, "q_proj", None) is not None and getattr(attn, "k_proj", None) is not None:
        base = LayerSources([(attn.q_proj, "q"), (attn.k_proj, "k")],
                            {"q": [("q_proj", _heads(n_q, d, "q"))], "k": [("k_proj", _heads(n_kv, d, "k"))]})
    else:
        fused = next(((n, getattr(attn, n)) for n in FUSED_NAMES if getattr(attn, n, None) is not None), None)
        if fused is None:
            return LayerSources(reason=f"{name} has no q_proj/k_proj, fused {'/'.join(FUSED_NAMES)} or MLA projections")
        base = _fused(fused[0], fused[1], n_q, n_kv, d)
    if base.reason is not None:
        return base
    for q_name, k_name in NORM_NAMES:
        norms = {"q": getattr(attn, q_name, None), "k": getattr(attn, k_name, None)}
        if norms["q"] is not None or norms["k"] is not None:
            for kind, norm in norms.items():
                if norm is not None:
                    label = q_name if kind == "q" else k_name
                    base.variants[kind] = [v for src in base.variants[kind] for v in _normed(src, norm, label)]
            break
    clip = getattr(getattr(attn, "config", None), "clip_qkv", None)
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0:
        for kind in ("q", "k"):
            base.variants[kind] = [_clamped(src, float(clip)) for src in base.variants[kind]]
    return base


def _clamped(src: Variant, clip: float) -> Variant:
    """A variant's rows clamped to ±``clip`` (OLMo's ``clip_qkv``, between the projection (and norm) and RoPE)."""
    name, get = src
    return f"{name} → clamped to ±{clip:g} (the config's clip_qkv)", lambda out: get(out).clamp(-clip, clip)


def _fused(attr: str, module, n_q: int, n_kv: int, d: int) -> LayerSources:
    width = getattr(module, "out_features", None) or getattr(module, "nf", None)
    q, k = [], []
    if width is None or width >= (n_q + 2 * n_kv) * d:  # [q | k | v]
        q.append((f"{attr} as [q|k|v]", _heads(n_q, d, "qkv")))
        k.append((f"{attr} as [q|k|v]", _heads(n_kv, d, "qkv", n_q * d)))
    if n_q == n_kv and width in (None, 3 * n_q * d):  # [q_h | k_h | v_h] per head
        def part(i):
            return lambda out: out["qkv"].reshape(out["qkv"].shape[0], n_q, 3, d)[:, :, i]
        q.append((f"{attr} per head as [q_h|k_h|v_h]", part(0)))
        k.append((f"{attr} per head as [q_h|k_h|v_h]", part(1)))
    ratio = n_q // n_kv if n_kv and n_q % n_kv == 0 else None
    if ratio and ratio > 1 and width in (None, n_kv * (ratio + 2) * d):  # per KV group [q … q | k | v]
        def grouped(out):
            return out["qkv"].reshape(out["qkv"].shape[0], n_kv, ratio + 2, d)
        q.append((f"{attr} per KV group", lambda out: grouped(out)[:, :, :ratio].reshape(-1, n_q, d)))
        k.append((f"{attr} per KV group", lambda out: grouped(out)[:, :, ratio]))
    if not q:
        return LayerSources(reason=f"its fused {attr} has {width} outputs, which no known q/k/v layout of "
                                   f"{n_q} query and {n_kv} KV heads of {d} dims gives")
    return LayerSources([(module, "qkv")], {"q": q, "k": k})


def _mla(attn, n_q: int, n_kv: int, d: int) -> LayerSources:
    q_mod = getattr(attn, "q_proj", None) or getattr(attn, "q_b_proj", None)
    dims = [getattr(attn, a, None) for a in ("qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank", "v_head_dim")]
    if q_mod is None or any(not isinstance(x, int) for x in dims):
        return LayerSources(reason=f"{type(attn).__name__} is multi-head latent attention of a form qkdb sniff "
                                   "does not know (no q_proj/q_b_proj or head sizes)")
    nope, rope, lora, v = dims
    if nope + rope != d:
        return LayerSources(reason=f"its MLA head sizes ({nope} + {rope}) do not add up to the {d} dims attention "
                                   "receives")
    q_name = "q_proj" if getattr(attn, "q_proj", None) is not None else "q_b_proj"

    def keys(out):
        import torch

        kv = out["kv_b"]
        k_nope = kv.reshape(kv.shape[0], n_kv, nope + v)[:, :, :nope]
        k_rope = out["kv_a"][:, lora:lora + rope]
        return torch.cat([k_nope, k_rope[:, None, :].expand(-1, n_kv, -1)], dim=-1)

    return LayerSources(
        [(q_mod, "q"), (attn.kv_a_proj_with_mqa, "kv_a"), (attn.kv_b_proj, "kv_b")],
        {"q": [(q_name, _heads(n_q, d, "q"))], "k": [("kv_b_proj (non-rotated) + kv_a_proj_with_mqa (rotary)", keys)]},
        shared_key=(nope, rope),
    )


def _normed(src: Variant, norm, label: str) -> list[Variant]:
    """The three ways of applying a q/k norm to all heads' rows (n, heads, d)."""
    name, get = src

    def per_head(out):
        return norm(get(out))

    def heads_first(out):  # (1, heads, n, d): StableLM's one LayerNorm per head splits dim 1
        return norm(get(out).transpose(0, 1).unsqueeze(0))[0].transpose(0, 1)

    def all_heads(out):
        x = get(out)
        return norm(x.reshape(x.shape[0], -1)).reshape(x.shape)

    return [(f"{name} → {label} per head", per_head), (f"{name} → {label} per head, heads first", heads_first),
            (f"{name} → {label} over all heads", all_heads)]


def evaluate_tensor(variant: Variant, outputs: dict, n_heads: int, d: int):
    """All heads' pre-RoPE rows (n, heads, d) by one variant, as a tensor where the outputs are, or None when it
    does not apply.

    A variant that does not fit this model (a norm applied to a shape it refuses, a layout whose
    sizes do not match) is simply not a candidate: its exception is not the user's concern.
    """
    import torch

    try:
        with torch.inference_mode():
            x = variant[1](outputs)
    except Exception:  # noqa: BLE001 - a candidate that does not fit; the rows decide among the others
        return None
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or tuple(x.shape[1:]) != (n_heads, d):
        return None
    return x


def evaluate(variant: Variant, outputs: dict, n_heads: int, d: int) -> np.ndarray | None:
    """All heads' pre-RoPE rows (heads, n, d) float64 by one variant, or None when it does not apply."""
    x = evaluate_tensor(variant, outputs, n_heads, d)
    return None if x is None else x.double().transpose(0, 1).cpu().numpy()

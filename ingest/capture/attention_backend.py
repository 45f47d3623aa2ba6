"""Which attention function ``qkdb sniff`` hands every layer on to, and the mask builder that goes with it.

The recorder only reads queries and keys; the attention itself is computed by one of
transformers' implementations, chosen here (the one place that decides, so that a later
``--attn`` option or a device choice changes this module only):

* ``sdpa`` (transformers' ``sdpa_attention_forward`` with ``sdpa_mask``): the default;
* the model's own ``eager_attention_forward`` with ``eager_mask``, for models whose attention
  softcaps its logits (Gemma-2's ``attn_logit_softcapping``), which sdpa refuses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from qkdb.errors import SniffError


@dataclass(frozen=True)
class Backend:
    """An attention function and its mask builder (``transformers.AttentionMaskInterface`` signature)."""

    name: str
    forward: Callable
    mask: Callable
    why: str | None = None  # why not the default, for capture.attention


def softcap_of(config) -> float | None:
    """The attention-logit softcap the config declares (Gemma-2), or None."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(cfg, "attn_logit_softcapping", None)
    return float(value) if value else None


def choose(model, attn_modules: dict) -> Backend:
    """The attention implementation every layer is handed on to."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import eager_mask, sdpa_mask

    softcap = softcap_of(model.config)
    if softcap is None:
        return Backend("sdpa", sdpa_attention_forward, sdpa_mask)
    module = next(iter(attn_modules.values()), None)
    eager = getattr(importlib.import_module(type(module).__module__), "eager_attention_forward", None) \
        if module is not None else None
    if eager is None:
        raise SniffError(
            f"the model softcaps its attention logits (attn_logit_softcapping {softcap:g}), which sdpa does not "
            "support, and its modeling code has no eager attention to hand on to: qkdb sniff cannot run it"
        )
    return Backend(f"eager ({type(module).__module__.rsplit('.', 1)[-1]})", eager, eager_mask,
                   why=f"attn_logit_softcapping {softcap:g}: sdpa does not support softcapping")

"""Which attention function ``qkdb sniff`` hands every layer on to, and the mask builder that goes with it.

The recorder only reads queries and keys; the attention itself is computed by one of
transformers' implementations, chosen here (the one place that decides; ``--attn``):

* ``sdpa`` (transformers' ``sdpa_attention_forward`` with ``sdpa_mask``): the default;
* ``eager``: the model's own ``eager_attention_forward`` with ``eager_mask`` — also what the default
  picks for models whose attention softcaps its logits (Gemma-2's ``attn_logit_softcapping``),
  which sdpa refuses, and for models whose layers add learned per-head sink logits to the softmax
  (gpt-oss's ``sinks``), which sdpa and flash attention would silently drop (every later layer's
  queries and keys would then differ from the model's own);
* ``flash_attention_2``: transformers' ``flash_attention_forward`` with ``flash_attention_mask``,
  where the ``flash_attn`` package is installed, on a CUDA device, in float16 or bfloat16.
  transformers picks the flash kernel by the name in the model's config (ours, ``qkdb_capture``),
  so the function sees the layer through :class:`_AsFlash`, whose config names flash_attention_2.
"""

from __future__ import annotations

import copy
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


def has_sinks(attn_modules: dict) -> bool:
    """Whether the layers add a learned per-head sink logit to their softmax (gpt-oss's ``sinks`` parameter)."""
    return any(getattr(m, "sinks", None) is not None for m in attn_modules.values())


ATTENTIONS = ("auto", "sdpa", "eager", "flash_attention_2")


def check_request(attn: str, device_type: str | None = None, dtype: str | None = None) -> None:
    """Refuse ``--attn`` values that cannot run, before the model loads (``device_type``/``dtype`` when known)."""
    if attn not in ATTENTIONS:
        raise SniffError(f"--attn {attn!r}: expected one of {', '.join(ATTENTIONS)}", kind="usage")
    if attn != "flash_attention_2" or device_type is None:
        return
    from transformers.utils import is_flash_attn_2_available

    if device_type != "cuda":
        raise SniffError(f"--attn flash_attention_2 runs on CUDA GPUs, not on {device_type}", kind="usage")
    if dtype == "float32":
        raise SniffError("--attn flash_attention_2 computes in float16 or bfloat16: give --model-dtype bfloat16 "
                         "or float16", kind="usage")
    if not is_flash_attn_2_available():
        raise SniffError("--attn flash_attention_2: the flash_attn package is not installed "
                         "(pip install flash-attn), or not for this torch", kind="system")


def choose(model, attn_modules: dict, asked: str = "auto") -> Backend:
    """The attention implementation every layer is handed on to (``asked``: an entry of :data:`ATTENTIONS`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    softcap = softcap_of(model.config)
    if has_sinks(attn_modules):
        if asked in ("sdpa", "flash_attention_2"):
            raise SniffError(f"--attn {asked}: the model's attention adds a learned sink logit per head (gpt-oss), "
                             f"which {asked} drops: the model would not compute what it computes. Use --attn eager "
                             "(what the default picks)", kind="usage")
        return _eager(attn_modules, softcap, why="per-head sink logits (module.sinks): sdpa and flash attention drop them")
    if asked == "flash_attention_2":
        return _flash()
    if asked == "eager":
        return _eager(attn_modules, softcap, why="--attn eager")
    if softcap is None:
        return Backend("sdpa", sdpa_attention_forward, sdpa_mask)
    if asked == "sdpa":
        raise SniffError(f"--attn sdpa: the model softcaps its attention logits (attn_logit_softcapping {softcap:g}), "
                         "which sdpa does not support: use --attn eager (what the default picks) or flash_attention_2",
                         kind="usage")
    return _eager(attn_modules, softcap, why=f"attn_logit_softcapping {softcap:g}: sdpa does not support softcapping")


def _eager(attn_modules: dict, softcap: float | None, why: str) -> Backend:
    from transformers.masking_utils import eager_mask

    module = next(iter(attn_modules.values()), None)
    eager = getattr(importlib.import_module(type(module).__module__), "eager_attention_forward", None) \
        if module is not None else None
    if eager is None:
        need = (f"the model softcaps its attention logits (attn_logit_softcapping {softcap:g}), which sdpa does not "
                "support, and " if softcap is not None else "--attn eager: ")
        raise SniffError(f"{need}its modeling code has no eager attention to hand on to: qkdb sniff cannot run it")
    return Backend(f"eager ({type(module).__module__.rsplit('.', 1)[-1]})", eager, eager_mask, why=why)


class _AsFlash:
    """A layer's attention module as transformers' flash attention sees it: with a config naming flash_attention_2.

    ``flash_attention_forward`` loads its kernel by ``module.config._attn_implementation``; the
    model's own config must keep naming the capture (every layer looks its attention function up
    there), so the function gets this view: the module's attributes, and a copy of its config.
    """

    def __init__(self, module, configs: dict) -> None:
        self._module = module
        self._configs = configs  # the model's config -> its copy (one per capture)

    @property
    def config(self):
        cfg = self._module.config
        mine = self._configs.get(id(cfg))
        if mine is None or mine[0] is not cfg:
            copied = copy.copy(cfg)
            copied._attn_implementation_internal = "flash_attention_2"
            mine = self._configs[id(cfg)] = (cfg, copied)
        return mine[1]

    def __getattr__(self, name):
        return getattr(self._module, name)


def _flash() -> Backend:
    from transformers.integrations.flash_attention import flash_attention_forward
    from transformers.masking_utils import flash_attention_mask

    configs: dict = {}

    def forward(module, query, key, value, attention_mask, *args, **kwargs):
        return flash_attention_forward(_AsFlash(module, configs), query, key, value, attention_mask, *args, **kwargs)

    return Backend("flash_attention_2", forward, flash_attention_mask, why="--attn flash_attention_2")

"""The softmax normaliser from the attention kernel itself, where one returns it (issue 48).

Recomputing every sampled query's log-sum-exp (:mod:`.normaliser`) costs about as much as the
attention again. The kernel that computes the attention already has it: on the CPU,
``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` returns ``(output, logsumexp)``, and
it is the kernel ``torch.nn.functional.scaled_dot_product_attention`` itself runs for a causal
attention without a mask tensor. So for such a layer the capture calls that kernel in place of
transformers' ``sdpa_attention_forward`` and keeps its log-sum-exp.

Taken only where the result is the model's own to the bit:

* the capture hands attention on to sdpa, on the CPU, with no mask tensor (plain causal: no sliding
  window, no padding), causal, no dropout, no softcap, no sink logits, a prefill (as many keys as
  queries);
* the private op exists in this torch;
* the kernel's output equals sdpa's exactly, checked on the first layer of every shape and dtype
  (:class:`KernelLse` remembers the answer): otherwise every layer recomputes, and says why.

Everywhere else (a GPU, sliding windows, masks, softcaps, sinks) the normaliser is recomputed as
before, and ``capture.normaliser.layers[].lse_source`` records which was done.
"""

from __future__ import annotations

OP_NAME = "_scaled_dot_product_flash_attention_for_cpu"


class KernelLse:
    """Decides per layer call whether the kernel's log-sum-exp can be taken, and runs the kernel."""

    def __init__(self, torch, backend_name: str) -> None:
        self.torch = torch
        self.op = getattr(torch.ops.aten, OP_NAME, None) if backend_name == "sdpa" else None
        self.backend_name = backend_name
        self._verified: dict[tuple, bool] = {}  # (dtype, shapes) -> kernel output == sdpa's

    def why_not(self, module, query, key, value, attention_mask, kwargs) -> str | None:
        """Why this call's normaliser must be recomputed; None when the kernel may give it."""
        if self.backend_name != "sdpa":
            return f"attention is {self.backend_name}, which returns no log-sum-exp"
        if self.op is None:
            return f"this torch has no aten.{OP_NAME}"
        if query.device.type != "cpu":
            return f"on {query.device.type}, transformers' sdpa returns no log-sum-exp"
        if attention_mask is not None:
            return "attention was handed a mask tensor (sliding window or padding)"
        causal = kwargs.get("is_causal")
        if not (causal if causal is not None else getattr(module, "is_causal", True)):
            return "the layer is not causal"
        if kwargs.get("dropout") or kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None:
            return "dropout, a softcap or a position bias"
        if getattr(module, "sinks", None) is not None:
            return "the layer adds sink logits"
        if query.shape[2] < 2 or key.shape[2] != query.shape[2] or query.shape[1] % key.shape[1]:
            return "not a prefill of as many keys as queries"
        if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
            return "values of another head_dim than the queries (the kernel needs one)"
        if self._verified.get(self._signature(query, key, value)) is False:
            return "the kernel's output differed from sdpa's on this model"
        return None

    @staticmethod
    def _signature(query, key, value) -> tuple:
        return (query.dtype, tuple(query.shape[1:]), tuple(key.shape[1:]), tuple(value.shape[1:]))

    def attend(self, backend_forward, module, query, key, value, attention_mask, args, kwargs):
        """``(attention output as sdpa_attention_forward returns it, logsumexp (1, n_q, seq))``, or None
        when the kernel's output is not sdpa's (then the caller recomputes)."""
        scaling = kwargs.get("scaling")
        sig = self._signature(query, key, value)
        try:
            out, lse = self.op(query, key, value, 0.0, True, scale=scaling)
        except RuntimeError:  # (a shape or dtype this build's kernel refuses: recomputed, said once)
            self._verified[sig] = False
            return None
        # (the layout sdpa_attention_forward returns: batch, seq, heads, d)
        out = out.reshape(out.shape[0], -1, query.shape[2], value.shape[-1]).transpose(1, 2).contiguous()
        if sig not in self._verified:
            reference = backend_forward(module, query, key, value, attention_mask, *args, **kwargs)[0]
            self._verified[sig] = bool(self.torch.equal(out, reference))
            if not self._verified[sig]:
                return None
        return out, lse

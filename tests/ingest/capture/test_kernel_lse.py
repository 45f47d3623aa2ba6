"""The attention kernel's own log-sum-exp (issue 48): taken only where it is the model's own computation.

Real torch, real sdpa: the kernel's output must be sdpa's to the bit, its log-sum-exp the causal
log-sum-exp of the scaled logits (float64 reference), and every case the kernel cannot stand for
must be refused with its reason.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.sniff

from qkdb.ingest.capture.kernel_lse import KernelLse  # noqa: E402


class _Module:
    def __init__(self, groups: int, **attrs) -> None:
        self.num_key_value_groups = groups
        self.is_causal = True
        self.__dict__.update(attrs)


def _sdpa(module, query, key, value, attention_mask, *args, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, *args, **kwargs)


def _qkv(n_q=6, n_kv=2, seq=97, d=32, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    # (the layout attention receives: a transpose of (1, seq, heads, d), so not contiguous)
    q = torch.randn(1, seq, n_q, d, generator=g, dtype=dtype).transpose(1, 2)
    k = torch.randn(1, seq, n_kv, d, generator=g, dtype=dtype).transpose(1, 2)
    v = torch.randn(1, seq, n_kv, d, generator=g, dtype=dtype).transpose(1, 2)
    return q, k, v


def test_the_kernels_output_is_sdpas_and_its_lse_the_causal_log_sum_exp():
    pytest.importorskip("transformers")
    kl = KernelLse(torch, "sdpa")
    q, k, v = _qkv()
    module = _Module(3)
    kwargs = {"scaling": 0.3, "dropout": 0.0}
    assert kl.why_not(module, q, k, v, None, kwargs) is None
    out, lse = kl.attend(_sdpa, module, q, k, v, None, (), kwargs)
    assert torch.equal(out, _sdpa(module, q, k, v, None, **kwargs)[0])
    kr = k.repeat_interleave(3, dim=1).double()
    logits = 0.3 * q.double() @ kr.transpose(-1, -2)
    seq = q.shape[2]
    logits = logits.masked_fill(torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), -math.inf)
    assert torch.allclose(lse.double(), torch.logsumexp(logits, -1), rtol=0, atol=1e-5)


def test_every_case_the_kernel_does_not_stand_for_is_recomputed_with_its_reason():
    q, k, v = _qkv()
    module = _Module(3)
    ok = {"scaling": 0.3}
    assert "eager" in KernelLse(torch, "eager (modeling_llama)").why_not(module, q, k, v, None, ok)
    kl = KernelLse(torch, "sdpa")
    mask = torch.zeros(1, 1, q.shape[2], q.shape[2])
    assert "mask" in kl.why_not(module, q, k, v, mask, ok)
    assert "softcap" in kl.why_not(module, q, k, v, None, {**ok, "softcap": 30.0})
    assert "not causal" in kl.why_not(module, q, k, v, None, {**ok, "is_causal": False})
    assert "sink" in kl.why_not(_Module(3, sinks=torch.zeros(6)), q, k, v, None, ok)
    assert "prefill" in kl.why_not(module, q[:, :, :1], k, v, None, ok)
    assert "head_dim" in kl.why_not(module, q, k, v[..., :16], None, ok)


def test_a_kernel_output_that_differs_from_sdpas_turns_the_kernel_off_for_that_shape():
    kl = KernelLse(torch, "sdpa")
    q, k, v = _qkv()
    module = _Module(3)

    def another(module, query, key, value, attention_mask, *args, **kwargs):  # an attention that is not sdpa's
        return _sdpa_math(query, key, value, kwargs["scaling"]) + 1e-3, None

    assert kl.attend(another, module, q, k, v, None, (), {"scaling": 0.3}) is None
    assert "differed" in kl.why_not(module, q, k, v, None, {"scaling": 0.3})


def _sdpa_math(q, k, v, scale):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    return out.transpose(1, 2).contiguous()

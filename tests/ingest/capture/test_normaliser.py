"""The sampled queries' softmax normaliser (ingest/capture/normaliser.py) against the full attention matrix.

The reference builds every logit of the layer (all queries × all keys), masks, caps and adds the
sinks the way transformers' eager attention does, and takes torch.logsumexp of the sampled rows: the
blocked computation must give the same numbers whatever its block size.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.sniff

from qkdb.ingest.capture.normaliser import sampled_lse  # noqa: E402

SEQ, D, NQ, NKV = 97, 8, 4, 2


def _layer(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, NQ, SEQ, D, generator=g, dtype=torch.float64) * 2,
            torch.randn(1, NKV, SEQ, D, generator=g, dtype=torch.float64) * 2)


def _reference(q, k, scaling, softcap=None, window=None, mask=None, sinks=None):
    """Every row's normaliser from the whole (n_q, seq, seq) logit matrix, as eager attention builds it."""
    kk = k.repeat_interleave(NQ // NKV, dim=1)
    logits = (q[0] @ kk[0].transpose(1, 2)) * scaling
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    t = torch.arange(SEQ)[:, None]
    s = torch.arange(SEQ)[None, :]
    if mask is None:
        seen = s <= t
        if window:
            seen = seen & (t - s < window)
        logits = logits.masked_fill(~seen, -math.inf)
    elif mask.dtype == torch.bool:
        logits = logits.masked_fill(~mask[0], -math.inf)
    else:
        logits = logits + mask[0]
    if sinks is not None:
        logits = torch.cat([logits, sinks[:, None, None].expand(NQ, SEQ, 1)], dim=-1)
    return torch.logsumexp(logits, dim=-1)  # (n_q, seq)


def _rows(seed=1, n=60):
    rng = np.random.default_rng(seed)
    heads = rng.integers(0, NQ, n)
    positions = rng.integers(0, SEQ, n)
    positions[:4] = [0, 1, SEQ - 1, 3]  # the first key alone, and the last query
    return torch.from_numpy(heads), torch.from_numpy(positions)


@pytest.mark.parametrize("case", ["causal", "window", "softcap", "sinks", "bool mask", "additive mask"])
@pytest.mark.parametrize("block", [7, 200, 1 << 22])
def test_the_normaliser_of_each_sampled_row_is_the_full_matrixs(case, block):
    q, k = _layer()
    heads, positions = _rows()
    kw = {}
    if case == "window":
        kw["window"] = 16
    elif case == "softcap":
        kw["softcap"] = 5.0
    elif case == "sinks":
        kw["sinks"] = torch.tensor([0.5, -1.0, 3.0, 0.0], dtype=torch.float64)
    elif case.endswith("mask"):
        rng = np.random.default_rng(3)
        allowed = torch.from_numpy(np.tril(rng.random((SEQ, SEQ)) < 0.7) | np.eye(SEQ, dtype=bool))[None, None]
        kw["mask"] = allowed if case == "bool mask" else torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, torch.finfo(torch.float64).min)
    want = _reference(q, k, 0.35, **kw)[heads, positions]
    got = sampled_lse(torch, q, k, heads, positions, scaling=0.35, block=block, **kw)
    assert torch.allclose(got, want, rtol=0, atol=1e-12), (got - want).abs().max()


def test_weights_from_it_sum_to_one_over_every_seen_key_and_memory_is_bounded():
    q, k = _layer(5)
    heads, positions = _rows(7, n=30)
    lse = sampled_lse(torch, q, k, heads, positions, scaling=0.5, window=20, block=50)
    kv = heads // (NQ // NKV)
    logits = torch.einsum("nd,nsd->ns", q[0][heads, positions], k[0][kv]) * 0.5
    s = torch.arange(SEQ)[None, :]
    seen = (s <= positions[:, None]) & (positions[:, None] - s < 20)
    weights = torch.exp(logits - lse[:, None]) * seen
    assert torch.allclose(weights.sum(dim=1), torch.ones(len(heads), dtype=torch.float64), atol=1e-12)
    # float32 where a GPU would compute: the same up to its rounding
    lse32 = sampled_lse(torch, q, k, heads, positions, scaling=0.5, window=20, dtype=torch.float32)
    assert lse32.dtype == torch.float32 and torch.allclose(lse32.double(), lse, atol=1e-4)


def test_no_rows_no_work():
    q, k = _layer()
    empty = torch.zeros(0, dtype=torch.int64)
    assert sampled_lse(torch, q, k, empty, empty, scaling=1.0).shape == (0,)

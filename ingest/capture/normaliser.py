"""The softmax normaliser of each sampled query: ``lse_t = log Σ_s exp(logit(t, s))`` over every key the
query attended to, so that a captured key's attention weight is exact without any attention matrix:
``a(t, s) = exp(logit(t, s) − lse_t)``.

``logit(t, s)`` is what the layer's attention computed: ``scaling · q_tᵀk_s``, soft-capped
(``softcap · tanh(x / softcap)``, Gemma-2) where the layer caps, plus the layer's mask (causal,
sliding window: key ``s`` is seen by query ``t`` when ``0 <= t − s < window``; or the additive or
boolean mask tensor attention was handed, which then decides alone). A family whose attention adds
a per-head *sink* logit to the softmax (gpt-oss) has it added to the sum: the captured keys'
weights then leave the sink's share out, as the model's do.

Computed for the sampled rows only, from the layer's full keys, one KV head at a time, in blocks of
rows so that memory stays about ``block`` logits whatever the number of rows; keys after a block's
last query are never read (causal). (A block holds all of its rows' keys up to the last: at 128k
tokens that is ~32 rows of 131,072 logits.)
"""

from __future__ import annotations

import math

# Logits of one block: 4M (16 MB in float32), whatever the number of rows.
BLOCK = 1 << 22


def sampled_lse(torch, query, key, heads, positions, *, scaling: float, softcap: float | None = None,
                window: int | None = None, mask=None, sinks=None, block: int = BLOCK, dtype=None):
    """The log-sum-exp of each sampled query row's logits over the keys its layer let it see.

    Parameters
    ----------
    torch
        The torch module.
    query, key : tensor
        The layer's queries ``(1, n_q, seq, d)`` and keys ``(1, n_kv, seq, d)`` as attention received them.
    heads, positions : tensor of int64
        The sampled rows: query head and position of each (on the tensors' device).
    scaling : float
        What attention multiplied ``qᵀk`` by.
    softcap : float, optional
        The layer's logit softcap.
    window : int, optional
        The layer's sliding window (keys with ``t − s < window`` are seen); ignored when ``mask`` is given.
    mask : tensor, optional
        The 4-d mask attention was handed, ``(1, 1 or n_q, seq, seq)``: boolean (True: attend) or
        additive. None: causal (and ``window``).
    sinks : tensor, optional
        Per-head sink logits ``(n_q,)`` the softmax adds to its sum.
    block : int
        Logits computed at once (rows × keys).
    dtype : torch dtype, optional
        Computed in this type: by default float32 for a model computing in float32 or half precision
        (as its attention does), float64 for float64 inputs.

    Returns
    -------
    tensor
        ``(n,)`` the normaliser of each row, in ``dtype``; ``-inf`` for a row that sees no key.
    """
    device = query.device
    if dtype is None:
        dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    n = int(heads.shape[0])
    out = torch.full((n,), -math.inf, dtype=dtype, device=device)
    if n == 0:
        return out
    group = query.shape[1] // key.shape[1]
    kv_heads = heads // group
    # One KV head at a time: its rows' logits are one matrix product with its keys (no gathered copy
    # of the keys per row), rows in position order so a block of them reads keys up to its last only.
    for kv in torch.unique(kv_heads).tolist():
        idx = torch.nonzero(kv_heads == kv).flatten()
        idx = idx[torch.argsort(positions[idx])]
        keys = key[0, kv].to(dtype)  # (seq, d)
        rows_per = max(1, min(len(idx), block // max(1, keys.shape[0])))
        for r0 in range(0, len(idx), rows_per):
            sel = idx[r0:r0 + rows_per]
            t, h = positions[sel], heads[sel]
            q = query[0][h, t].to(dtype)  # (r, d)
            last = int(t.max()) + 1
            logits = (q @ keys[:last].T) * scaling  # (r, last)
            if softcap:
                logits = softcap * torch.tanh(logits / softcap)
            if mask is None:
                s = torch.arange(last, device=device)
                seen = s[None, :] <= t[:, None]
                if window:
                    seen &= (t[:, None] - s[None, :]) < window
                logits = logits.masked_fill(~seen, -math.inf)
            else:
                m = mask[0, h if mask.shape[1] > 1 else 0, t][:, :last]
                logits = logits.masked_fill(~m, -math.inf) if m.dtype == torch.bool else logits + m.to(dtype)
            out[sel] = torch.logsumexp(logits, dim=1)
    if sinks is not None:
        out = torch.logaddexp(out, sinks.to(device=device, dtype=dtype)[heads])
    return out

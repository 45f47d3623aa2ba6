"""The softmax normaliser of each sampled query: ``lse_t = log Σ_s exp(logit(t, s))`` over every key the
query attended to, so that a captured key's attention weight is exact without any attention matrix:
``a(t, s) = exp(logit(t, s) − lse_t)``.

``logit(t, s)`` is what the layer's attention computed: ``scaling · q_tᵀk_s``, soft-capped
(``softcap · tanh(x / softcap)``, Gemma-2) where the layer caps, plus the layer's mask (causal,
sliding window: key ``s`` is seen by query ``t`` when ``0 <= t − s < window``; or the additive or
boolean mask tensor attention was handed, which then decides alone). A family whose attention adds
a per-head *sink* logit to the softmax (gpt-oss) has it added to the sum: the captured keys'
weights then leave the sink's share out, as the model's do.

Computed for the sampled rows only, from the layer's full keys, in blocks of rows × keys so memory
stays bounded (about ``block`` elements) at any context length; keys after a block's last query are
never read (causal).
"""

from __future__ import annotations

import math

# Elements of one block of logits: 4M float64 = 32 MB, whatever the context length.
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
        Computed in this type (default float64 on the CPU, float32 elsewhere).

    Returns
    -------
    tensor
        ``(n,)`` the normaliser of each row, in ``dtype``; ``-inf`` for a row that sees no key.
    """
    device = query.device
    if dtype is None:
        dtype = torch.float64 if device.type == "cpu" else torch.float32
    n = int(heads.shape[0])
    out = torch.full((n,), -math.inf, dtype=dtype, device=device)
    if n == 0:
        return out
    n_q, n_kv = query.shape[1], key.shape[1]
    group = n_q // n_kv
    seq = key.shape[2]
    q = query[0][heads, positions].to(dtype)  # (n, d)
    kv_heads = heads // group
    order = torch.argsort(positions)  # causal: a block of rows needs keys up to its last position only
    rows_per = max(1, min(n, block // max(1, seq)))
    key_step = max(1, block // rows_per)
    for r0 in range(0, n, rows_per):
        sel = order[r0:r0 + rows_per]
        t = positions[sel]
        last = int(t.max()) + 1
        qh, kh = q[sel], kv_heads[sel]
        acc = torch.full((len(sel),), -math.inf, dtype=dtype, device=device)
        for s0 in range(0, last, key_step):
            s1 = min(last, s0 + key_step)
            k = key[0, :, s0:s1].to(dtype)  # (n_kv, c, d)
            logits = torch.einsum("nd,ncd->nc", qh, k[kh]) * scaling
            if softcap:
                logits = softcap * torch.tanh(logits / softcap)
            s = torch.arange(s0, s1, device=device)
            if mask is None:
                seen = s[None, :] <= t[:, None]
                if window:
                    seen &= (t[:, None] - s[None, :]) < window
                logits = logits.masked_fill(~seen, -math.inf)
            else:
                m = mask[0, heads[sel] if mask.shape[1] > 1 else 0, t][:, s0:s1]
                logits = logits.masked_fill(~m, -math.inf) if m.dtype == torch.bool else logits + m.to(dtype)
            acc = torch.logaddexp(acc, torch.logsumexp(logits, dim=1))
        out[sel] = acc
    if sinks is not None:
        out = torch.logaddexp(out, sinks.to(device=device, dtype=dtype)[heads])
    return out

"""Attention mass from a captured softmax normaliser (table ``attention_mass``; docs/attention.md).

A capture that stored each query's normaliser ``lse_t`` (``qkdb sniff``'s column ``lse``) makes the
weight of every captured key ``s`` of the query's own text exact:
``a(t, s) = exp(logit(t, s) − lse_t)``, ``logit = scaling · q_tᵀk_s`` soft-capped where the layer
caps, zero for keys the layer hides (after the query, or outside its sliding window). Per query:

* ``token0``: the weight on token 0 (NaN when position 0's key was not captured for its text);
* ``tokens0_3``: on tokens 0–3 (NaN unless every one of them up to the query was captured);
* ``recent_W``: on the captured keys within W tokens (``0 <= t − s < W``): exact when every key there
  was captured, else a lower bound;
* ``captured``: on all captured keys — the share of the query's attention they explain;
* ``sink_margin``: ``logit(t, 0)`` minus the largest other captured logit (NaN without both);
* ``advantage``: token 0's logit advantage over the head's typical key,
  ``A_t = scaling · q_tᵀ(k_0 − k̄)`` (before any softcap), ``k_0`` the key at position 0 of the query's
  text and ``k̄`` the mean of the head's captured keys at every other position (NaN without ``k_0``).
  Its mean over queries is the *bias* part every query shares, the rest its *content* part: the
  share ``mean(A)² / mean(A²)`` is how position-driven the mass on token 0 is (docs/attention.md).

Per head these are averaged over the queries of each position bin (:data:`BIN_EDGES`).
"""

from __future__ import annotations

import numpy as np

WINDOWS = (64, 256, 1024)
# Query-position bins: [0, 4), [4, 16), [16, 64), ... — powers of 4, so that 64 (Gu et al.'s texts)
# and every recency window is a bin edge.
BIN_EDGES = np.array([0, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 40], np.int64)
QUANTITIES = ("token0", "tokens0_3", *(f"recent_{w}" for w in WINDOWS), "captured", "sink_margin", "advantage")
# each quantity's column in the table (the advantage also gets its mean square: see head_attention_mass)
COLUMNS = {**{q: f"mass_{q}" for q in QUANTITIES}, "captured": "captured_share", "sink_margin": "sink_margin",
           "advantage": "token0_advantage"}


def query_masses(Q, t_q, q_text, lse, K, t_k, k_text, *, scaling: float, softcap: float | None = None,
                 window: int | None = None) -> dict[str, np.ndarray]:
    """Each query's attention mass (module doc) from its text's captured keys; float64 arrays of ``len(Q)``."""
    Q = np.asarray(Q, np.float64)
    K = np.asarray(K, np.float64)
    t_q, t_k = np.asarray(t_q, np.int64), np.asarray(t_k, np.int64)
    q_text, k_text = np.asarray(q_text), np.asarray(k_text)
    lse = np.asarray(lse, np.float64)
    n = len(Q)
    out = {name: np.full(n, np.nan) for name in QUANTITIES}
    others_k = t_k != 0
    typical = K[others_k].mean(axis=0) if others_k.any() else None
    for text in np.unique(q_text):  # (a loop over texts; each text's pairs in one product)
        qi = np.flatnonzero(q_text == text)
        ki = np.flatnonzero(k_text == text)
        if ki.size == 0:
            continue
        t, s = t_q[qi], t_k[ki]
        logits = scaling * (Q[qi] @ K[ki].T)
        if softcap:
            logits = softcap * np.tanh(logits / softcap)
        lag = t[:, None] - s[None, :]
        seen = lag >= 0
        if window:
            seen &= lag < window
        w = np.where(seen, np.exp(np.where(seen, logits, 0.0) - lse[qi][:, None]), 0.0)
        out["captured"][qi] = w.sum(axis=1)
        for win in WINDOWS:
            out[f"recent_{win}"][qi] = (w * (lag < win)).sum(axis=1)
        zero = np.flatnonzero(s == 0)
        if zero.size:
            j = zero[0]
            out["token0"][qi] = w[:, j]
            others = np.where(seen & (s[None, :] != 0), logits, -np.inf).max(axis=1)
            # (token 0 outside the query's window takes no weight, and has no margin)
            out["sink_margin"][qi] = np.where(np.isfinite(others) & seen[:, j], logits[:, j] - others, np.nan)
            if typical is not None:
                out["advantage"][qi] = scaling * (Q[qi] @ (K[ki[j]] - typical))
        first = s < 4
        need = np.minimum(t, 3) + 1  # tokens 0..min(3, t), captured (a masked one counts, with weight 0)
        have = ((lag >= 0) & first[None, :]).sum(axis=1)
        out["tokens0_3"][qi] = np.where(have == need, (w * first[None, :]).sum(axis=1), np.nan)
    return out


def head_attention_mass(Q, t_q, q_text, lse, K, t_k, k_text, *, scaling, softcap=None, window=None) -> dict:
    """A head's ``attention_mass`` rows: per query-position bin with queries, the mean of each quantity
    over the queries that have it, the mean square of the token-0 advantage, and how many queries
    there are (and how many saw token 0)."""
    per = query_masses(Q, t_q, q_text, lse, K, t_k, k_text, scaling=scaling, softcap=softcap, window=window)
    t = np.asarray(t_q, np.int64)
    b = np.searchsorted(BIN_EDGES, t, side="right") - 1
    bins = np.unique(b)
    cols: dict[str, list] = {"bin": [], "q_lo": [], "q_hi": [], "n_queries": [], "n_token0": []}
    cols.update({COLUMNS[q]: [] for q in QUANTITIES})
    cols["token0_advantage_sq"] = []
    for bi in bins:  # (a handful of bins)
        rows = b == bi
        cols["bin"].append(int(bi))
        cols["q_lo"].append(int(BIN_EDGES[bi]))
        cols["q_hi"].append(int(BIN_EDGES[bi + 1]))
        cols["n_queries"].append(int(rows.sum()))
        cols["n_token0"].append(int(np.isfinite(per["token0"][rows]).sum()))
        for q in QUANTITIES:
            v = per[q][rows]
            v = v[np.isfinite(v)]
            cols[COLUMNS[q]].append(float(v.mean()) if v.size else np.nan)
        adv = per["advantage"][rows]
        adv = adv[np.isfinite(adv)]
        # (the mean square, so that the bias share can be taken over any union of bins)
        cols["token0_advantage_sq"].append(float(np.mean(adv * adv)) if adv.size else np.nan)
    return {k: np.asarray(v) for k, v in cols.items()}

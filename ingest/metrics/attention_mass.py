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

Per head these are averaged over the queries of each position bin (:data:`BIN_EDGES`), and the
weight on token 0 also per text and bin (:func:`text_attention_mass`: Gu et al.'s per-sequence α₁ is
the width-weighted mean of a text's bins below the context, the view ``sink_texts``).
"""

from __future__ import annotations

import numpy as np

WINDOWS = (64, 256, 1024)
# Query-position bins: [0, 4), [4, 16), [16, 64), ... — powers of 4, so that 64 (Gu et al.'s texts)
# and every recency window is a bin edge.
BIN_EDGES = np.array([0, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 40], np.int64)
QUANTITIES = ("token0", "tokens0_3", *(f"recent_{w}" for w in WINDOWS), "captured", "sink_margin", "advantage")
# each quantity's column in the table (the advantage also gets its mean square: see bin_attention_mass)
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


def position_bin(t) -> np.ndarray:
    """The query-position bin (index into :data:`BIN_EDGES`) of each position."""
    return np.searchsorted(BIN_EDGES, np.asarray(t, np.int64), side="right") - 1


def text_extents(texts_list, positions_list) -> tuple[np.ndarray, np.ndarray]:
    """(text ids, one past the last position captured of each) over several (texts, positions) arrays."""
    texts = np.concatenate([np.asarray(t) for t in texts_list])
    pos = np.concatenate([np.asarray(p, np.int64) for p in positions_list])
    ids, inv = np.unique(texts, return_inverse=True)
    last = np.full(len(ids), -1, np.int64)
    np.maximum.at(last, inv, pos)
    return ids, last + 1


def text_attention_mass(token0, t_q, q_text, *, extent=None, max_position: int = 1024) -> dict:
    """Per text and query-position bin (bins below ``max_position`` only): the mean weight on token 0
    over the text's captured queries in the bin that saw it (``alpha0``) and how many there are.

    Gu et al. (2025) threshold a head's α₁ = (1/T) Σ_{t<T} A_{t,0} per text; from these rows it is
    Σ_b w_b alpha0_b / Σ_b w_b over the bins below T, ``w_b`` the bin's width (view ``sink_texts``):
    exactly α₁ for a capture of every position, and for a sampled one each bin weighs what its
    positions do, not what the sample drew (``--keep-first`` keeps all of [0, 4)).

    ``extent``: (text ids, one past each text's last position), from :func:`text_extents`; a bin's
    ``q_hi`` is cut there, so that the last bin of a text shorter than the bin weighs the positions
    the text has (a 32-token text's [16, 64) is [16, 32)). Without it, the text's last captured query.
    """
    token0 = np.asarray(token0, np.float64)
    t = np.asarray(t_q, np.int64)
    texts = np.asarray(q_text)
    keep = np.isfinite(token0) & (t < max_position)
    t, texts, token0 = t[keep], texts[keep], token0[keep]
    b = position_bin(t)
    # one group per (text, bin), by a lexicographic sort: no loop over queries
    order = np.lexsort((b, texts))
    texts, b, token0 = texts[order], b[order], token0[order]
    starts = np.flatnonzero(np.r_[True, (texts[1:] != texts[:-1]) | (b[1:] != b[:-1])]) if len(b) else np.array([], np.int64)
    counts = np.diff(np.r_[starts, len(b)])
    sums = np.add.reduceat(token0, starts) if len(b) else np.array([])
    bins = b[starts]
    ids = texts[starts]
    if extent is None:
        extent = text_extents([texts], [t])
    known, ends = extent
    end = ends[np.searchsorted(known, ids)] if len(ids) else np.array([], np.int64)
    return {"example_id": ids.astype(np.int64), "bin": bins.astype(np.int32),
            "q_lo": BIN_EDGES[bins], "q_hi": np.minimum(BIN_EDGES[bins + 1], end), "n_queries": counts.astype(np.int64),
            "alpha0": sums / np.maximum(counts, 1)}


def bin_attention_mass(per: dict, t_q, extent: int) -> dict:
    """A head's ``attention_mass`` rows from its queries' masses (:func:`query_masses`) at positions
    ``t_q``: per query-position bin with queries, the mean of each quantity over the queries that have
    it, the mean square of the token-0 advantage, and how many queries there are (and how many saw
    token 0). ``extent``: one past the last position of the head's texts (its queries' and keys'); the
    last bin's ``q_hi`` is cut there."""
    t = np.asarray(t_q, np.int64)
    b = position_bin(t)
    bins = np.unique(b)
    cols: dict[str, list] = {"bin": [], "q_lo": [], "q_hi": [], "n_queries": [], "n_token0": []}
    cols.update({COLUMNS[q]: [] for q in QUANTITIES})
    cols["token0_advantage_sq"] = []
    for bi in bins:  # (a handful of bins)
        rows = b == bi
        cols["bin"].append(int(bi))
        cols["q_lo"].append(int(BIN_EDGES[bi]))
        cols["q_hi"].append(int(min(BIN_EDGES[bi + 1], extent)))
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

"""The recency term in the logits (SPEC §4.5, table ``recency``): seed 002's ``mu_Q^a · alpha_K`` against what the logits do.

Seed 002 claims a parametric recency term ``mu_Q^a · alpha_K · j`` in the attention logits. Measured
directly: for each query ``q_i`` at position ``t_i``, the OLS slope in ``s`` of its logits
``q_iᵀk_s`` over the keys of its own text at ``s < t_i``. Per head, the mean slope weighted by keys
per query (``logit_slope``), its standard error over texts, and the prediction ``bias_strength``.
Logits before the attention scale, per token, as bias_strength.

The slope is linear in ``q``: ``slope_i = q_iᵀ c_i / v_i`` with ``c_i = Σ_s (s − s̄)(k_s − k̄)`` and
``v_i = Σ_s (s − s̄)²`` over the query's keys. Those sums are prefix sums over a text's keys in
position order, so every query's slope costs O(d), not a pass over its keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KeyPrefix:
    """A key head's side of every query's slope: its keys text by text in position order, and the
    prefix sums of ``k``, ``u·k``, ``u`` and ``u²`` over them (``u``: position from the text's first key).

    Built once per key head (:meth:`of`) and shared by the query heads that read it (GQA): the
    prefix sums are most of the work of a head's slopes.
    """

    uniq: np.ndarray  # the texts, ascending
    start: np.ndarray  # where each text's keys begin
    which: np.ndarray  # each sorted key's text number
    ts: np.ndarray  # each sorted key's position
    S_k: np.ndarray
    S_uk: np.ndarray
    S_u: np.ndarray
    S_uu: np.ndarray

    @classmethod
    def of(cls, K: np.ndarray, t_k: np.ndarray, k_text: np.ndarray) -> "KeyPrefix":
        K = np.asarray(K, np.float64)
        t_k = np.asarray(t_k, np.float64)
        k_text = np.asarray(k_text)
        order = np.lexsort((t_k, k_text))
        texts = k_text[order]
        ts = t_k[order]
        uniq, start = np.unique(texts, return_index=True)
        which = np.searchsorted(uniq, texts)
        u = ts - ts[start][which]  # (positions from the text's first key: the sums stay small and exact)
        Ks = K[order]
        return cls(uniq, start, which, ts, _prefix_rows(Ks), _prefix_rows(Ks, scale=u),
                   np.concatenate([[0.0], np.cumsum(u)]), np.concatenate([[0.0], np.cumsum(u * u)]))


def query_slopes(Q: np.ndarray, t_q: np.ndarray, q_text: np.ndarray, K: np.ndarray | None, t_k: np.ndarray | None,
                 k_text: np.ndarray | None, keys: KeyPrefix | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each query's OLS slope of ``qᵀk_s`` on ``s`` over its text's keys at ``s < t``, and how many keys that is.

    ``keys``: the :class:`KeyPrefix` of ``K, t_k, k_text`` when the caller has it (those may then be None).

    Returns
    -------
    (slope, n_keys) : float64 (NaN with fewer than 2 keys, or keys all at one position) and int64 arrays.
    """
    Q = np.asarray(Q, np.float64)
    t_q = np.asarray(t_q, np.float64)
    q_text = np.asarray(q_text)
    n_q, d = Q.shape
    # Every text's keys in position order, one after the other; prefix sums over all of them, each
    # query's sums the difference of two prefixes (its text's start and its own cut).
    if keys is None:
        keys = KeyPrefix.of(K, t_k, k_text)
    uniq, start, which, ts = keys.uniq, keys.start, keys.which, keys.ts
    S_u, S_uu = keys.S_u, keys.S_uu
    slope = np.full(n_q, np.nan)
    count = np.zeros(n_q, np.int64)
    if uniq.size == 0:
        return slope, count
    pos = np.searchsorted(uniq, q_text)
    known = (pos < uniq.size) & (uniq[np.minimum(pos, uniq.size - 1)] == q_text)
    qi = np.flatnonzero(known)
    if qi.size == 0:
        return slope, count
    t_idx = pos[qi]
    a = start[t_idx]
    # keys of the query's text strictly before it: [a, j). One search over (text, position) as one
    # number: texts laid end to end, each a span wider than every position.
    base = min(float(ts.min()), float(t_q[qi].min()))
    span = max(float(ts.max()), float(t_q[qi].max())) - base + 2.0
    j = np.searchsorted(which * span + (ts - base), t_idx * span + (t_q[qi] - base), side="left")
    n = (j - a).astype(np.float64)
    count[qi] = j - a
    Qi = Q[qi]
    with np.errstate(invalid="ignore", divide="ignore"):
        su = S_u[j] - S_u[a]
        mean_u = su / n
        v = (S_uu[j] - S_uu[a]) - n * mean_u * mean_u
        # qᵀΣ (u − ū) k = qᵀΣ u k − ū qᵀΣ k
        s = (_row_dots(Qi, keys.S_uk, j, a) - mean_u * _row_dots(Qi, keys.S_k, j, a)) / v
    # (a single key, or keys at one position: no slope; v below round-off of its terms: none either)
    ok = (n >= 2) & (v > 1e-9 * np.maximum(S_uu[j] - S_uu[a], 1.0))
    slope[qi] = np.where(ok, s, np.nan)
    return slope, count


def _row_dots(Qi: np.ndarray, S: np.ndarray, j: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``qᵢᵀ(S[jᵢ] − S[aᵢ])`` for every row: two gathers and dots, no difference array."""
    return np.einsum("ij,ij->i", Qi, S[j]) - np.einsum("ij,ij->i", Qi, S[a])


def _prefix_rows(X: np.ndarray, block: int = 64, scale: np.ndarray | None = None) -> np.ndarray:
    """Prefix sums of the rows of ``X`` (n, d) with a zero row first: row j is the sum of the first j rows.

    In blocks of ``block`` rows: numpy's ``cumsum(axis=0)`` walks each column with a stride of a row
    (about 3× slower here, docs/benchmarks.md); adding whole rows of every block at once, then each
    block's offset, is contiguous. Same sums up to the order of additions (float64 round-off).
    ``scale``: the rows of ``X`` times these first.
    """
    n, d = X.shape
    nb = -(-n // block)
    out = np.zeros((1 + nb * block, d))
    Y = out[1:].reshape(nb, block, d)
    if scale is None:
        out[1:n + 1] = X
    else:
        np.multiply(X, scale[:, None], out=out[1:n + 1])
    for r in range(1, block):
        np.add(Y[:, r], Y[:, r - 1], out=Y[:, r])
    if nb > 1:
        Y[1:] += np.cumsum(Y[:-1, -1], axis=0)[:, None, :]
    return out[:n + 1]


def head_recency(Q, t_q, q_text, K, t_k, k_text, bias_strength: float | None, keys: KeyPrefix | None = None) -> dict:
    """A head's ``recency`` row: the mean logit slope (weighted by keys), its standard error over texts, the prediction.

    The standard error treats texts as clusters: the weighted mean's linearised variance,
    ``Σ_e w_e²(m_e − m)² / (Σ_e w_e)² · E/(E − 1)`` for E texts with weights (keys) w_e and means m_e;
    NULL with one text.
    """
    slope, n = query_slopes(Q, t_q, q_text, K, t_k, k_text, keys=keys)
    ok = np.isfinite(slope)
    w = np.where(ok, n, 0).astype(np.float64)
    total = float(w.sum())
    mean = float((w * np.where(ok, slope, 0.0)).sum() / total) if total > 0 else math.nan
    se = math.nan
    texts = np.asarray(q_text)[ok]
    if total > 0:
        uniq, inv = np.unique(texts, return_inverse=True)
        if uniq.size > 1:
            se_terms = np.bincount(inv, weights=w[ok] * (slope[ok] - mean))  # Σ_i w_i (s_i − m) per text
            e = uniq.size
            se = math.sqrt(float((se_terms ** 2).sum()) / total ** 2 * e / (e - 1.0))
    predicted = math.nan if bias_strength is None else float(bias_strength)
    return {
        "logit_slope": mean,
        "logit_slope_se": se,
        "predicted_slope": predicted,
        "slope_ratio": mean / predicted if predicted and math.isfinite(predicted) and math.isfinite(mean) else math.nan,
        "n_queries": int(ok.sum()),
        "n_texts": int(np.unique(texts).size) if ok.any() else 0,
        "mean_keys": float(w[ok].mean()) if ok.any() else math.nan,
    }

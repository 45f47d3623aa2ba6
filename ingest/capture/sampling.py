"""Seeded choices of what ``qkdb sniff`` keeps: which heads, and which token positions per text.

Everything here is plain numpy and deterministic given the seed, so a capture can be
reproduced (and tested) without a model. The policy follows qk-sniffer, the tool that
produced the seeds' data:

* **Query heads** are a seeded sample, without replacement, of all ``n_layers × n_q_heads``
  (layer, head) pairs; all of them when fewer than asked for.
* **Key heads** are not sampled: they are the KV heads the sampled query heads read under
  grouped-query attention, ``kv = h // (n_q_heads / n_kv_heads)``.
* **Positions** are drawn per text and per captured head file, independently for the query
  and the key file of a head (qk-sniffer seeds its sampler by example, layer, head and kind too).
  Two policies:

  ``log-uniform`` (default)
      Positions are split into doubling buckets ``[0, m)``, ``[m, 2m)``, ``[2m, 4m)``, ...
      (``m`` = ``min_bucket_size``, default 128) and every bucket gets the same number of draws,
      uniform without replacement inside the bucket. Beyond ``m`` the density falls as ``1/t``:
      each doubling of context is represented equally, like qk-sniffer's ``log_uniform``
      sampler (probability ``rate / 2^bucket`` per position). The bucket index is stored.
  ``uniform``
      Positions uniform without replacement over the whole text; ``bucket = position // m``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POSITION_POLICIES = ("log-uniform", "uniform")
_KIND_CODE = {"q": 0, "k": 1}


def gqa_ratio(n_q_heads: int, n_kv_heads: int) -> int:
    """Query heads per KV head; raises ``ValueError`` when ``n_kv_heads`` does not divide ``n_q_heads``."""
    if n_kv_heads <= 0 or n_q_heads <= 0 or n_q_heads % n_kv_heads:
        raise ValueError(f"{n_q_heads} query heads cannot be grouped over {n_kv_heads} KV heads")
    return n_q_heads // n_kv_heads


def sample_query_heads(n_layers: int, n_q_heads: int, count: int | None, seed: int) -> list[tuple[int, int]]:
    """A seeded sample of ``count`` (layer, head) query heads, sorted; all heads if ``count`` is None or large.

    The draw is ``numpy.random.default_rng(seed).choice(n_layers * n_q_heads, count, replace=False)``
    over the flat index ``layer * n_q_heads + head``.
    """
    total = n_layers * n_q_heads
    if count is None or count >= total:
        flat = np.arange(total)
    else:
        if count < 1:
            raise ValueError("the number of query heads must be at least 1")
        flat = np.sort(np.random.default_rng(seed).choice(total, size=count, replace=False))
    return [(int(i // n_q_heads), int(i % n_q_heads)) for i in flat]


def key_heads_for(query_heads: list[tuple[int, int]], n_q_heads: int, n_kv_heads: int) -> list[tuple[int, int]]:
    """The (layer, kv_head) pairs the query heads read, sorted and unique."""
    ratio = gqa_ratio(n_q_heads, n_kv_heads)
    return sorted({(layer, head // ratio) for layer, head in query_heads})


def position_rng(seed: int, example_id: int, layer: int, head: int, kind: str) -> np.random.Generator:
    """The generator that picks positions of one text for one head file (independent streams per key)."""
    return np.random.default_rng([int(seed), int(example_id), int(layer), int(head), _KIND_CODE[kind]])


def check_sample(count: int, n: int | None, seed: int, example_id: int, layer: int, head: int, kind: str) -> np.ndarray:
    """Which of a head file's ``count`` rows of one text the row check compares (sorted indices into them).

    All of them when ``n`` is None or at least ``count``; else ``n`` drawn without replacement by
    ``numpy.random.default_rng([seed, example_id, layer, head, kind, 1])`` — a stream of its own,
    apart from the positions' (:func:`position_rng`).
    """
    if n is None or n >= count:
        return np.arange(count, dtype=np.int64)
    rng = np.random.default_rng([int(seed), int(example_id), int(layer), int(head), _KIND_CODE[kind], 1])
    return np.sort(rng.choice(count, size=max(0, int(n)), replace=False)).astype(np.int64)


def log2_bucket_edges(length: int, min_bucket_size: int) -> np.ndarray:
    """Edges ``[0, m, 2m, 4m, ..., length]`` of the doubling buckets covering ``range(length)``."""
    if min_bucket_size < 1:
        raise ValueError("min_bucket_size must be at least 1")
    edges = [0]
    upper = min_bucket_size
    while upper < length:
        edges.append(upper)
        upper *= 2
    edges.append(length)
    return np.asarray(edges, dtype=np.int64)


def log2_bucket(positions: np.ndarray, min_bucket_size: int) -> np.ndarray:
    """Bucket index of each position: 0 for ``[0, m)``, ``i`` for ``[m·2^(i-1), m·2^i)``."""
    p = np.asarray(positions, dtype=np.int64)
    out = np.zeros(p.shape, dtype=np.int64)
    big = p >= min_bucket_size
    # floor(log2(p / m)) + 1 computed on integers to avoid float rounding at exact powers of two
    q = p[big] // min_bucket_size
    out[big] = np.frexp(q.astype(np.float64))[1]  # frexp exponent = floor(log2 q) + 1 for q >= 1
    return out


def _equal_quotas(count: int, sizes: np.ndarray) -> np.ndarray:
    """Split ``count`` draws as equally as possible over buckets, never more than a bucket holds.

    Leftover draws from buckets that are too small go to the larger (later) buckets.
    """
    quotas = np.zeros(len(sizes), dtype=np.int64)
    remaining = min(int(count), int(sizes.sum()))
    open_ = sizes > 0
    while remaining > 0 and open_.any():
        idx = np.flatnonzero(open_)
        share = np.full(len(idx), remaining // len(idx), dtype=np.int64)
        # the remainder goes to the last buckets, which are the widest
        share[len(idx) - remaining % len(idx):] += 1
        room = sizes[idx] - quotas[idx]
        take = np.minimum(share, room)
        quotas[idx] += take
        remaining -= int(take.sum())
        open_ = quotas < sizes
    return quotas


@dataclass(frozen=True)
class PositionSample:
    """Sorted sampled positions of one text and their bucket labels."""

    positions: np.ndarray  # (n,) int64, sorted, unique
    buckets: np.ndarray  # (n,) int64


def sample_positions(
    length: int,
    count: int,
    rng: np.random.Generator,
    policy: str = "log-uniform",
    min_bucket_size: int = 128,
) -> PositionSample:
    """Draw ``min(count, length)`` distinct positions of a text of ``length`` tokens (see module doc)."""
    if policy not in POSITION_POLICIES:
        raise ValueError(f"unknown position policy {policy!r}; expected one of {', '.join(POSITION_POLICIES)}")
    count = max(0, min(int(count), int(length)))
    if policy == "uniform":
        pos = np.sort(rng.choice(length, size=count, replace=False)) if count else np.zeros(0, np.int64)
        pos = pos.astype(np.int64)
        return PositionSample(pos, pos // min_bucket_size)
    edges = log2_bucket_edges(length, min_bucket_size)
    sizes = np.diff(edges)
    quotas = _equal_quotas(count, sizes)
    # one draw per bucket: a handful of buckets (log2 of the length), not a loop over vectors
    parts = [lo + rng.choice(size, size=k, replace=False) for lo, size, k in zip(edges[:-1], sizes, quotas) if k]
    pos = np.sort(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, np.int64)
    return PositionSample(pos, log2_bucket(pos, min_bucket_size))


def split_evenly(total: int, parts: int) -> np.ndarray:
    """``total`` split into ``parts`` integers differing by at most one (earlier parts get the extra)."""
    if parts <= 0:
        return np.zeros(0, dtype=np.int64)
    base = np.full(parts, total // parts, dtype=np.int64)
    base[: total % parts] += 1
    return base


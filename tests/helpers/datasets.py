"""Small planted datasets in the sniffed-qk layout, written with qkdb's own writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qkdb.ingest.sources.layout import write_head


def planted_head(rng, n, d, *, slope, mean_a, offset, t_max=2000, noise=1.0):
    """Vectors with a drift along e0 (slope per token), a mean mean_a on e0 and offset on e1."""
    t = rng.integers(0, t_max, n)
    X = rng.normal(scale=noise, size=(n, d))
    X[:, 0] += mean_a + slope * t
    X[:, 1] += offset
    return X, t


def make_dataset(root: Path, *, layers=2, q_heads=4, kv_heads=2, d=16, n=800, seed=0, prefix="") -> Path:
    """A small dataset in the sniffed-qk layout with a planted drift and Q/K offset."""
    rng = np.random.default_rng(seed)
    base = root / prefix if prefix else root
    ratio = q_heads // kv_heads
    for layer in range(layers):
        for g in range(kv_heads):
            K, tk = planted_head(rng, n, d, slope=3e-3, mean_a=-1.0, offset=-4.0)
            write_head(base, layer, g, "k", K, tk, example_id=rng.integers(0, 4, n))
            for h in range(g * ratio, (g + 1) * ratio):
                Q, tq = planted_head(rng, n, d, slope=1.5e-3, mean_a=4.0, offset=4.0)
                write_head(base, layer, h, "q", Q, tq, example_id=rng.integers(0, 4, n))
    return root

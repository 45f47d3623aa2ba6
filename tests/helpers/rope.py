"""RoPE written out independently of the code under test."""

from __future__ import annotations

import numpy as np


def apply_rope(X: np.ndarray, t: np.ndarray, omega: np.ndarray, pairing: str) -> np.ndarray:
    """RoPE written out in real arithmetic (independent of the code under test's complex form).

    rotate-half: x'_j = x_j cos − x_{j+d/2} sin, x'_{j+d/2} = x_{j+d/2} cos + x_j sin (transformers);
    interleaved: the same on (x_{2j}, x_{2j+1}).
    """
    d = X.shape[1]
    J = d // 2
    if pairing == "half":
        i1, i2 = np.arange(J), np.arange(J) + J
    else:
        i1, i2 = 2 * np.arange(J), 2 * np.arange(J) + 1
    ang = np.outer(t, omega)
    c, s = np.cos(ang), np.sin(ang)
    out = X.copy()
    out[:, i1] = X[:, i1] * c - X[:, i2] * s
    out[:, i2] = X[:, i2] * c + X[:, i1] * s
    return out

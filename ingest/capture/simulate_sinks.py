"""Planted attention sinks for the simulator, and each query's softmax normaliser (docs/attention.md).

With :class:`Sinks` set on a dense simulation (every position of every text), :func:`simulate` adds
a *sink direction* ``s`` per key head (a unit vector orthogonal to its drift and offset axes), gives
the key at position 0 of every text a component ``g · s``, and gives each query head one of three
roles, seeded:

``bias``
    every query gains ``g · s``: token 0's logit rises by ``logit`` for every query alike — the
    mass on token 0 comes from a part every query shares (``bias_share`` near 1);
``content``
    every query gains ``± 2g · s``, the sign drawn per query: half the queries raise token 0's logit
    by ``2 · logit`` and put nearly all their weight on it, half lower it as much and put almost
    none — a sink head (mean weight near 0.5) whose advantage averages out (``bias_share`` near 0);
``none``
    the queries' component along ``s`` is removed: token 0 is an ordinary key.

``g = sqrt(logit / scaling)``, ``scaling = head_dim ** -0.5``, so that the planted logit advantage
is ``logit``. Each query's ``lse`` is then the log-sum-exp of ``scaling · q·k`` over its text's keys
at positions up to its own, computed from the vectors as they are stored (after the cast to the
stored dtype): the attention of a model whose texts are exactly the simulated ones, so every
attention weight the ingest derives has a planted truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkdb.errors import QkdbError

ROLES = ("bias", "content", "none")


@dataclass(frozen=True)
class Sinks:
    """Which query heads get an attention sink at position 0, and how strong (module doc).

    Attributes
    ----------
    fraction
        Share of the written query heads given a sink (seeded; rounded to a whole head).
    content_fraction
        Share of the sink heads whose sink is ``content`` rather than ``bias``.
    logit
        The logit advantage the sink direction gives token 0 (bias sinks: for every query).
    """

    fraction: float = 0.5
    content_fraction: float = 0.0
    logit: float = 20.0

    def __post_init__(self) -> None:
        for name in ("fraction", "content_fraction"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise QkdbError(f"Sinks.{name} must be in [0, 1], got {v}")
        if not (math.isfinite(self.logit) and self.logit > 0):
            raise QkdbError(f"Sinks.logit must be a positive number, got {self.logit}")


def assign_roles(heads: list[tuple[int, int]], sinks: Sinks, rng: np.random.Generator) -> dict[tuple[int, int], str]:
    """Each written query head's role: ``round(fraction × n)`` sink heads drawn without replacement,
    the first ``round(content_fraction × sinks)`` of them (in the draw's order) content sinks."""
    n_sink = int(round(sinks.fraction * len(heads)))
    order = rng.permutation(len(heads))
    n_content = int(round(sinks.content_fraction * n_sink))
    roles = {h: "none" for h in heads}
    for rank, i in enumerate(order[:n_sink]):
        roles[heads[int(i)]] = "content" if rank < n_content else "bias"
    return roles


def sink_direction(u: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random unit vector orthogonal to the key head's drift axis ``u`` and offset axis ``w``."""
    v = rng.standard_normal(u.size)
    for a in (u, w):
        v -= (v @ a) * a
    return v / np.linalg.norm(v)


def gain(sinks: Sinks, head_dim: int) -> float:
    """The norm of the component added along the sink direction (to key 0 and to the queries)."""
    return math.sqrt(sinks.logit * math.sqrt(head_dim))


def plant_key(K: np.ndarray, t: np.ndarray, s: np.ndarray, g: float) -> np.ndarray:
    """The keys with ``g · s`` added at position 0."""
    K = K.copy()
    K[t == 0] += g * s
    return K


def plant_queries(Q: np.ndarray, role: str, s: np.ndarray, g: float, rng: np.random.Generator) -> np.ndarray:
    """The queries of one head given its role (module doc)."""
    if role not in ROLES:
        raise QkdbError(f"unknown sink role {role!r}; expected one of {', '.join(ROLES)}")
    if role == "none":
        return Q - np.outer(Q @ s, s)
    # (a content sink's queries push twice as hard: half of them must carry the head's mean over epsilon)
    sign = np.ones(len(Q)) if role == "bias" else rng.choice([-2.0, 2.0], size=len(Q))
    return Q + np.outer(sign * g, s)


def causal_lse(Q: np.ndarray, t_q: np.ndarray, ex_q: np.ndarray, K: np.ndarray, t_k: np.ndarray,
               ex_k: np.ndarray, scaling: float) -> np.ndarray:
    """Per query, ``log Σ exp(scaling · q·k)`` over the keys of its text at positions up to its own (float64)."""
    Q, K = np.asarray(Q, np.float64), np.asarray(K, np.float64)
    out = np.full(len(Q), np.nan)
    for e in np.unique(ex_q):  # (a loop over texts: one product each)
        qi, ki = np.flatnonzero(ex_q == e), np.flatnonzero(ex_k == e)
        logits = scaling * (Q[qi] @ K[ki].T)
        logits[t_k[ki][None, :] > t_q[qi][:, None]] = -np.inf
        top = logits.max(axis=1, keepdims=True)
        out[qi] = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    return out

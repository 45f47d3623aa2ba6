"""Every option of an ingest in one frozen, validated dataclass.

The CLI builds an :class:`IngestOptions` once from its flags; ``qkdb.ingest(...)`` builds one from
its keyword arguments (the same names); the API and the engine pass it along unchanged. Four
groups of fields:

* what to read: ``repo``, ``revision``, ``heads``, ``endpoint``, ``cache_dir``, ``token``;
* model facts that win over the registry and the dataset's ``qkdb_dataset.json``: ``family``,
  ``gqa_ratio``, ``n_layers``, ``n_q_heads``, ``n_kv_heads``, ``rope_theta``, ``rope_pairing``,
  ``rope_scaling``;
* what to compute — the options that change the numbers, recorded with every run
  (:meth:`IngestOptions.parameters`) and part of its fingerprint;
* how to run: ``workers``, ``force``, ``wait``.

Standard library only: the CLI imports this before anything heavy.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace

# Pooled vectors per head for the complement and RoPE-plane statistics (a seeded subsample, Q
# and K in proportion): ~1,000 per kind puts a coherence's noise near 0.03 and keeps the stage
# about as costly as reading the head (docs/rotation-planes.md, docs/benchmarks.md).
FIT_ROWS = 2048

# The fields that change the computed numbers, in the order ingest_runs.parameters records them.
COMPUTE_FIELDS = (
    "n_components", "b_method", "max_vectors", "min_vectors", "points", "collage", "n_collage", "complement",
    "fit_rows", "seed", "skip_bad_heads", "drop_bad_vectors", "plasticity", "plasticity_pairs", "plasticity_queries",
    "frequency_pairs",
)

# Attention plasticity (SPEC §4.5, docs/plasticity.md): key pairs drawn per position bin, and the queries
# per bin the empirical estimator compares each pair with (a seeded sample; None: every query of the
# bin). The empirical estimator's cost is queries × pairs × head_dim per bin: at every query it would
# cost more than the rest of the ingest (docs/benchmarks.md, "Plasticity").
PLASTICITY_PAIRS = 1024
PLASTICITY_QUERIES = 128

# Causal pairs per head for frequency_usage (SPEC §4.8): qkdb.ingest.metrics.frequency_usage.PAIRS, here
# too so that the CLI's defaults need no numpy (tests/ingest/test_options.py holds them equal)
FREQUENCY_PAIRS = 4096


@dataclass(frozen=True)
class IngestOptions:
    """The options of one ingest (see the module docstring for the groups). Invalid values raise ValueError."""

    # -- what to read ------------------------------------------------------------------------
    repo: str | None = None  # Hub dataset repo (default: the registry's)
    revision: str | None = None  # Hub branch, tag or commit (default: the model's registry branch)
    heads: str | None = None  # selection: "0-3" (layers), "5", "l03h07,l05h01"
    endpoint: str | None = None  # Hub endpoint (default: huggingface_hub's)
    cache_dir: str | os.PathLike | None = None  # huggingface_hub cache (default: its own)
    # Hub token (default: HF_TOKEN or the stored login); never in a repr (logs, tracebacks, Ray's displays)
    token: str | bool | None = field(default=None, repr=False)
    # -- model facts -------------------------------------------------------------------------
    family: str | None = None
    gqa_ratio: int | None = None
    n_layers: int | None = None
    n_q_heads: int | None = None
    n_kv_heads: int | None = None
    rope_theta: float | None = None
    rope_pairing: str | None = None  # 'half' (rotate-half) or 'interleaved'
    rope_scaling: str | dict | None = None  # transformers-style JSON object
    # L_train in tokens (frequency_usage's critical plane): wins over the capture, rope_scaling and the registry
    trained_context: int | None = None
    # -- what to compute ---------------------------------------------------------------------
    n_components: int = 10  # principal components stored per head
    b_method: str = "eig"  # axis b: 'eig' (the seeds' code) or 'mean_diff' (the thesis text)
    max_vectors: int | None = None  # seeded subsample of at most this many vectors per file
    min_vectors: int = 16  # per kind; fewer is bad input
    points: int = 512  # sampled points per kind and head for scatter figures
    collage: tuple[tuple[int, int], ...] = ()  # extra (layer, head) with complement scores in `points`
    n_collage: int = 4  # random.Random(42).sample(heads, n_collage) per model, like the seeds
    complement: bool = True  # complement pairs, RoPE planes and omega (SPEC §4.3)
    fit_rows: int | None = FIT_ROWS  # see FIT_ROWS; None uses every vector
    seed: int = 0  # seeds every subsample
    skip_bad_heads: bool = False  # ingest the other heads when one cannot be; record why
    # Rows whose vector holds NaN, ±inf or a value beyond ±VALUE_BOUND: dropped (counted in
    # heads.n_dropped) instead of refusing the file. Off: such a file is bad input.
    drop_bad_vectors: bool = False
    # Attention plasticity and the recency check (tables plasticity, plasticity_profile, plasticity_2d, recency)
    plasticity: bool = True
    plasticity_pairs: int = PLASTICITY_PAIRS
    plasticity_queries: int | None = PLASTICITY_QUERIES
    # Causal (t, s) pairs per head for frequency_usage (SPEC §4.8; None: every pair)
    frequency_pairs: int | None = FREQUENCY_PAIRS
    # -- how to run --------------------------------------------------------------------------
    workers: int | None = None  # worker processes (default: the cores, at most 8)
    force: bool = False  # re-ingest even when the same data was ingested with the same parameters
    wait: float = 0.0  # seconds to wait for another ingest of the same model

    def __post_init__(self) -> None:
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", json.dumps(self.rope_scaling, sort_keys=True))
        object.__setattr__(self, "collage", tuple((int(l), int(h)) for l, h in self.collage))
        checks = (
            (self.n_components >= 1, "n_components must be >= 1"),
            (self.max_vectors is None or self.max_vectors >= 2, "max_vectors must be >= 2"),
            (self.min_vectors >= 2, "min_vectors must be >= 2"),
            (self.fit_rows is None or self.fit_rows >= 2, "fit_rows must be >= 2 (or None for every vector)"),
            (self.points >= 0, "points must be >= 0"),
            (self.plasticity_pairs >= 1, "plasticity_pairs must be >= 1"),
            (self.plasticity_queries is None or self.plasticity_queries >= 2,
             "plasticity_queries must be >= 2 (or None for every query)"),
            (self.frequency_pairs is None or self.frequency_pairs >= 1,
             "frequency_pairs must be >= 1 (or None for every pair)"),
            (self.trained_context is None or self.trained_context >= 1, "trained_context must be >= 1"),
            (self.n_collage >= 0, "n_collage must be >= 0"),
            (self.b_method in ("eig", "mean_diff"), "b_method must be 'eig' or 'mean_diff'"),
            (self.rope_pairing in (None, "half", "interleaved"), "rope_pairing must be 'half' or 'interleaved'"),
            (self.workers is None or self.workers >= 1, "workers must be >= 1"),
            (self.wait >= 0, "wait must be >= 0"),
        )
        for ok, message in checks:
            if not ok:
                name = message.split()[0]
                raise ValueError(f"{message}, got {getattr(self, name)!r}")

    @classmethod
    def from_kwargs(cls, **kwargs) -> IngestOptions:
        """Options from keyword arguments named like the fields; a TypeError names any unknown one."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown ingest option(s): {', '.join(unknown)} (see qkdb.ingest.IngestOptions)")
        return cls(**kwargs)

    def updated(self, **changes) -> IngestOptions:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def facts(self) -> dict:
        """The model facts given (None where not given), as :meth:`ModelSpec.with_overrides` takes them."""
        names = ("family", "gqa_ratio", "n_layers", "n_q_heads", "n_kv_heads", "rope_theta", "rope_pairing", "rope_scaling",
                 "trained_context")
        return {n: getattr(self, n) for n in names}

    def parameters(self, rope_theta: float | None, rope_pairing: str, rope_scaling: str | None) -> dict:
        """What ``ingest_runs.parameters`` records of these options, with the model's RoPE as resolved."""
        out = {("collage_heads" if n == "collage" else n): getattr(self, n) for n in COMPUTE_FIELDS}
        out["collage_heads"] = [list(h) for h in self.collage]
        out.update(rope_theta=rope_theta, rope_pairing=rope_pairing, rope_scaling=rope_scaling, extra={})
        return out

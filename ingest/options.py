"""Ingest parameters that change the computed numbers (recorded in ingest_runs.parameters)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from qkdb.ingest.metrics.complement import MAX_FIT


@dataclass(frozen=True)
class IngestOptions:
    n_components: int = 10
    b_method: str = "eig"
    max_vectors: int | None = None  # per file, seeded subsample
    min_vectors: int = 16  # per kind; fewer is bad input
    points: int = 512  # sampled points per kind and head for scatter figures
    collage_heads: tuple[tuple[int, int], ...] = ()  # extra heads with complement scores in `points`
    n_collage: int = 4  # random.Random(42).sample(heads, n_collage) per model, like the seeds
    complement: bool = True  # complement pairs, RoPE planes and omega (SPEC §4.3)
    # Pooled vectors per head (seeded subsample, Q and K in proportion) for the per-vector
    # statistics of `complement` and `rope_planes`; None uses every vector.
    fit_rows: int | None = MAX_FIT
    seed: int = 0
    skip_bad_heads: bool = False
    # Rows whose vector holds NaN, ±inf or a value beyond ±VALUE_BOUND: dropped (counted in
    # heads.n_dropped) instead of refusing the file. Off: such a file is bad input.
    drop_bad_vectors: bool = False
    # RoPE layout for `rope_planes` (None theta: frequencies are fitted)
    rope_theta: float | None = None
    rope_pairing: str = "half"
    rope_scaling: str | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.n_components < 1:
            raise ValueError(f"n_components must be >= 1, got {self.n_components}")
        if self.max_vectors is not None and self.max_vectors < 2:
            raise ValueError(f"max_vectors must be >= 2, got {self.max_vectors}")
        if self.fit_rows is not None and self.fit_rows < 2:
            raise ValueError(f"fit_rows must be >= 2 (or None for every vector), got {self.fit_rows}")
        if self.points < 0:
            raise ValueError(f"points must be >= 0, got {self.points}")
        if self.rope_pairing not in ("half", "interleaved"):
            raise ValueError(f"rope_pairing must be 'half' or 'interleaved', got {self.rope_pairing!r}")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["collage_heads"] = [list(h) for h in self.collage_heads]
        return d

"""Shared pieces of the training-series figures (seed 003 figures 07–12, seed 002 figures 09–10).

A series is the checkpoints of one training run (``models.series``), ordered by ``series_order``.
The x axis names each checkpoint by phase and step ("stage1 40k", "lc-4k-to-32k 4k"); the
background of line charts is shaded by training phase (the ``fill`` channel, so the lines keep
``color`` for their own legend).
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import resolve_series, rows
from qkdb.charts.style import phase_scale


def human_step(step) -> str:
    """40000 -> '40k', 1200000 -> '1.2M'."""
    if step is None:
        return ""
    step = int(step)
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if step >= div:
            v = step / div
            return (f"{v:.1f}".rstrip("0").rstrip(".")) + suffix
    return str(step)


def checkpoints(con: duckdb.DuckDBPyConnection, series: str) -> list[dict]:
    """The series' checkpoints in order, each with a unique display ``checkpoint`` label."""
    got = rows(con, """
        select model, series_order, phase, step
        from models where series = $s
        order by series_order nulls last, model
    """, {"s": series})
    seen: set[str] = set()
    for i, c in enumerate(got):
        label = " ".join(x for x in (c["phase"], human_step(c["step"])) if x) or c["model"]
        if label in seen:
            label = f"{label} #{c['series_order'] if c['series_order'] is not None else i}"
        seen.add(label)
        c["checkpoint"] = label
        c["phase"] = c["phase"] or "unknown"
    return got


class Series:
    """A resolved series: its name, checkpoints and the encodings every series figure shares."""

    def __init__(self, con: duckdb.DuckDBPyConnection, series: str | None, min_checkpoints: int = 2):
        self.name = resolve_series(con, series, min_checkpoints)
        self.checkpoints = checkpoints(con, self.name)
        self.by_model = {c["model"]: c for c in self.checkpoints}
        self.order = [c["checkpoint"] for c in self.checkpoints]
        self.phases = list(dict.fromkeys(c["phase"] for c in self.checkpoints))
        self.models = [c["model"] for c in self.checkpoints]

    def label(self, data: list[dict]) -> list[dict]:
        """Add ``checkpoint`` and ``phase`` (from the models table) to rows that have ``model``."""
        for d in data:
            c = self.by_model[d["model"]]
            d["checkpoint"] = c["checkpoint"]
            d["phase"] = c["phase"]
        return data

    def x(self, title: str | None = "checkpoint (phase, step)") -> alt.X:
        return alt.X("checkpoint:N", sort=self.order, title=title, axis=alt.Axis(labelAngle=-35, labelLimit=160))

    def phase_scale(self) -> alt.Scale:
        return phase_scale(self.phases)

    def phase_fill(self) -> alt.Fill:
        return alt.Fill("phase:N", scale=self.phase_scale(), title="training phase")

    def shading(self, base: alt.Chart) -> alt.Chart:
        """Background bands, one per checkpoint, tinted by its training phase."""
        # One band per checkpoint even when the data has several rows per checkpoint.
        return (
            base.transform_aggregate(_n="count()", groupby=["checkpoint", "phase"])
            .mark_rect(opacity=0.35)
            .encode(x=self.x(), fill=self.phase_fill())
        )

    def panel(self, base: alt.Chart, *layers: alt.Chart, title: str, subtitle: str) -> alt.LayerChart:
        """``layers`` over the phase shading, at the size every single-panel series figure uses."""
        return alt.layer(self.shading(base), *layers).properties(
            width=max(360, 48 * len(self.order)), height=260,
            title=alt.TitleParams(title, subtitle=[subtitle]),
        )

    def subtitle(self) -> str:
        return f"series {self.name}: {len(self.checkpoints)} checkpoints ({', '.join(self.phases)})"

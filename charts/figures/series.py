"""Shared pieces of the training-series figures (seed 003 figures 07–12, seed 002 figures 09–10).

A series is the checkpoints of one training run (``models.series``), ordered by ``series_order``.
The x axis names each checkpoint by phase and step ("stage1 40k", "lc-4k-to-32k 4k"); the
background of line charts is shaded by training phase (the ``fill`` channel, so the lines keep
``color`` for their own legend) in pale greys and lilacs that no Q-blue or K-red line disappears
into, and a single-panel figure names each phase at the top of its first band.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import resolve_series, rows, values
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

    def x(self, title: str | None = "checkpoint (phase, step)", labels: bool = True) -> alt.X:
        axis = alt.Axis(labelAngle=-35, labelLimit=160) if labels else alt.Axis(labels=False, ticks=False)
        return alt.X("checkpoint:N", sort=self.order, title=title, axis=axis)

    def phase_scale(self) -> alt.Scale:
        return phase_scale(self.phases)

    def phase_fill(self) -> alt.Fill:
        return alt.Fill("phase:N", scale=self.phase_scale(), title="training phase")

    def shading(self, base: alt.Chart, legend: bool = True, x: alt.X | None = None) -> alt.Chart:
        """Background bands, one per checkpoint, tinted by its training phase."""
        fill = self.phase_fill() if legend else alt.Fill("phase:N", scale=self.phase_scale(), legend=None)
        # One band per checkpoint even when the data has several rows per checkpoint.
        return (
            base.transform_aggregate(_n="count()", groupby=["checkpoint", "phase"])
            .mark_rect()
            .encode(x=x or self.x(), fill=fill)
        )

    def phase_labels(self, step: float, x: alt.X | None = None) -> alt.Chart:
        """The phase's name at the top left of its first band: the bands explain themselves."""
        first = {}
        for c in self.checkpoints:
            first.setdefault(c["phase"], c["checkpoint"])
        data = [{"checkpoint": cp, "phase": ph} for ph, cp in first.items()]
        return alt.Chart(values(data)).mark_text(
            align="left", baseline="top", dx=-step / 2 + 3, dy=3, fontSize=10, color="#444444", fontStyle="italic",
        ).encode(x=x or self.x(), y=alt.value(0), text=alt.Text("phase:N"))

    def width(self) -> int:
        return max(420, 56 * len(self.order))

    def panel(
        self, base: alt.Chart, *layers: alt.Chart, title: str | None, subtitle: str = "", height: int = 260,
        x: alt.X | None = None,
    ) -> alt.LayerChart:
        """``layers`` over the labelled phase shading, at the size every single-panel series figure uses.

        ``x``: the layers' x encoding when it is not :meth:`x` (the bands must use the same axis).
        """
        width = self.width()
        chart = alt.layer(
            self.shading(base, legend=False, x=x), *layers, self.phase_labels(width / max(1, len(self.order)), x=x)
        ).properties(width=width, height=height)
        return chart if title is None else chart.properties(title=alt.TitleParams(title, subtitle=[subtitle]))

    def subtitle(self) -> str:
        return f"series {self.name}: {len(self.checkpoints)} checkpoints ({', '.join(self.phases)})"

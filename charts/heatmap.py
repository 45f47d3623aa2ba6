"""The annotated depth heatmap the seeds draw: a row per model (or checkpoint), a column per depth bin.

Seed 004: ``imshow`` with ``Blues`` (r_q) or ``Reds`` (r_k), vmin 0, vmax 1, one cell per
(model, depth bin) holding the mean over the heads in that bin, printed in the cell.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt

from qkdb.charts.data import values
from qkdb.charts.style import HEATMAP_CELL

N_BINS = 10


def depth_heatmap(
    data: list[dict],
    *,
    row: str,
    row_title: str,
    row_order: Sequence[str],
    value: str,
    value_title: str,
    scheme: str,
    domain: tuple[float, float] | None = (0.0, 1.0),
    domain_mid: float | None = None,
    fmt: str = ".2f",
    light_text_above: float = 0.6,
    title: str | alt.TitleParams | None = None,
    show_rows: bool = True,
) -> alt.LayerChart:
    """Rect + text layers; ``light_text_above`` is the |value| above which the annotation turns white.

    Parameters
    ----------
    data
        One dict per (row, depth_bin) with ``row``, ``depth_bin``, ``value`` and ``n_heads``.
    domain
        Colour domain; values outside are clamped (the seeds fix 0..1 for correlations).
    domain_mid
        Centre of a diverging scheme (e.g. 0 for a signed bias).
    """
    scale = alt.Scale(scheme=scheme, clamp=True)
    if domain is not None:
        scale = alt.Scale(scheme=scheme, domain=list(domain), clamp=True)
    if domain_mid is not None:
        scale = alt.Scale(scheme=scheme, domainMid=domain_mid, **({"domain": list(domain)} if domain else {}))
    x = alt.X(
        "depth_bin:O",
        title="relative depth (layer / (n_layers − 1))",
        scale=alt.Scale(domain=list(range(N_BINS))),
        axis=alt.Axis(labelExpr="format(datum.value / 10, '.1f')", labelAngle=0),
    )
    y = alt.Y(f"{row}:N", sort=list(row_order), title=row_title if show_rows else None,
              axis=alt.Axis(labels=show_rows, ticks=show_rows, labelLimit=320))
    tooltip = [
        alt.Tooltip(f"{row}:N", title=row_title),
        alt.Tooltip("depth_bin:O", title="depth bin"),
        alt.Tooltip(f"{value}:Q", title=value_title, format=fmt),
        alt.Tooltip("n_heads:Q", title="heads"),
    ]
    base = alt.Chart(values(data))
    rect = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=x, y=y, color=alt.Color(f"{value}:Q", scale=scale, title=value_title), tooltip=tooltip
    )
    text = base.mark_text(fontSize=10).encode(
        x=x,
        y=y,
        text=alt.Text(f"{value}:Q", format=fmt),
        color=alt.condition(
            f"abs(datum['{value}']) > {light_text_above}", alt.value("white"), alt.value("#222222")
        ),
    )
    chart = alt.layer(rect, text).properties(
        width=HEATMAP_CELL * N_BINS, height=alt.Step(HEATMAP_CELL * 0.8)
    )
    if title is not None:
        chart = chart.properties(title=title)
    return chart

"""Rotation figure 09: the rotation model over training, median and IQR per checkpoint.

Source: view ``series_trajectory``: |r_k_a|, separation strength, bias strength (×10³) and the
{a, b} plane's variance share, each a panel with its own y axis; dot = median over heads, bar =
interquartile range; background tinted by training phase.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import rows, values
from qkdb.charts.figures.series import Series
from qkdb.charts.style import fmt_num

METRICS = (
    ("abs_r_k_a", "|r_k| on drift axis a", 1.0),
    ("separation_strength", "separation strength", 1.0),
    ("bias_strength", "bias strength ×10³", 1e3),
    ("plane_var_fraction", "{a, b} plane variance share", 1.0),
)

_SQL = "with t as materialized (select * from series_trajectory where series = $s) " + " union all ".join(
    f"select model, '{label}' as metric, {i} as metric_order, median_{col} * {scale} as median, "
    f"p25_{col} * {scale} as p25, p75_{col} * {scale} as p75, n_heads from t"
    for i, (col, label, scale) in enumerate(METRICS)
) + " order by metric_order, model"


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.FacetChart:
    """Four panels of median ± IQR across the checkpoints of a series, with phase shading."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"s": s.name}))
    base = alt.Chart()
    x = s.x(title=None)
    y = alt.Y("median:Q", title=None, scale=alt.Scale(zero=False))
    iqr = base.mark_rule(strokeWidth=2, color="#555555").encode(x=x, y=alt.Y("p25:Q", title=None), y2=alt.Y2("p75:Q"))
    line = base.mark_line(point=alt.OverlayMarkDef(size=40, color="#222222"), color="#222222", strokeWidth=2).encode(
        x=x, y=y,
        tooltip=[alt.Tooltip("checkpoint:N"), alt.Tooltip("model:N"), alt.Tooltip("metric:N"), alt.Tooltip("median:Q", format=".4g"),
                 alt.Tooltip("p25:Q", title="25%", format=".4g"), alt.Tooltip("p75:Q", title="75%", format=".4g"),
                 alt.Tooltip("n_heads:Q", title="heads")],
    )
    layer = alt.layer(s.shading(base), iqr, line, data=values(data)).properties(
        width=max(260, 40 * len(s.order)), height=170
    )
    built = layer.facet(
        facet=alt.Facet("metric:N", sort=[m[1] for m in METRICS], title=None), columns=2,
    ).resolve_scale(y="independent").properties(
        title=alt.TitleParams(
            "Training trajectory of the rotation model",
            subtitle=[f"Planar rotation (seed 002 figure 09), {s.subtitle()}; dot = median over heads, bar = IQR."],
        )
    )
    med = {(d["model"], d["metric"]): d["median"] for d in data}
    moves = [f"{label} {fmt_num(med.get((s.models[0], label)), 3)} → {fmt_num(med.get((s.models[-1], label)), 3)}"
             for _, label, _ in METRICS]
    return attach(
        built,
        f"Medians over heads from {s.order[0]} to {s.order[-1]}: " + "; ".join(moves) + ".",
        "The seed: bias collapses 91% in long-context training while |r_k| stays near 0.9 and separation grows 10%.",
    )

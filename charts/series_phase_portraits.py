"""PCA figure 12: phase portraits, PC0 r_q against r_k of every head, a panel per checkpoint.

Source: view ``taxonomy`` (per head) of the series' checkpoints, ``params`` for the thresholds.
Points take their checkpoint's phase colour; panel headers give the position-dominated share, so
the drift from a diffuse cloud to the position-dominated corner reads off the panels in order.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import MAX_HEAD_ROWS, rows, values
from qkdb.charts.rules import hlines, taxonomy_thresholds, vlines
from qkdb.charts.series import Series
from qkdb.charts.style import fmt_pct

COLUMNS = 5

_SQL = """
with t as materialized (
    select model, layer, head, r_q, r_k, category
    from taxonomy
    where list_contains($models, model) and r_q is not null and r_k is not null
), f as (
    select model, avg((category = 'position-dominated')::int) as share_pd from t group by model
)
select t.*, f.share_pd
from t join f using (model)
qualify row_number() over (order by hash(t.model, t.layer, t.head)) <= $limit
order by t.model, t.layer, t.head
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.FacetChart:
    """Per-head PC0 r_q vs r_k scatter, one panel per checkpoint, coloured by training phase."""
    s = Series(con, series)
    high, low = taxonomy_thresholds(con)
    data = s.label(rows(con, _SQL, {"models": s.models, "limit": MAX_HEAD_ROWS}))
    labels = {}
    for d in data:
        d["panel"] = labels.setdefault(d["checkpoint"], f"{d['checkpoint']}: {fmt_pct(d['share_pd'])} pos.-dominated")
    panels = [labels[c] for c in s.order if c in labels]
    base = alt.Chart()
    x = alt.X("r_q:Q", title="PC0 r_q", scale=alt.Scale(domain=[-0.1, 1.0]), axis=alt.Axis(values=[0, 0.3, 0.7, 1.0]))
    y = alt.Y("r_k:Q", title="PC0 r_k", scale=alt.Scale(domain=[-1.0, 1.0]), axis=alt.Axis(values=[-1, -0.7, -0.3, 0, 0.3, 0.7, 1]))
    points = base.mark_circle(size=14, opacity=0.7).encode(
        x=x, y=y, color=alt.Color("phase:N", scale=s.phase_scale(), title="training phase"),
        tooltip=["checkpoint:N", "layer:Q", "head:Q", alt.Tooltip("r_q:Q", format=".3f"),
                 alt.Tooltip("r_k:Q", format=".3f"), "category:N"],
    )
    layer = alt.layer(vlines(base, [low, high]), hlines(base, [-high, -low, low, high]), points, data=values(data))
    return layer.properties(width=170, height=170).facet(
        facet=alt.Facet("panel:N", sort=panels, title=None, header=alt.Header(labelFontSize=11)),
        columns=min(COLUMNS, len(panels)),
    ).properties(
        title=alt.TitleParams(
            "Phase portraits: PC0 r_q vs r_k per head at each checkpoint",
            subtitle=[f"Combined Q/K PCA (seed 003 figure 12), {s.subtitle()}; dashed: taxonomy thresholds {low:g} / {high:g}."],
        )
    )

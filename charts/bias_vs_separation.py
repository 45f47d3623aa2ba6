"""Rotation figure 07: bias strength against separation strength, a panel per family (Simpson's paradox).

Source: view ``head_metrics`` (per head). Pearson r is computed in SQL over every selected head
(before any sampling): overall in the title, within each family in the panel headers. With the
default models these are the ``bias_separation`` view's overall and family rows. A least-squares
line per panel shows the within-family trend.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import MAX_HEAD_ROWS, families_of, resolve_models, rows, scalar, values
from qkdb.charts.style import family_scale, fmt_r

# corr() is NaN when a side is constant; NULLIF-style CASE keeps it NULL like the views do.
_R = "case when count(*) > 1 and var_pop(x) > 0 and var_pop(y) > 0 then corr(x, y) end"

_SQL = f"""
with h as materialized (
    select model, family, layer, head, bias_strength * 1e3 as x, separation_strength as y
    from head_metrics
    where list_contains($models, model) and bias_strength is not null and separation_strength is not null
), fam as (
    select family, count(*) as n, {_R} as r from h group by family
)
select h.*, fam.r, fam.n
from h join fam using (family)
qualify row_number() over (order by hash(model, layer, head)) <= $limit
order by model, layer, head
"""

_OVERALL = f"""
with h as (
    select bias_strength as x, separation_strength as y
    from head_metrics
    where list_contains($models, model) and bias_strength is not null and separation_strength is not null
)
select {_R} from h
"""


def panel_label(family: str, r, n) -> str:
    return f"{family}: r = {fmt_r(r)} (n = {n})"


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.FacetChart:
    """Per-head scatter of bias ×10³ vs separation, a panel per family titled with its r."""
    chosen = resolve_models(con, models)
    data = rows(con, _SQL, {"models": chosen, "limit": MAX_HEAD_ROWS})
    for d in data:
        d["panel"] = panel_label(d["family"], d["r"], d["n"])
    overall = scalar(con, _OVERALL, {"models": chosen})
    fams = families_of(con, chosen)
    panels = list(dict.fromkeys(d["panel"] for d in sorted(data, key=lambda d: fams.index(d["family"]))))
    base = alt.Chart()
    x = alt.X("x:Q", title="bias strength ×10³", scale=alt.Scale(zero=False))
    y = alt.Y("y:Q", title="separation strength", scale=alt.Scale(zero=False))
    points = base.mark_circle(size=22, opacity=0.6).encode(
        x=x, y=y, color=alt.Color("family:N", scale=family_scale(fams), legend=None),
        tooltip=["model:N", "layer:Q", "head:Q", alt.Tooltip("x:Q", title="bias ×10³", format=".3g"),
                 alt.Tooltip("y:Q", title="separation", format=".3f")],
    )
    fit = base.transform_regression("x", "y").mark_line(color="#222222", strokeWidth=1.5).encode(x=x, y=y)
    title = alt.TitleParams(
        f"Bias vs separation strength: overall r = {fmt_r(overall)}; within each family in the panel titles",
        subtitle=[
            "Planar rotation (seed 002 figure 07, Simpson's paradox): one point per head; "
            "line: least-squares fit within the family."
        ],
    )
    return alt.layer(points, fit, data=values(data)).properties(width=250, height=220).facet(
        facet=alt.Facet("panel:N", sort=panels, title=None), columns=min(3, max(1, len(panels))),
    ).resolve_scale(x="independent", y="independent").properties(title=title)

"""Rotation figure 03: how the variance of Q+K splits between axis a, axis b and the d − 2 complement.

Source: view ``plane_variance`` (model rows, plus the pooled overall row by default). One stacked
horizontal bar per model, segments labelled with their share.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, resolve_models, rows, values
from qkdb.charts.style import fmt_pct

OVERALL = "all models"
PARTS = ("axis a (drift)", "axis b (separation)", "complement (d − 2 dims)")
PART_COLORS = ("#e08214", "#8073ac", "#d9d9d9")

_SQL = """
with p as materialized (
    select coalesce(model, '{overall}') as model, scope, n_heads, mean_var_frac_a, mean_var_frac_b,
           mean_plane_var_fraction, min_plane_var_fraction, max_plane_var_fraction, share_b_above_a
    from plane_variance
    where (scope = 'model' and list_contains($models, model)) or (scope = 'overall' and $overall)
)
select model, scope, n_heads, '{a}' as part, 0 as part_order, mean_var_frac_a as share, share_b_above_a,
       min_plane_var_fraction, max_plane_var_fraction, mean_plane_var_fraction from p
union all
select model, scope, n_heads, '{b}', 1, mean_var_frac_b, share_b_above_a,
       min_plane_var_fraction, max_plane_var_fraction, mean_plane_var_fraction from p
union all
select model, scope, n_heads, '{c}', 2, 1 - mean_plane_var_fraction, share_b_above_a,
       min_plane_var_fraction, max_plane_var_fraction, mean_plane_var_fraction from p
order by model, part_order
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Stacked bars of mean var_frac_a, var_frac_b and the complement share per model."""
    chosen = resolve_models(con, models)
    overall = not models and len(chosen) > 1
    data = rows(con, _SQL.format(overall=OVERALL, a=PARTS[0], b=PARTS[1], c=PARTS[2]),
                {"models": chosen, "overall": overall})
    drawn = drawn_models(con, chosen, models)
    order = drawn.models + ([OVERALL] if overall else [])
    y = alt.Y("model:N", sort=order, title=None, axis=alt.Axis(labelLimit=260))
    base = alt.Chart(values(drawn.rows(data, keep=(OVERALL,))))
    bars = base.mark_bar(stroke="white", strokeWidth=0.5).encode(
        y=y,
        x=alt.X("share:Q", stack="zero", title="share of pooled Q+K variance (mean over heads)",
                # Every 20%: with every 10% the last two labels collided ("90% 100%").
                axis=alt.Axis(format="%", values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("part:N", scale=alt.Scale(domain=list(PARTS), range=list(PART_COLORS)), title=None,
                        legend=alt.Legend(orient="bottom")),
        order=alt.Order("part_order:Q"),
        tooltip=[alt.Tooltip("model:N"), alt.Tooltip("part:N"), alt.Tooltip("share:Q", format=".1%"),
                 alt.Tooltip("min_plane_var_fraction:Q", title="plane: min over heads", format=".1%"),
                 alt.Tooltip("max_plane_var_fraction:Q", title="plane: max over heads", format=".1%"),
                 alt.Tooltip("share_b_above_a:Q", title="heads with var b > var a", format=".0%"),
                 alt.Tooltip("n_heads:Q", title="heads")],
    )
    labels = base.transform_filter("datum.share >= 0.06").mark_text(fontSize=10, color="#222222").encode(
        y=y,
        x=alt.X("share:Q", stack="zero", bandPosition=0.5),
        detail=alt.Detail("part:N"),
        order=alt.Order("part_order:Q"),
        text=alt.Text("share:Q", format=".0%"),
    )
    summary = next((d for d in data if d["scope"] == "overall"), data[0] if len(chosen) == 1 and data else None)
    sub = ""
    if summary:
        sub = (f"The plane holds {fmt_pct(summary['mean_plane_var_fraction'])} on average "
               f"(heads {fmt_pct(summary['min_plane_var_fraction'])}–{fmt_pct(summary['max_plane_var_fraction'])}); "
               f"var b > var a in {fmt_pct(summary['share_b_above_a'])} of heads.")
    title = alt.TitleParams(
        "Variance decomposition: the {a, b} plane and its complement",
        subtitle=["Planar rotation (seed 002 figure 03): mean share of the pooled variance along a, along b and "
                  "in the rest.", *([drawn.note] if drawn.note else [])],  # (the numbers: the caption's)
    )
    built = alt.layer(bars, labels).properties(width=500, height=alt.Step(26), title=title)
    per_model = {d["model"]: d for d in data if d["scope"] == "model"}
    text = [sub] if sub else []
    if len(per_model) > 1:
        lo = min(per_model.values(), key=lambda d: d["mean_plane_var_fraction"])
        hi = max(per_model.values(), key=lambda d: d["mean_plane_var_fraction"])
        text.append(f"Model means run from {fmt_pct(lo['mean_plane_var_fraction'])} ({lo['model']}) to "
                    f"{fmt_pct(hi['mean_plane_var_fraction'])} ({hi['model']}).")
    text.append("The seed: 38% on average (29–46% across models); var b > var a in 88% of heads.")
    return attach(built, *text)

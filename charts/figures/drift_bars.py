"""Rotation figure 02: position signal of Q and K on the drift axis a, per model.

Source: view ``drift_correlation`` (model rows, and the pooled overall row by default). Bars: mean
|r_q_a| (blue) and |r_k_a| (red); black ticks: the same models' mean PC0 r_q and |r_k|, showing the
reversal the seed points out (K leads on axis a, Q leads on PC0). A panel per family.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, resolve_models, rows, values
from qkdb.charts.style import fmt_num, kind_scale

OVERALL = "all models"

_SQL = """
with d as materialized (
    select coalesce(model, '{overall}') as model, coalesce(family, '{overall}') as family, scope, n_heads,
           mean_abs_r_q_a, mean_abs_r_k_a, mean_pc0_r_q, mean_pc0_abs_r_k
    from drift_correlation
    where (scope = 'model' and list_contains($models, model)) or (scope = 'overall' and $overall)
)
select model, family, scope, n_heads, 'Q' as kind, mean_abs_r_q_a as drift, mean_pc0_r_q as pc0 from d
union all
select model, family, scope, n_heads, 'K', mean_abs_r_k_a, mean_pc0_abs_r_k from d
order by scope, model, kind desc
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.VConcatChart:
    """Bars of mean |r_q_a| and |r_k_a| per model in a row per family, PC0 values as ticks."""
    chosen = resolve_models(con, models)
    overall = not models and len(chosen) > 1
    data = rows(con, _SQL.format(overall=OVERALL), {"models": chosen, "overall": overall})
    drawn = drawn_models(con, chosen, models)
    shown = drawn.rows(data, keep=(OVERALL,))
    families = sorted({d["family"] for d in shown if d["scope"] != "overall"}) + ([OVERALL] if overall else [])
    order = drawn.models + ([OVERALL] if overall else [])
    # A fixed label extent lines the panels' plots up whatever their model names.
    y = alt.Y("model:N", sort=order, title=None, axis=alt.Axis(labelLimit=280, minExtent=250))
    offset = alt.YOffset("kind:N", sort=["Q", "K"])
    color = alt.Color("kind:N", scale=kind_scale(), title=None, legend=alt.Legend(
        orient="top", labelExpr="datum.label == 'Q' ? 'mean |r_q| on axis a' : 'mean |r_k| on axis a'"))
    tooltip = [alt.Tooltip("model:N"), alt.Tooltip("kind:N"), alt.Tooltip("drift:Q", title="mean |r| on a", format=".3f"),
               alt.Tooltip("pc0:Q", title="mean |r| on PC0", format=".3f"), alt.Tooltip("n_heads:Q", title="heads")]

    def panel(family: str, last: bool) -> alt.LayerChart:
        # Only the bottom panel labels the shared x axis.
        axis = alt.Axis() if last else alt.Axis(labels=False, ticks=False, title=None, domain=False)
        x = alt.X("drift:Q", title="mean |r| with position", scale=alt.Scale(domain=[0, 1]), axis=axis)
        base = alt.Chart().transform_filter(alt.FieldEqualPredicate(field="family", equal=family))
        bars = base.mark_bar().encode(y=y, yOffset=offset, x=x, color=color, tooltip=tooltip)
        ticks = base.mark_tick(color="black", thickness=2, size=11).encode(
            y=y, yOffset=offset, x=alt.X("pc0:Q", scale=alt.Scale(domain=[0, 1]), axis=axis))
        return alt.layer(bars, ticks).properties(
            width=460, height=alt.Step(14), title=alt.TitleParams(family, anchor="start", fontSize=12, offset=4),
        )

    ov = {d["kind"]: d["drift"] for d in data if d["scope"] == "overall"}
    if not ov and len(chosen) == 1:
        ov = {d["kind"]: d["drift"] for d in data}
    title = alt.TitleParams(
        "Position signal of Q and K on the drift axis a",
        subtitle=[
            "Planar rotation (seed 002 figure 02): bars = mean |corr| of Q·a and K·a with position;",
            "black ticks = mean PC0 r_q and |r_k| of the combined PCA, for comparison.",
            *([drawn.note] if drawn.note else []),
        ],
    )
    # One panel per family, each with only its models on y. A facet with an independent y would do
    # it too, but makes Vega warn about unioning "fields from different sources" in the browser.
    rows_ = [panel(f, i == len(families) - 1) for i, f in enumerate(families)]
    built = alt.vconcat(*rows_, spacing=10, data=values(shown)).resolve_scale(y="independent").properties(title=title)
    per = {}
    for d in data:
        if d["scope"] == "model":
            per.setdefault(d["model"], {})[d["kind"]] = d
    k_leads = sum(1 for v in per.values() if (v.get("K", {}).get("drift") or 0) > (v.get("Q", {}).get("drift") or 0))
    q_leads_pc0 = sum(1 for v in per.values() if (v.get("Q", {}).get("pc0") or 0) > (v.get("K", {}).get("pc0") or 0))
    text = []
    if ov:
        text.append(f"Over all heads, mean |r| on the drift axis a is {fmt_num(ov.get('K'))} for keys and "
                    f"{fmt_num(ov.get('Q'))} for queries.")
    text.append(f"Keys lead on axis a in {k_leads} of {len(per)} model(s); on PC0 queries lead in {q_leads_pc0} of {len(per)} "
                "(the reversal the seed points out).")
    text.append("The seed: 0.87 for keys vs 0.74 for queries on a; on PC0 0.80 (Q) vs 0.48 (K).")
    return attach(built, *text)

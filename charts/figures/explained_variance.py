"""PCA figure 05: mean explained variance per principal component, with the cumulative share.

Source: view ``explained_variance``. Overall pooled rows by default, a panel per model with
``models``. Bars are means over heads (whiskers ±1 sd), the line the cumulative mean.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import scoped_rows, values
from qkdb.charts.style import fmt_pct

_SQL = """
select coalesce(model, 'all models') as panel, pc, 'PC' || pc as pc_label, n_heads,
       mean_explained_variance as mean, sd_explained_variance as sd,
       greatest(mean_explained_variance - coalesce(sd_explained_variance, 0), 0) as lo,
       mean_explained_variance + coalesce(sd_explained_variance, 0) as hi,
       cumulative_explained_variance as cumulative
from explained_variance
where {where}
order by 1, 2
"""

BAR_COLOR = "#6a51a3"

# Seed 003 Finding 1 rests on these bars: a head's positional variance is the sum over PCs of EV × r².
_POSITIONAL = """
select coalesce(model, 'all models') as panel, mean_pos_var_q, mean_pos_var_k, mean_pc0_pos_share_q, mean_pc0_pos_share_k
from positional_variance
where {where}
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.Chart:
    """Bars of mean explained variance per PC (±1 sd) and the cumulative line."""
    chosen, data = scoped_rows(con, _SQL, models)
    order = [f"PC{p}" for p in sorted({d["pc"] for d in data})]
    x = alt.X("pc_label:N", sort=order, title="principal component", axis=alt.Axis(labelAngle=0))
    y_axis = alt.Axis(format="%")
    base = alt.Chart()
    bars = base.mark_bar(color=BAR_COLOR, opacity=0.85).encode(
        x=x, y=alt.Y("mean:Q", title="share of combined Q/K variance", axis=y_axis, scale=alt.Scale(domain=[0, 1])),
        tooltip=[alt.Tooltip("panel:N", title="models"), alt.Tooltip("pc_label:N", title="PC"),
                 alt.Tooltip("mean:Q", format=".1%"), alt.Tooltip("sd:Q", format=".1%"),
                 alt.Tooltip("cumulative:Q", format=".1%"), alt.Tooltip("n_heads:Q", title="heads")],
    )
    whiskers = base.mark_rule(color="#333333").encode(x=x, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"))
    labels = base.mark_text(dy=-8, fontSize=10, color="#333333").encode(
        x=x, y=alt.Y("hi:Q"), text=alt.Text("mean:Q", format=".0%")
    )
    cumulative = base.mark_line(color="#555555", strokeDash=[5, 3], point=alt.OverlayMarkDef(color="#555555", size=25)).encode(
        x=x, y=alt.Y("cumulative:Q")
    )
    title = alt.TitleParams(  # what is drawn; PC0's share is the caption's
        "Explained variance per principal component",
        subtitle=["Combined Q/K PCA (seed 003 figure 05): bars are means over heads (whiskers ±1 sd); "
                  "dashed line: cumulative share."],
    )
    layer = alt.layer(bars, whiskers, labels, cumulative, data=values(data)).properties(
        width=max(300, 44 * len(order)), height=240
    )
    if models:
        built = layer.facet(facet=alt.Facet("panel:N", sort=chosen, title=None), columns=min(3, len(chosen))).properties(title=title)
    else:
        built = layer.properties(title=title)
    _, pos = scoped_rows(con, _POSITIONAL, models)
    return attach(built, *_caption(data, pos))


def _caption(data: list[dict], positional: list[dict]) -> list[str]:
    out = []
    pos = {p["panel"]: p for p in positional}
    for panel in dict.fromkeys(d["panel"] for d in data):
        got = {d["pc"]: d for d in data if d["panel"] == panel}
        pc0 = got.get(0)
        if not pc0:
            continue
        last = got[max(got)]
        text = (f"{panel} ({pc0['n_heads']:,} heads): PC0 explains {fmt_pct(pc0['mean'], 1)} on average "
                f"(sd {fmt_pct(pc0['sd'], 1)}), the first {len(got)} PCs {fmt_pct(last['cumulative'])} together.")
        p = pos.get(panel)
        if p:
            text += (f" Position-linear variance (Σ EV·r² over these PCs): Q {fmt_pct(p['mean_pos_var_q'], 1)}, "
                     f"K {fmt_pct(p['mean_pos_var_k'], 1)}, PC0's share of it {fmt_pct(p['mean_pc0_pos_share_q'])} / "
                     f"{fmt_pct(p['mean_pc0_pos_share_k'])}.")
        out.append(text)
    out.append("The seed: PC0 ≈ 34%; Q 27% and K 14% of variance linear in position, ~90% / ~74% of it on PC0.")
    return out

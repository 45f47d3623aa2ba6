"""PCA figure 01: mean position correlation of Q (r_q) and K (r_k) on every principal component.

Source: view ``pc_roles``. By default the pooled overall rows (every standalone model and the latest
checkpoint of each series); with ``models``, one panel per model. Bars are means, whiskers ±1 sd
across heads; Q blue, K red.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import scoped_rows, values
from qkdb.charts.style import fmt_num, kind_scale

_SQL = """
with p as materialized (
    select * from pc_roles
    where {where}
)
select coalesce(model, 'all models') as panel, pc, 'PC' || pc as pc_label, 'Q' as kind, n_heads,
       mean_r_q as mean, sd_r_q as sd, mean_r_q - coalesce(sd_r_q, 0) as lo, mean_r_q + coalesce(sd_r_q, 0) as hi
from p
union all
select coalesce(model, 'all models'), pc, 'PC' || pc, 'K', n_heads,
       mean_r_k, sd_r_k, mean_r_k - coalesce(sd_r_k, 0), mean_r_k + coalesce(sd_r_k, 0)
from p
order by 1, 2, 4 desc
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.Chart:
    """Grouped bars of mean r_q and r_k per PC (±1 sd), overall or one panel per model."""
    chosen, data = scoped_rows(con, _SQL, models)
    pcs = sorted({d["pc"] for d in data})
    order = [f"PC{p}" for p in pcs]
    x = alt.X("pc_label:N", sort=order, title="principal component", axis=alt.Axis(labelAngle=0))
    offset = alt.XOffset("kind:N", sort=["Q", "K"])
    color = alt.Color("kind:N", scale=kind_scale(), title=None, legend=alt.Legend(labelExpr="'mean r_' + lower(datum.label)"))
    base = alt.Chart()
    bars = base.mark_bar().encode(
        x=x, xOffset=offset, y=alt.Y("mean:Q", title="mean position correlation r", scale=alt.Scale(domain=[-0.2, 1])),
        color=color,
        tooltip=[
            alt.Tooltip("panel:N", title="models"), alt.Tooltip("pc_label:N", title="PC"),
            alt.Tooltip("kind:N"), alt.Tooltip("mean:Q", format=".3f"), alt.Tooltip("sd:Q", format=".3f"),
            alt.Tooltip("n_heads:Q", title="heads"),
        ],
    )
    whiskers = base.mark_rule(color="#333333").encode(x=x, xOffset=offset, y="lo:Q", y2="hi:Q")
    pc0 = {d["kind"]: d["mean"] for d in data if d["pc"] == 0 and d["panel"] == data[0]["panel"]} if data else {}
    title = alt.TitleParams(
        "PC roles: position signal of Q and K per principal component",
        subtitle=[
            "Combined Q/K PCA (seed 003 figure 01): bars are means over heads, whiskers ±1 sd.",
            (f"PC0: mean r_q {fmt_num(pc0.get('Q'))}, mean r_k {fmt_num(pc0.get('K'))}." if not models and pc0 else ""),
        ],
    )
    layer = alt.layer(bars, whiskers, data=values(data)).properties(width=max(260, 38 * len(pcs)), height=220)
    if models:
        return layer.facet(
            facet=alt.Facet("panel:N", sort=chosen, title=None), columns=min(3, len(chosen))
        ).properties(title=title)
    return layer.properties(title=title)

"""Rotation figure 05: how much faster keys drift than queries, |alpha_k| / |alpha_q|, per model.

Source: view ``slope_ratio`` (model rows and, by default, the pooled overall row). The dot is the
median over heads, the bar the interquartile range; log scale, the dashed line is ratio 1 (equal drift).
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import families_of, resolve_models, rows, values
from qkdb.charts.style import SLOPE_RATIO, fmt_num, fmt_pct, family_scale

OVERALL = "all models"

_SQL = """
select coalesce(model, '{overall}') as model, coalesce(family, '{overall}') as family, scope, n_heads,
       median_ratio, q25_ratio, q75_ratio, share_k_faster
from slope_ratio
where ((scope = 'model' and list_contains($models, model)) or (scope = 'overall' and $overall))
  and median_ratio is not null
order by scope, model
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Median |alpha_k|/|alpha_q| per model with IQR bars, coloured by family, on a log axis."""
    chosen = resolve_models(con, models)
    overall = not models and len(chosen) > 1
    data = rows(con, _SQL.format(overall=OVERALL), {"models": chosen, "overall": overall})
    order = chosen + ([OVERALL] if overall else [])
    fams = families_of(con, chosen)
    positive = all((d["q25_ratio"] or 0) > 0 for d in data)
    scale = alt.Scale(type="log") if positive else alt.Scale(zero=True)
    y = alt.Y("model:N", sort=order, title=None, axis=alt.Axis(labelLimit=280))
    domain, range_ = family_scale(fams).domain, family_scale(fams).range
    color = alt.Color("family:N", scale=alt.Scale(domain=[*domain, OVERALL], range=[*range_, "#333333"]), title="family",
                      legend=alt.Legend(symbolOpacity=1))
    base = alt.Chart(values(data))
    iqr = base.mark_rule(strokeWidth=3, opacity=0.5).encode(
        y=y, x=alt.X("q25_ratio:Q", scale=scale, title=f"{SLOPE_RATIO} (median; bar = IQR over heads)"),
        x2=alt.X2("q75_ratio:Q"), color=color,
    )
    dots = base.mark_circle(size=80, opacity=1).encode(
        y=y, x=alt.X("median_ratio:Q"), color=color,
        tooltip=[alt.Tooltip("model:N"), alt.Tooltip("family:N"), alt.Tooltip("median_ratio:Q", title="median", format=".2f"),
                 alt.Tooltip("q25_ratio:Q", title="25%", format=".2f"), alt.Tooltip("q75_ratio:Q", title="75%", format=".2f"),
                 alt.Tooltip("share_k_faster:Q", title="heads with K faster", format=".0%"),
                 alt.Tooltip("n_heads:Q", title="heads")],
    )
    labels = base.mark_text(align="left", dx=8, dy=-8, fontSize=10, color="#333333").encode(
        y=y, x=alt.X("median_ratio:Q"), text=alt.Text("median_ratio:Q", format=".2f")
    )
    one = base.transform_aggregate(_n="count()").mark_rule(color="#777777", strokeDash=[4, 3]).encode(x=alt.datum(1))
    ov = next((d for d in data if d["scope"] == "overall"), None)
    title = alt.TitleParams(
        "Drift slope ratio of keys to queries per model",
        subtitle=[
            "Planar rotation (seed 002 figure 05): |K slope| / |Q slope| of the OLS position slopes on axis a; "
            "dashed: equal drift."
            + (f" Overall median {fmt_num(ov['median_ratio'])}." if ov else "")
        ],
    )
    built = alt.layer(one, iqr, dots, labels).properties(width=480, height=alt.Step(24), title=title)
    per_model = [d for d in data if d["scope"] == "model"]
    text = []
    if ov:
        text.append(f"Pooled over {ov['n_heads']:,} heads the median ratio is {fmt_num(ov['median_ratio'])} "
                    f"(IQR {fmt_num(ov['q25_ratio'])}–{fmt_num(ov['q75_ratio'])}); keys drift faster in "
                    f"{fmt_pct(ov['share_k_faster'])} of heads.")
    if per_model:
        lo = min(per_model, key=lambda d: d["median_ratio"])
        hi = max(per_model, key=lambda d: d["median_ratio"])
        text.append(f"Model medians run from {fmt_num(lo['median_ratio'])} ({lo['model']}) to "
                    f"{fmt_num(hi['median_ratio'])} ({hi['model']}).")
    text.append("The seed: 1.83 overall; small Qwen3 ≈ 8, Llama ≈ 2, Ministral3 ≈ 1.")
    return attach(built, *text)

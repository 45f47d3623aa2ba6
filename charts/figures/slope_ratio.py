"""Rotation figure 05: how much faster keys drift than queries, |alpha_k| / |alpha_q|, per model.

Source: view ``slope_ratio`` (model rows and, by default, the pooled overall row). The dot is the
median over heads, the bar the interquartile range; log scale, the dashed line is ratio 1 (equal drift).
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, families_of, resolve_models, rows, values
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
    drawn = drawn_models(con, chosen, models)
    order = drawn.models + ([OVERALL] if overall else [])
    fams = families_of(con, chosen)
    positive = all((d["q25_ratio"] or 0) > 0 for d in data)
    if positive and data:
        # A log axis fitted to the data and to 1, the equal-drift line, with a margin on both sides:
        # Vega's own "nice" domain ran 1-10 for data between 1.3 and 2.5, the line on the frame.
        domain = _log_domain([v for d in data for v in (d["q25_ratio"], d["q75_ratio"], d["median_ratio"]) if v] + [1.0])
        scale = alt.Scale(type="log", domain=list(domain), nice=False)
        axis = alt.Axis(values=_log_ticks(*domain), format="~g", grid=True)
    else:
        scale, axis = alt.Scale(zero=True), alt.Axis(grid=True)
    y = alt.Y("model:N", sort=order, title=None, axis=alt.Axis(labelLimit=280))
    domain, range_ = family_scale(fams).domain, family_scale(fams).range
    # The pooled row's entry only where that row is drawn (not for one model, nor a chosen few).
    extra = ([OVERALL], ["#333333"]) if overall else ([], [])
    color = alt.Color("family:N", scale=alt.Scale(domain=[*domain, *extra[0]], range=[*range_, *extra[1]]), title="family",
                      legend=alt.Legend(symbolOpacity=1))
    base = alt.Chart(values(drawn.rows(data, keep=(OVERALL,))))
    iqr = base.mark_rule(strokeWidth=3, opacity=0.5).encode(
        y=y, x=alt.X("q25_ratio:Q", scale=scale, axis=axis, title=f"{SLOPE_RATIO} (median; bar = IQR over heads)"),
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
    once = base.transform_aggregate(_n="count()")
    one = once.mark_rule(color="#777777", strokeDash=[4, 3]).encode(x=alt.datum(1))
    one_label = once.mark_text(align="left", baseline="top", dx=3, dy=2, fontSize=10, color="#555555").encode(
        x=alt.datum(1), y=alt.value(0), text=alt.value("equal drift"),
    )
    ov = next((d for d in data if d["scope"] == "overall"), None)
    title = alt.TitleParams(  # what is drawn; the medians are the caption's
        "Drift slope ratio of keys to queries per model",
        subtitle=[
            "Planar rotation (seed 002 figure 05): |K slope| / |Q slope| of the OLS position slopes on axis a; "
            "dashed: equal drift (ratio 1), right of it keys drift faster.",
            *([drawn.note] if drawn.note else []),
        ],
    )
    built = alt.layer(one, one_label, iqr, dots, labels).properties(width=480, height=alt.Step(24), title=title)
    per_model = [d for d in data if d["scope"] == "model"]
    text = []
    if ov:
        text.append(f"Pooled over {ov['n_heads']:,} heads the median ratio is {fmt_num(ov['median_ratio'])} "
                    f"(IQR {fmt_num(ov['q25_ratio'])}–{fmt_num(ov['q75_ratio'])}); keys drift faster in "
                    f"{fmt_pct(ov['share_k_faster'])} of heads.")
    if len(per_model) == 1:
        (m,) = per_model
        text.append(f"{m['model']}: median ratio {fmt_num(m['median_ratio'])} (IQR {fmt_num(m['q25_ratio'])}–"
                    f"{fmt_num(m['q75_ratio'])}) over {m['n_heads']:,} heads; keys drift faster in "
                    f"{fmt_pct(m['share_k_faster'])} of them.")
    elif per_model:
        lo = min(per_model, key=lambda d: d["median_ratio"])
        hi = max(per_model, key=lambda d: d["median_ratio"])
        text.append(f"Model medians run from {fmt_num(lo['median_ratio'])} ({lo['model']}) to "
                    f"{fmt_num(hi['median_ratio'])} ({hi['model']}).")
    text.append("The seed: 1.83 overall; small Qwen3 ≈ 8, Llama ≈ 2, Ministral3 ≈ 1.")
    return attach(built, *text)


def _log_domain(values: list[float], margin: float = 0.06) -> tuple[float, float]:
    """The log axis' ends: the values' range widened on each side by ``margin`` of its log width (at least 8%)."""
    lo, hi = min(values), max(values)
    pad = max(1.08, (hi / lo) ** margin)
    return lo / pad, hi * pad


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Round tick values inside [lo, hi], denser the narrower the range (a log axis over 1.3-2.5 needs 1.5 and 2)."""
    import math

    decades = math.log10(hi / lo)
    steps = (1, 2, 5) if decades > 1.2 else (1, 1.5, 2, 3, 5, 7) if decades > 0.45 else (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
    return [round(m * 10**e, 6) for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
            for m in steps if lo <= m * 10**e <= hi]

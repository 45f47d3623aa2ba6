"""PCA figure 07: position signal over training, mean PC0 r_q and r_k per checkpoint (±1 sd).

Source: view ``series_trajectory``. Q blue, K red, each line and its ±1 sd whiskers set a little
apart (``xOffset``) so the two kinds' whiskers never draw over each other; background tinted by
training phase.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import rows, values
from qkdb.charts.figures.series import Series
from qkdb.charts.style import fmt_num, kind_scale

_SQL = """
with t as materialized (select * from series_trajectory where series = $s)
select model, 'Q' as kind, mean_r_q as mean, sd_r_q as sd,
       mean_r_q - coalesce(sd_r_q, 0) as lo, mean_r_q + coalesce(sd_r_q, 0) as hi, n_heads
from t
union all
select model, 'K', mean_r_k, sd_r_k, mean_r_k - coalesce(sd_r_k, 0), mean_r_k + coalesce(sd_r_k, 0), n_heads
from t
order by model, kind desc
"""


def _trend(s: Series, data: list[dict], kind: str) -> str:
    by = {d["model"]: d["mean"] for d in data if d["kind"] == kind}
    v = [by.get(m) for m in s.models]
    v = [x for x in v if x is not None]
    if len(v) < 2:
        return "n/a"
    peak = max(range(len(v)), key=v.__getitem__)
    text = f"{fmt_num(v[0])} → {fmt_num(v[-1])}"
    if 0 < peak < len(v) - 1:
        text += f" (peak {fmt_num(v[peak])} at {s.order[peak]})"
    return text


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Lines of mean PC0 r_q and r_k across the checkpoints of a series, ±1 sd bars, phase shading."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"s": s.name}))
    base = alt.Chart(values(data))
    x = s.x()
    offset = alt.XOffset("kind:N", sort=["Q", "K"], scale=alt.Scale(paddingOuter=1))
    color = alt.Color("kind:N", scale=kind_scale(), title=None,
                      legend=alt.Legend(labelExpr="'mean r_' + lower(datum.label) + ' (PC0), ±1 sd'", orient="right"))
    lo = min([d["lo"] for d in data if d["lo"] is not None] + [-0.2])
    hi = max([d["hi"] for d in data if d["hi"] is not None] + [1.0])
    y = alt.Y("mean:Q", title="mean PC0 position correlation", scale=alt.Scale(domain=[lo, hi], nice=True))
    bars = base.mark_rule(strokeWidth=1.6, opacity=0.8).encode(x=x, xOffset=offset, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"), color=color)
    line = base.mark_line(point=True, strokeWidth=2.5).encode(
        x=x, xOffset=offset, y=y, color=color,
        tooltip=[alt.Tooltip("checkpoint:N"), alt.Tooltip("model:N"), alt.Tooltip("kind:N"), alt.Tooltip("mean:Q", format=".3f"),
                 alt.Tooltip("sd:Q", format=".3f"), alt.Tooltip("n_heads:Q", title="heads")],
    )
    built = s.panel(
        base, bars, line,
        title="Position signal over training: PC0 r_q and r_k",
        subtitle=f"Combined Q/K PCA (seed 003 figure 07), {s.subtitle()}; means over heads, bars ±1 sd.",
    )
    return attach(
        built,
        f"Over the checkpoints of {s.name}, mean PC0 r_q goes {_trend(s, data, 'Q')} and mean r_k "
        f"{_trend(s, data, 'K')}.",
        "The seed reports r_q rising 0.67 → 0.87 and r_k peaking, then dropping to 0.46 in long-context training.",
    )

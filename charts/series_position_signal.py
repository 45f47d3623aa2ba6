"""PCA figure 07: position signal over training, mean PC0 r_q and r_k per checkpoint (±1 sd).

Source: view ``series_trajectory``. Q blue, K red; background tinted by training phase.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import rows, values
from qkdb.charts.series import Series
from qkdb.charts.style import kind_scale

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


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Lines of mean PC0 r_q and r_k across the checkpoints of a series, ±1 sd bars, phase shading."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"s": s.name}))
    base = alt.Chart(values(data))
    x = s.x()
    color = alt.Color("kind:N", scale=kind_scale(), title=None,
                      legend=alt.Legend(labelExpr="'mean r_' + lower(datum.label) + ' (PC0)'"))
    y = alt.Y("mean:Q", title="mean PC0 position correlation", scale=alt.Scale(domain=[-0.2, 1]))
    bars = base.mark_rule(strokeWidth=1.5, opacity=0.7).encode(x=x, y="lo:Q", y2="hi:Q", color=color)
    line = base.mark_line(point=True, strokeWidth=2.5).encode(
        x=x, y=y, color=color,
        tooltip=["checkpoint:N", "model:N", "kind:N", alt.Tooltip("mean:Q", format=".3f"),
                 alt.Tooltip("sd:Q", format=".3f"), alt.Tooltip("n_heads:Q", title="heads")],
    )
    return s.panel(
        base, bars, line,
        title="Position signal over training: PC0 r_q and r_k",
        subtitle=f"Combined Q/K PCA (seed 003 figure 07), {s.subtitle()}; means over heads, bars ±1 sd.",
    )

"""PCA figure 09: explained variance over training, mean share of the first PCs per checkpoint (±1 sd).

Source: view ``explained_variance`` (model rows of the series' checkpoints). PC0 bold, PC1 and
PC2 for context; background tinted by training phase.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import rows, values
from qkdb.charts.series import Series

N_PCS = 3
PC_COLORS = ("#3f007d", "#807dba", "#bcbddc")

_SQL = """
select model, 'PC' || pc as pc_label, pc, mean_explained_variance as mean, sd_explained_variance as sd,
       greatest(mean_explained_variance - coalesce(sd_explained_variance, 0), 0) as lo,
       mean_explained_variance + coalesce(sd_explained_variance, 0) as hi, n_heads
from explained_variance
where scope = 'model' and list_contains($models, model) and pc < $n_pcs
order by model, pc
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Lines of mean explained variance of PC0–PC2 across the checkpoints of a series."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"models": s.models, "n_pcs": N_PCS}))
    base = alt.Chart(values(data))
    x = s.x()
    labels = [f"PC{i}" for i in range(N_PCS)]
    color = alt.Color("pc_label:N", scale=alt.Scale(domain=labels, range=list(PC_COLORS)), title="component")
    bars = base.mark_rule(strokeWidth=1.5, opacity=0.6).encode(x=x, y="lo:Q", y2="hi:Q", color=color)
    line = base.mark_line(point=True).encode(
        x=x,
        y=alt.Y("mean:Q", title="share of combined Q/K variance", axis=alt.Axis(format="%")),
        color=color,
        strokeWidth=alt.condition("datum.pc == 0", alt.value(3), alt.value(1.5)),
        tooltip=["checkpoint:N", "model:N", "pc_label:N", alt.Tooltip("mean:Q", format=".1%"),
                 alt.Tooltip("sd:Q", format=".1%"), alt.Tooltip("n_heads:Q", title="heads")],
    )
    return s.panel(
        base, bars, line,
        title="Explained variance over training",
        subtitle=f"Combined Q/K PCA (seed 003 figure 09), {s.subtitle()}; means over heads, bars ±1 sd.",
    )

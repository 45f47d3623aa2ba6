"""PCA figure 08: taxonomy over training, the share of heads in each category per checkpoint.

Source: view ``series_trajectory`` (its ``frac_*`` columns, from the ``taxonomy`` view and the
thresholds in ``params``). One line per category; background tinted by training phase.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import rows, values
from qkdb.charts.series import Series
from qkdb.charts.style import CATEGORIES, category_scale

_SQL = "with t as materialized (select * from series_trajectory where series = $s) " + " union all ".join(
    f"select model, '{c}' as category, {i} as category_order, frac_{c.replace('-', '_')} as fraction, n_heads from t"
    for i, c in enumerate(CATEGORIES, start=1)
) + " order by category_order, model"


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Lines of the taxonomy category fractions across the checkpoints of a series."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"s": s.name}))
    base = alt.Chart(values(data))
    x = s.x()
    line = base.mark_line(point=True, strokeWidth=2.5).encode(
        x=x,
        y=alt.Y("fraction:Q", title="share of heads", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("category:N", scale=category_scale(), title="category", sort=list(CATEGORIES)),
        tooltip=["checkpoint:N", "model:N", "category:N", alt.Tooltip("fraction:Q", format=".1%"),
                 alt.Tooltip("n_heads:Q", title="heads")],
    )
    return s.panel(
        base, line,
        title="Head taxonomy over training",
        subtitle=f"Combined Q/K PCA (seed 003 figure 08), {s.subtitle()}; categories from PC0 r_q and |r_k|.",
    )

"""PCA figure 08: taxonomy over training, the share of heads in each category per checkpoint.

Source: view ``series_trajectory`` (its ``frac_*`` columns, from the ``taxonomy`` view and the
thresholds in ``params``). The shares of a checkpoint sum to one, so they are stacked bars, one per
checkpoint: lines for five shares hid each other wherever several sat at 0%. Segments of at least
6% print their share.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import rows, values
from qkdb.charts.figures.series import Series
from qkdb.charts.style import CATEGORIES, category_scale, fmt_pct

_SQL = "with t as materialized (select * from series_trajectory where series = $s) " + " union all ".join(
    f"select model, '{c}' as category, {i} as category_order, frac_{c.replace('-', '_')} as fraction, n_heads from t"
    for i, c in enumerate(CATEGORIES, start=1)
) + " order by category_order, model"


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Stacked bars of the taxonomy category shares across the checkpoints of a series."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"s": s.name}))
    base = alt.Chart(values(data))
    x = s.x()
    y = alt.Y("fraction:Q", title="share of heads", stack="zero", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1]))
    order = alt.Order("category_order:Q", sort="ascending")
    bars = base.mark_bar(stroke="white", strokeWidth=0.6).encode(
        x=x, y=y, order=order,
        color=alt.Color("category:N", scale=category_scale(), title="category", sort=list(CATEGORIES)),
        tooltip=[alt.Tooltip("checkpoint:N"), alt.Tooltip("model:N"), alt.Tooltip("category:N"), alt.Tooltip("fraction:Q", format=".1%"),
                 alt.Tooltip("n_heads:Q", title="heads")],
    )
    labels = base.mark_text(fontSize=10, color="white").encode(
        x=x, y=alt.Y("fraction:Q", stack="zero", bandPosition=0.5), order=order, detail=alt.Detail("category:N"),
        text=alt.Text("fraction:Q", format=".0%"),
        opacity=alt.condition("datum.fraction >= 0.06", alt.value(1), alt.value(0)),
    )
    built = alt.layer(bars, labels).properties(
        width=s.width(), height=280,
        title=alt.TitleParams(
            "Head taxonomy over training",
            subtitle=[f"Combined Q/K PCA (seed 003 figure 08), {s.subtitle()}; categories from PC0 r_q and |r_k|."],
        ),
    )
    share = {(d["model"], d["category"]): d["fraction"] for d in data}
    first, last = s.models[0], s.models[-1]

    def move(cat):
        return f"{cat} {fmt_pct(share.get((first, cat)))} → {fmt_pct(share.get((last, cat)))}"

    return attach(
        built,
        f"From {s.order[0]} to {s.order[-1]}: {move('position-dominated')}, {move('mixed')}, {move('q-positional')}, "
        f"{move('content-focused')}, {move('k-positional')}.",
        "The seed reports position-dominated heads growing 34% → 71% and content-focused heads falling below 1%.",
    )

"""PCA figures 10/11: mean PC0 r_q / r_k per checkpoint and relative-depth bin.

Source: view ``depth_profile`` (model rows of the series' checkpoints); rows are checkpoints in
training order. ``Blues`` for r_q, ``Reds`` for r_k, 0..1 and annotated, as the cross-model heatmaps.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import rows
from qkdb.charts.figures.heatmap import complete, depth_heatmap, empty_note, summary
from qkdb.charts.figures.series import Series
from qkdb.charts.style import fmt_num

_SQL = """
select model, depth_bin, n_heads, {col} as value
from depth_profile
where scope = 'model' and list_contains($models, model)
order by model, depth_bin
"""


def _build(con: duckdb.DuckDBPyConnection, series, kind: str) -> alt.LayerChart:
    s = Series(con, series)
    col, scheme, label, fig, seed = {
        "q": ("mean_r_q", "blues", "mean r_q", "10", "Q position is uniform across layers by step 1.2M"),
        "k": ("mean_r_k", "reds", "mean r_k", "11", "K position is stronger in early layers and drops in long-context training"),
    }[kind]
    data = s.label(complete(con, rows(con, _SQL.format(col=col), {"models": s.models}), s.models))
    chart = depth_heatmap(
        data, row="checkpoint", row_title="checkpoint", row_order=s.order, value="value", value_title=label,
        scheme=scheme,
        title=alt.TitleParams(
            f"Mean PC0 {label[5:]} over training and layer depth",
            subtitle=[f"Combined Q/K PCA (seed 003 figure {fig}), {s.subtitle()}.", empty_note(data)],
        ),
    )
    return attach(chart, f"Mean PC0 {label[5:]} per checkpoint of {s.name} × 10 depth bins.",
                  summary(data, "value", "checkpoint", fmt_num), f"The seed: {seed}.")


def build_rq(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Mean PC0 r_q per checkpoint × depth bin (Blues, annotated)."""
    return _build(con, series, "q")


def build_rk(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Mean PC0 r_k per checkpoint × depth bin (Reds, annotated)."""
    return _build(con, series, "k")

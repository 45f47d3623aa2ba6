"""PCA figures 10/11: mean PC0 r_q / r_k per checkpoint and relative-depth bin.

Source: view ``depth_profile`` (model rows of the series' checkpoints); rows are checkpoints in
training order. ``Blues`` for r_q, ``Reds`` for r_k, 0..1 and annotated, as the cross-model heatmaps.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import rows
from qkdb.charts.heatmap import depth_heatmap
from qkdb.charts.series import Series

_SQL = """
select model, depth_bin, n_heads, {col} as value
from depth_profile
where scope = 'model' and list_contains($models, model)
order by model, depth_bin
"""


def _build(con: duckdb.DuckDBPyConnection, series, kind: str) -> alt.LayerChart:
    s = Series(con, series)
    col, scheme, label, fig = {"q": ("mean_r_q", "blues", "mean r_q", "10"), "k": ("mean_r_k", "reds", "mean r_k", "11")}[kind]
    data = s.label(rows(con, _SQL.format(col=col), {"models": s.models}))
    return depth_heatmap(
        data, row="checkpoint", row_title="checkpoint", row_order=s.order, value="value", value_title=label,
        scheme=scheme,
        title=alt.TitleParams(
            f"Mean PC0 {label[5:]} over training and layer depth",
            subtitle=[f"Combined Q/K PCA (seed 003 figure {fig}), {s.subtitle()}."],
        ),
    )


def build_rq(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Mean PC0 r_q per checkpoint × depth bin (Blues, annotated)."""
    return _build(con, series, "q")


def build_rk(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Mean PC0 r_k per checkpoint × depth bin (Reds, annotated)."""
    return _build(con, series, "k")

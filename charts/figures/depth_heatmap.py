"""PCA figures 03/04 (seed 004): mean PC0 r_q / r_k per model and relative-depth bin.

Source: view ``depth_profile`` (model rows). r_q on ``Blues``, r_k on ``Reds``, both 0..1 as in
the seed (a negative mean r_k, i.e. discordant Q/K gradients, clamps to white but keeps its number).
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, resolve_models, rows
from qkdb.charts.figures.heatmap import complete, depth_heatmap, empty_note, summary
from qkdb.charts.style import fmt_num

_SQL = """
select d.model, d.family, d.depth_bin, d.n_heads, d.{col} as value
from depth_profile d
where d.scope = 'model' and list_contains($models, d.model)
order by d.model, d.depth_bin
"""


def _build(con: duckdb.DuckDBPyConnection, models, kind: str) -> alt.LayerChart:
    chosen = resolve_models(con, models)
    col, scheme, label, fig, seed = {
        "q": ("mean_r_q", "blues", "mean r_q", "03", "Q position is high at every depth in every model"),
        "k": ("mean_r_k", "reds", "mean r_k", "04", "K position varies by family: low in small Qwen3, peaking early in Llama"),
    }[kind]
    data = complete(con, rows(con, _SQL.format(col=col), {"models": chosen}), chosen)
    drawn = drawn_models(con, chosen, models)
    shown = drawn.rows(data)
    title = alt.TitleParams(
        f"Mean PC0 {label[5:]} by model and layer depth",
        subtitle=[
            f"Combined Q/K PCA (seed 003 figure {fig}): mean over the heads in each depth bin.",
            empty_note(shown),
            *([drawn.note] if drawn.note else []),
        ],
    )
    chart = depth_heatmap(
        shown, row="model", row_title="model", row_order=drawn.models, value="value", value_title=label,
        scheme=scheme, title=title,
    )
    return attach(chart, f"Mean PC0 {label[5:]} over {len(chosen)} model(s) × 10 depth bins.",
                  summary(data, "value", "model", fmt_num), f"The seed: {seed}.")


def build_rq(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Mean PC0 r_q per model × depth bin (Blues, annotated)."""
    return _build(con, models, "q")


def build_rk(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Mean PC0 r_k per model × depth bin (Reds, annotated)."""
    return _build(con, models, "k")

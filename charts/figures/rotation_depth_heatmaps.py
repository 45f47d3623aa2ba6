"""Rotation figure 06: |r_k| on the drift axis and the recency bias (×10³) per model and depth bin.

Source: view ``depth_profile`` (model rows). Left: mean |r_k_a| on ``Reds`` 0..1; right: mean
bias strength ×10³ on a diverging scale centred at zero (orange = recency, blue = primacy).
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, resolve_models, rows
from qkdb.charts.figures.heatmap import complete, depth_heatmap, empty_note, summary
from qkdb.charts.style import fmt_num

_SQL = """
select model, depth_bin, n_heads, mean_abs_r_k_a as abs_r_k_a, mean_bias_strength * 1e3 as bias_e3
from depth_profile
where scope = 'model' and list_contains($models, model)
order by model, depth_bin
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.HConcatChart:
    """Two annotated heatmaps side by side: mean |r_k_a| and mean bias ×10³ per model × depth bin."""
    chosen = resolve_models(con, models)
    data = complete(con, rows(con, _SQL, {"models": chosen}), chosen)
    drawn = drawn_models(con, chosen, models)
    shown = drawn.rows(data)
    biggest = max((abs(d["bias_e3"]) for d in data if d["bias_e3"] is not None), default=1.0) or 1.0
    left = depth_heatmap(
        shown, row="model", row_title="model", row_order=drawn.models, value="abs_r_k_a", value_title="mean |r_k| on a",
        scheme="reds", title=alt.TitleParams("K position signal on the drift axis: mean |r_k_a|", fontSize=13),
    )
    right = depth_heatmap(
        shown, row="model", row_title="model", row_order=drawn.models, value="bias_e3", value_title="bias ×10³",
        scheme="blueorange", domain=(-biggest, biggest), domain_mid=0.0, fmt=".1f",
        light_text_above=0.6 * biggest, show_rows=False,
        title=alt.TitleParams("Recency bias: mean bias strength ×10³ per token", fontSize=13),
    )
    chart = alt.hconcat(left, right, spacing=24).resolve_scale(color="independent").properties(
        title=alt.TitleParams(
            "Layer-depth heatmaps of the rotation model",
            subtitle=["Planar rotation (seed 002 figure 06): means over the heads in each relative-depth bin; "
                      "bias strength = (Q mean on axis a) × (K drift slope on a).", empty_note(shown),
                      *([drawn.note] if drawn.note else [])],
        )
    )
    return attach(
        chart,
        f"Left (mean |r_k| on the drift axis): {_lower(summary(data, 'abs_r_k_a', 'model', fmt_num))}",
        f"Right (mean bias ×10³): {_lower(summary(data, 'bias_e3', 'model', lambda v: fmt_num(v, 1)))}",
        "The seed: early layers encode position more strongly.",
    )


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]

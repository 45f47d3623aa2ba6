"""Rotation figure 01 (seed 000): 2×2 heads of one model on their {a, b} plane.

Source: table ``points`` (raw coordinates on the drift axis a and the separation axis b) and
``rotation`` for the stats (|r| of Q and K on a, the recency bias ×10³, separation strength and the
plane's variance share). Heads as in the PCA collage.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.collage import build_collage
from qkdb.charts.data import rows
from qkdb.charts.style import fmt_num, fmt_pct

_STATS = """
select layer, head, r_q_a, r_k_a, bias_strength * 1e3 as bias_e3, separation_strength, plane_var_fraction
from rotation
where model = $model and list_contains($heads, printf('%d.%d', layer, head))
"""


def head_stats(con: duckdb.DuckDBPyConnection, model: str, heads: list[tuple[int, int]]) -> dict:
    out: dict[tuple[int, int], list[str]] = {}
    for r in rows(con, _STATS, {"model": model, "heads": [f"{l}.{h}" for l, h in heads]}):
        out[(r["layer"], r["head"])] = [
            f"r_q(a) {fmt_num(r['r_q_a'])} · r_k(a) {fmt_num(r['r_k_a'])} · bias ×10³ {fmt_num(r['bias_e3'])}",
            f"separation {fmt_num(r['separation_strength'])} · plane variance {fmt_pct(r['plane_var_fraction'])}",
        ]
    return out


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.ConcatChart:
    """Scatter of sampled Q and K points on the drift axis a and the separation axis b."""
    return build_collage(
        con, models, head, figure="ab-plane-collage", x="a", y="b",
        x_title="axis a (drift / position)", y_title="axis b (Q–K separation)",
        stats=head_stats, title="Q/K in the {a, b} rotation plane",
        subtitle="Planar rotation (seed 000): Q blue, K red, light = early, dark = late position",
    )

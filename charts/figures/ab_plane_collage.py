"""Rotation figure 01 (seed 000): 2×2 heads of one model on their {a, b} plane.

Source: table ``points`` (raw coordinates on the drift axis a and the separation axis b) and
``rotation`` for the stats (r of Q and K on a, the recency bias ×10³, separation strength and the
plane's variance share). Heads as in the PCA collage.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import count, span
from qkdb.charts.figures.collage import build_collage, qk_gap
from qkdb.charts.data import head_label, model_table, rows
from qkdb.charts.style import fmt_num, fmt_pct

_STATS = """
select layer, head, r_q_a, r_k_a, bias_strength * 1e3 as bias_e3, separation_strength, plane_var_fraction
from {rotation}
where model = $model and list_contains($heads, printf('%d.%d', layer, head))
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.ConcatChart:
    """Scatter of sampled Q and K points on the drift axis a and the separation axis b."""
    got: list[dict] = []

    def stats(con, model, heads):
        got.extend(rows(con, _STATS.format(rotation=model_table(con, "rotation", model)), {"model": model, "heads": [f"{l}.{h}" for l, h in heads]}))
        return {
            (r["layer"], r["head"]): [
                f"r_q on a {fmt_num(r['r_q_a'])} · r_k on a {fmt_num(r['r_k_a'])} · bias ×10³ {fmt_num(r['bias_e3'], 1)}",
                f"separation {fmt_num(r['separation_strength'])} · plane variance {fmt_pct(r['plane_var_fraction'])}",
            ]
            for r in got
        }

    def caption(model, heads, data, lines):
        gaps = [g for g in (qk_gap(data, h, "y") for h in heads) if g is not None]
        above = sum(g > 0 for g in gaps)
        k_leads = sum(abs(r["r_k_a"] or 0) > abs(r["r_q_a"] or 0) for r in got)
        return (
            f"{count(len(heads), 'head')} of {model} ({', '.join(head_label(*h) for h in heads)}). "
            f"Q sits {'above' if above * 2 >= len(gaps) else 'below'} K on axis b in {above if above * 2 >= len(gaps) else len(gaps) - above} "
            f"of {len(gaps)} (cluster means {span((abs(g) for g in gaps), lambda v: f'{v:.0f}')} units apart); "
            f"along axis a position correlates at |r_k| {span((abs(r['r_k_a']) for r in got if r['r_k_a'] is not None), fmt_num)} "
            f"and |r_q| {span((abs(r['r_q_a']) for r in got if r['r_q_a'] is not None), fmt_num)} "
            f"(K ahead in {k_leads} of {len(got)}); bias strength ×10³ {span((r['bias_e3'] for r in got), lambda v: fmt_num(v, 1))}; "
            f"the plane holds {span((r['plane_var_fraction'] for r in got), fmt_pct)} of each head's variance."
        )

    return build_collage(
        con, models, head, figure="ab-plane-collage", x="a", y="b",
        x_title="axis a (drift / position)", y_title="axis b (Q–K separation)",
        stats=stats, caption=caption, title="Q/K in the {a, b} rotation plane",
        subtitle="Planar rotation (seed 000): Q blue, K red, light = early, dark = late position",
    )

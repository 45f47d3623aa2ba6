"""Rotation figure 10: the recency bias over training split into its factors, bias = mu_q_a · alpha_k.

Source: view ``bias_decomposition``: per checkpoint the mean Q mean on axis a (``mu_q_a``), the mean
K drift slope (``alpha_k``, ×10³) and the mean bias (×10³), a panel each. Panel headers give the change of the last checkpoint against the baseline
(the series' last checkpoint before long-context training, see the view), which is where the seed
reads its −91% bias, −93% α_K and +43% μ_Q^a.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import rows, values
from qkdb.charts.figures.series import Series
from qkdb.charts.style import ALPHA_K_E3, BIAS_DEF, MU_Q_A, fmt_num

FACTORS = (
    ("mean_mu_q_a", "pct_mu_q_a_vs_baseline", MU_Q_A, 1.0),
    ("mean_alpha_k", "pct_alpha_k_vs_baseline", ALPHA_K_E3, 1e3),
    ("mean_bias_strength", "pct_bias_vs_baseline", "bias strength ×10³ = product", 1e3),
)
COLORS = ("#2166ac", "#b2182b", "#542788")

_SQL = "with t as materialized (select * from bias_decomposition where series = $s) " + " union all ".join(
    f"select model, '{label}' as factor, {i} as factor_order, {col} * {scale} as value, {pct} as pct, "
    f"baseline_model, long_context, n_heads from t"
    for i, (col, pct, label, scale) in enumerate(FACTORS)
) + " order by factor_order, model"


def _signed_pct(x: float) -> str:
    return f"{x:+.0f}%".replace("-", "−")


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.FacetChart:
    """Three panels (μ_Q^a, α_K ×10³, bias ×10³) across the checkpoints of a series, with phase shading."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"s": s.name}))
    last = s.models[-1]
    headers = {}
    for _, _, label, _ in FACTORS:
        end = next((d for d in data if d["model"] == last and d["factor"] == label), None)
        change = ""
        if end and end["pct"] is not None and end["long_context"] and end["baseline_model"] != last:
            change = f"|{_signed_pct(end['pct'])} vs {s.by_model[end['baseline_model']]['checkpoint']}"
        headers[label] = label + change
    for d in data:
        d["panel"] = headers[d["factor"]]
    order = [headers[f[2]] for f in FACTORS]
    base = alt.Chart()
    x = s.x(title=None)
    line = base.mark_line(point=alt.OverlayMarkDef(size=40), strokeWidth=2.5).encode(
        x=x, y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=True)),
        color=alt.Color("factor:N", scale=alt.Scale(domain=[f[2] for f in FACTORS], range=list(COLORS)), legend=None),
        tooltip=[alt.Tooltip("checkpoint:N"), alt.Tooltip("model:N"), alt.Tooltip("factor:N"), alt.Tooltip("value:Q", format=".4g"),
                 alt.Tooltip("pct:Q", title="% vs baseline", format="+.1f")],
    )
    layer = alt.layer(s.shading(base), line, data=values(data)).properties(
        width=max(280, 30 * len(s.order)), height=180
    )
    built = layer.facet(
        # "label|change" headers on two lines: on one they were cut off at the panel's width.
        facet=alt.Facet("panel:N", sort=order, title=None,
                        header=alt.Header(labelExpr="split(datum.label, '|')", labelLimit=0)), columns=3,
    ).resolve_scale(y="independent").properties(
        title=alt.TitleParams(
            "Bias decomposition over training",
            subtitle=[f"Planar rotation (seed 002 figure 10), {s.subtitle()}; means over heads; {BIAS_DEF}."],
        )
    )
    ends = {(d["model"], d["factor"]): d for d in data}
    moves = []
    for _, _, label, _ in FACTORS:
        a, b = ends.get((s.models[0], label)), ends.get((last, label))
        if a and b:
            change = headers[label][len(label):].lstrip("|")
            moves.append(f"{label.split(' (')[0].split(' =')[0]} {fmt_num(a['value'])} → {fmt_num(b['value'])}"
                         + (f" ({change})" if change else ""))
    return attach(
        built,
        f"{s.name}, first checkpoint to last: " + "; ".join(moves) + ".",
        "The seed: in long-context training bias strength −91% and the K slope −93%, while the Q mean on a grows +43%.",
    )

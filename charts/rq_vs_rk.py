"""PCA figure 02: PC0 r_q against r_k for every head, coloured by family, with the taxonomy lines.

Source: view ``taxonomy`` (per head) and ``params`` (the thresholds in force, 0.7 / 0.3 by default).
r_k keeps its canonical sign (positive: K's position gradient runs with Q's), so the |r_k|
thresholds appear as lines at ±high and ±low. The subtitle gives the category fractions.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import MAX_HEAD_ROWS, families_of, resolve_models, rows, values
from qkdb.charts.rules import hlines, taxonomy_thresholds, vlines
from qkdb.charts.style import CATEGORIES, PANEL, family_scale, fmt_pct

# Sampling happens after the fractions are counted, so they describe every selected head.
_SQL = """
with t as materialized (
    select model, family, layer, head, r_q, r_k, category
    from taxonomy
    where list_contains($models, model) and r_q is not null and r_k is not null
)
select model, family, layer, head, r_q, r_k, category
from t
qualify row_number() over (order by hash(model, layer, head)) <= $limit
order by model, layer, head
"""

_FRACTIONS = """
select category, count(*) / sum(count(*)) over () as fraction, sum(count(*)) over () as total
from taxonomy
where list_contains($models, model) and category is not null
group by category
"""


def fraction_text(con: duckdb.DuckDBPyConnection, models: list[str]) -> tuple[str, int]:
    """The category fractions of the models' heads as one line, and how many heads have a category."""
    got = rows(con, _FRACTIONS, {"models": models})
    frac = {r["category"]: r["fraction"] for r in got}
    total = int(got[0]["total"]) if got else 0
    return " · ".join(f"{c} {fmt_pct(frac.get(c, 0.0), 1)}" for c in CATEGORIES), total


def scatter(data: list[dict], high: float, low: float, color: alt.Color, width: int = 340, height: int = 300):
    """The r_q/r_k scatter with taxonomy lines, as a layer (facet-ready: rules come from the data)."""
    base = alt.Chart()
    x = alt.X("r_q:Q", title="PC0 r_q", scale=alt.Scale(domain=[-0.1, 1.0]),
              axis=alt.Axis(values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]))
    y = alt.Y("r_k:Q", title="PC0 r_k", scale=alt.Scale(domain=[-1.0, 1.0]),
              axis=alt.Axis(values=[-1.0, -0.7, -0.3, 0, 0.3, 0.7, 1.0]))
    points = base.mark_circle(size=22, opacity=0.65).encode(
        x=x, y=y, color=color,
        tooltip=["model:N", "layer:Q", "head:Q", alt.Tooltip("r_q:Q", format=".3f"),
                 alt.Tooltip("r_k:Q", format=".3f"), "category:N"],
    )
    return alt.layer(
        vlines(base, [low, high]), hlines(base, [-high, -low, low, high]), points, data=values(data) if data is not None else alt.Undefined
    ).properties(width=width, height=height)


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Per-head PC0 r_q vs r_k, coloured by family, with the taxonomy thresholds."""
    chosen = resolve_models(con, models)
    high, low = taxonomy_thresholds(con)
    data = rows(con, _SQL, {"models": chosen, "limit": MAX_HEAD_ROWS})
    fractions, total = fraction_text(con, chosen)
    shown = f"{len(data)} heads" if len(data) == total else f"a sample of {len(data)} of {total} heads"
    color = alt.Color("family:N", scale=family_scale(families_of(con, chosen)), title="family")
    title = alt.TitleParams(
        "PC0 r_q vs r_k per head",
        subtitle=[
            f"Combined Q/K PCA (seed 003 figure 02): {shown} of {len(chosen)} model(s); "
            f"dashed: taxonomy thresholds {low:g} / {high:g} on r_q and |r_k|.",
            fractions,
        ],
    )
    return scatter(data, high, low, color, width=PANEL + 140, height=PANEL + 140).properties(title=title)

"""PCA figure 02: PC0 r_q against r_k for every head, coloured by family, with the taxonomy lines.

Source: view ``taxonomy`` (per head) and ``params`` (the thresholds in force, 0.7 / 0.3 by default).
r_k keeps its canonical sign (positive: K's position gradient runs with Q's), so the |r_k|
thresholds appear as lines at ±high and ±low. The caption gives the category fractions. With
``interactive=True`` (the report) a click on a head shows its points (:mod:`qkdb.charts.explorer`).
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach, count
from qkdb.charts.data import MAX_HEAD_ROWS, families_of, resolve_models, rows, values
from qkdb.charts.explorer import Explorer, explorer
from qkdb.charts.figures.rules import hlines, taxonomy_thresholds, vlines
from qkdb.charts.style import CATEGORIES, PANEL, family_scale, fmt_num, fmt_pct

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

_BY_FAMILY = """
select family, count(*) as n, avg((category = 'position-dominated')::int) as pos_dom,
       median(r_q) as median_r_q, median(r_k) as median_r_k
from taxonomy
where list_contains($models, model) and category is not null
group by family
order by pos_dom desc, family
"""


def fraction_text(con: duckdb.DuckDBPyConnection, models: list[str]) -> tuple[str, int]:
    """The category fractions of the models' heads as one line, and how many heads have a category."""
    got = rows(con, _FRACTIONS, {"models": models})
    frac = {r["category"]: r["fraction"] for r in got}
    total = int(got[0]["total"]) if got else 0
    return " · ".join(f"{c} {fmt_pct(frac.get(c, 0.0), 1)}" for c in CATEGORIES), total


def axes() -> tuple[alt.X, alt.Y]:
    x = alt.X("r_q:Q", title="PC0 r_q", scale=alt.Scale(domain=[-0.1, 1.0]),
              axis=alt.Axis(values=[0, 0.2, 0.4, 0.6, 0.8, 1.0]))
    y = alt.Y("r_k:Q", title="PC0 r_k", scale=alt.Scale(domain=[-1.0, 1.0]),
              axis=alt.Axis(values=[-1.0, -0.7, -0.3, 0, 0.3, 0.7, 1.0]))
    return x, y


TOOLTIP = [alt.Tooltip("model:N"), alt.Tooltip("layer:Q"), alt.Tooltip("head:Q"), alt.Tooltip("r_q:Q", format=".3f"), alt.Tooltip("r_k:Q", format=".3f"), alt.Tooltip("category:N")]


def scatter(data: list[dict], high: float, low: float, color: alt.Color, width: int = 340, height: int = 300):
    """The r_q/r_k scatter with taxonomy lines, as a layer (facet-ready: rules come from the data)."""
    base = alt.Chart()
    x, y = axes()
    points = base.mark_circle(size=22, opacity=0.65).encode(x=x, y=y, color=color, tooltip=TOOLTIP)
    return alt.layer(
        vlines(base, [low, high]), hlines(base, [-high, -low, low, high]), points, data=values(data) if data is not None else alt.Undefined
    ).properties(width=width, height=height)


def _interactive(ex: Explorer, data, fams, color, high, low, title) -> alt.HConcatChart:
    ex.mark(data)
    base = alt.Chart().transform_filter(Explorer.filter_expr())
    x, y = axes()
    points = base.mark_circle(size=22, opacity=0.5).encode(x=x, y=y, color=color, tooltip=TOOLTIP)
    view = "rq_vs_rk_pick_0"  # Altair renames a unit in a concatenated layer to "<base>_<position>"
    # Every property in the constructors: each later .properties() deep-copies the whole figure.
    main = alt.layer(
        vlines(alt.Chart(), [low, high]), hlines(alt.Chart(), [-high, -low, low, high]), points,
        ex.pickable(base, x, y, color, view, TOOLTIP), Explorer.highlight(alt.Chart(), x, y),
        width=PANEL + 140, height=PANEL + 140,
    )
    header = "'PC0 r_q ' + format(datum.r_q, '.2f') + ' · r_k ' + format(datum.r_k, '.2f') + ' · ' + datum.category"
    chart = alt.hconcat(
        main, ex.detail(header), spacing=24, data=values(data),
        title=alt.TitleParams(title.text, subtitle=[*title.subtitle, ex.note(len(data))]),
    )
    # Set, not add_params: on a compound chart Altair pushes parameters into every subchart and
    # lifts them back, deep-copying the whole figure (two thirds of its build time).
    chart.params = [*(p.param for p in ex.filters(fams)), Explorer.selection([view], Explorer.initial(data))]
    return chart


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, interactive: bool = False, **opts):
    """Per-head PC0 r_q vs r_k, coloured by family, with the taxonomy thresholds."""
    chosen = resolve_models(con, models)
    high, low = taxonomy_thresholds(con)
    data = rows(con, _SQL, {"models": chosen, "limit": MAX_HEAD_ROWS})
    fractions, total = fraction_text(con, chosen)
    fams = families_of(con, chosen)
    color = alt.Color("family:N", scale=family_scale(fams), title="family", legend=alt.Legend(symbolOpacity=1))
    title = alt.TitleParams(
        "PC0 r_q vs r_k per head",
        subtitle=[  # what is drawn; the heads and the category shares are the caption's
            f"Combined Q/K PCA (seed 003 figure 02): one point per head, coloured by family; "
            f"dashed: taxonomy thresholds {low:g} / {high:g} on r_q and |r_k|.",
        ] + ([] if len(data) == total else [f"{len(data):,} of {total:,} heads drawn, a deterministic sample."]),
    )
    fam = rows(con, _BY_FAMILY, {"models": chosen})
    caption = [
        f"{count(total, 'head')} of {count(len(chosen), 'model')}"
        + ("" if len(data) == total else f" ({len(data):,} drawn, a deterministic sample; shares count them all)")
        + f": {fractions.replace(' · ', ', ')}.",
    ]
    if len(fam) > 1:
        top, bottom = fam[0], fam[-1]
        caption.append(
            f"Position-dominated heads are commonest in {top['family']} ({fmt_pct(top['pos_dom'])}) and rarest in "
            f"{bottom['family']} ({fmt_pct(bottom['pos_dom'])}); family medians run from r_q "
            f"{fmt_num(min(f['median_r_q'] for f in fam))} to {fmt_num(max(f['median_r_q'] for f in fam))} and r_k "
            f"{fmt_num(min(f['median_r_k'] for f in fam))} to {fmt_num(max(f['median_r_k'] for f in fam))}."
        )
    ex = explorer(con, chosen) if interactive else None
    if ex is not None and ex.keys:  # no stored points (ingest --points 0): nothing to link
        return attach(_interactive(ex, data, fams, color, high, low, title), *caption)
    built = scatter(data, high, low, color, width=PANEL + 140, height=PANEL + 140).properties(title=title)
    return attach(built, *caption)

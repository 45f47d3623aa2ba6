"""Rotation figure 07: bias strength against separation strength, pooled and per family (Simpson's paradox).

Source: view ``head_metrics`` (per head), read once. Every number is computed in SQL over every
selected head, before any sampling: Pearson r pooled and within each family (as the
``bias_separation`` view's overall and family rows), the family means, the least-squares lines
(``regr_slope``, ``regr_intercept``, drawn over the family's whole range of bias) and the axes'
extent. The points are every head up to :data:`~qkdb.charts.data.MAX_HEAD_ROWS`, past that a
deterministic sample of that many (``hash(model, layer, head)`` order), which the subtitle says.
The first panel pools every head, coloured by family, with each family's line, the pooled line
(dashed) and the family means (diamonds): the between-family offset that makes the pooled trend
differ from the within-family ones is visible there. Then a panel per family. All panels share
both axes, so a point sits at the same place in each. With ``interactive=True`` (the report) a
click on a head shows its points (:mod:`qkdb.charts.explorer`).
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach, count
from qkdb.charts.data import MAX_HEAD_ROWS, families_of, resolve_models, rows, values
from qkdb.charts.explorer import Explorer, explorer
from qkdb.charts.style import BIAS_E3, family_scale, fmt_num, fmt_r

# corr() is NaN when a side is constant; NULLIF-style CASE keeps it NULL like the views do.
_R = "case when count(*) > 1 and var_pop(x) > 0 and var_pop(y) > 0 then corr(x, y) end"

_HEADS = """
    select model, family, layer, head, bias_strength * 1e3 as x, separation_strength as y
    from head_metrics
    where list_contains($models, model) and bias_strength is not null and separation_strength is not null
"""

# One pass over the heads: the drawn heads (part 0), then the statistics of every family and of
# all heads (part 1; family NULL), from all of them.
_SQL = f"""
with h as materialized ({_HEADS}), drawn as (
    select * from h qualify row_number() over (order by hash(model, layer, head)) <= $limit
), summary as (
    select family, count(*) as n, {_R} as r, avg(x) as mean_x, avg(y) as mean_y,
           regr_slope(y, x) as slope, regr_intercept(y, x) as intercept,
           min(x) as min_x, max(x) as max_x, min(y) as min_y, max(y) as max_y
    from h group by grouping sets ((family), ())
)
select 0 as part, model, family, layer, head, x, y, null::bigint as n, null::double as r, null::double as mean_x,
       null::double as mean_y, null::double as slope, null::double as intercept, null::double as min_x,
       null::double as max_x, null::double as min_y, null::double as max_y
from drawn
union all
select 1, null, family, null, null, null, null, n, r, mean_x, mean_y, slope, intercept, min_x, max_x, min_y, max_y
from summary
order by part, model, layer, head, family nulls first
"""

COLUMNS = 3
WIDTH, HEIGHT = 250, 200
POOLED = "all families, pooled"


def panel_label(family: str, r, n) -> str:
    return f"{family}: r = {fmt_r(r)} (n = {n:,})"


def _domain(lo, hi) -> list[float]:
    lo, hi = (lo, hi) if lo is not None and hi is not None else (0.0, 1.0)
    pad = 0.03 * (hi - lo or 1.0)
    return [lo - pad, hi + pad]


def _lines(summary: dict) -> list[dict]:
    """Each least-squares line (a family's, and the pooled one with family None) as its two ends."""
    out = []
    for fam, s in summary.items():
        if s["slope"] is None or s["intercept"] is None:
            continue  # (one head, or no spread in bias: no line)
        for x in (s["min_x"], s["max_x"]):
            out.append({"family": fam, "line": "pooled" if fam is None else "family", "x": x,
                        "y": s["intercept"] + s["slope"] * x})
    return out


def _tooltip():
    return [alt.Tooltip("model:N"), alt.Tooltip("family:N"), alt.Tooltip("layer:Q"), alt.Tooltip("head:Q"), alt.Tooltip("x:Q", title="bias ×10³", format=".3g"),
            alt.Tooltip("y:Q", title="separation", format=".3f")]


def _panels(data, fams, summary, ex: Explorer | None, n_total: int) -> tuple[list[alt.LayerChart], list[str]]:
    """The pooled panel, then one per family; with an explorer, the names of their clickable layers."""
    pooled = summary.get(None, {})
    x = alt.X("x:Q", title=BIAS_E3, scale=alt.Scale(domain=_domain(pooled.get("min_x"), pooled.get("max_x")),
                                                    nice=False, zero=False))
    y = alt.Y("y:Q", title="separation strength",
              scale=alt.Scale(domain=_domain(pooled.get("min_y"), pooled.get("max_y")), nice=False, zero=False))
    color = alt.Color("family:N", scale=family_scale(fams), title="family", legend=alt.Legend(symbolOpacity=1))
    base = alt.Chart()
    if ex is not None:
        base = base.transform_filter(Explorer.filter_expr())
    lines = alt.Chart(values(_lines(summary)))
    if ex is not None:  # (the lines are the families': the family dropdown applies, the model one not)
        lines = lines.transform_filter(Explorer.family_expr())
    panels, views = [], []

    def clickable(chart_base, i):
        if ex is None:
            return []
        name = f"bvs_pick_{i}"  # Altair renames a unit in a concatenated layer to "<base>_<position>"
        views.append(name)
        return [ex.pickable(chart_base, x, y, color, name, _tooltip()), Explorer.highlight(chart_base, x, y)]

    means = (
        alt.Chart(values([{"family": f, "x": s["mean_x"], "y": s["mean_y"]} for f, s in summary.items() if f is not None]))
        .mark_point(shape="diamond", filled=True, size=150, stroke="#111111", strokeWidth=1.2, opacity=1)
        .encode(x=x, y=y, color=color, tooltip=[alt.Tooltip("family:N"), alt.Tooltip("x:Q", title="mean bias ×10³", format=".3g"),
                                               alt.Tooltip("y:Q", title="mean separation", format=".3f")])
    )
    layers = [
        base.mark_circle(size=12, opacity=0.35).encode(x=x, y=y, color=color, tooltip=_tooltip()),
        *clickable(base, 0),
        lines.transform_filter("datum.line == 'family'").mark_line(strokeWidth=2).encode(x=x, y=y, color=color),
        lines.transform_filter("datum.line == 'pooled'").mark_line(color="#111111", strokeWidth=2.5, strokeDash=[6, 3])
        .encode(x=x, y=y),
        means,
    ]
    panels.append(alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT,
        title=alt.TitleParams(f"{POOLED}: r = {fmt_r(pooled.get('r'))} (n = {n_total:,})", fontSize=12, anchor="start"),
    ))
    for fam in fams:
        s = summary.get(fam)
        if s is None:
            continue
        fb = base.transform_filter(alt.FieldEqualPredicate(field="family", equal=fam))
        panels.append(alt.layer(
            fb.mark_circle(size=16, opacity=0.55).encode(x=x, y=y, color=color, tooltip=_tooltip()),
            *clickable(fb, len(panels)),
            lines.transform_filter(alt.FieldEqualPredicate(field="family", equal=fam))
            .mark_line(color="#111111", strokeWidth=2).encode(x=x, y=y),
        ).properties(
            width=WIDTH, height=HEIGHT, title=alt.TitleParams(panel_label(fam, s["r"], s["n"]), fontSize=12, anchor="start"),
        ))
    return panels, views


def _caption(summary: dict, n_models: int) -> list[str]:
    pooled = summary.get(None, {})
    fams = {f: s for f, s in summary.items() if f is not None}
    out = [f"Pooled over {count(pooled.get('n', 0), 'head')} of {count(n_models, 'model')}, r = {fmt_r(pooled.get('r'))}."]
    with_r = {f: s for f, s in fams.items() if s["r"] is not None}
    if len(with_r) > 1 and pooled.get("r") is not None:
        lo = min(with_r, key=lambda f: with_r[f]["r"])
        hi = max(with_r, key=lambda f: with_r[f]["r"])
        opposite = [f for f, s in with_r.items() if s["r"] * pooled["r"] < 0]
        out.append(
            f"Within the {len(with_r)} families r runs from {fmt_r(with_r[lo]['r'])} ({lo}) to {fmt_r(with_r[hi]['r'])} ({hi}); "
            + (f"{', '.join(opposite)} {'has' if len(opposite) == 1 else 'have'} the opposite sign to the pooled r "
               "(whether beyond chance: finding 002.F5.simpson). " if opposite else "none has the opposite sign to the pooled r. ")
            + f"The family means (diamonds) span {fmt_num(max(s['mean_x'] for s in fams.values()) - min(s['mean_x'] for s in fams.values()), 1)} "
            f"in bias ×10³ and {fmt_num(max(s['mean_y'] for s in fams.values()) - min(s['mean_y'] for s in fams.values()))} in separation: "
            "that offset between families, not the trend within them, is what a pooled correlation also measures."
        )
    return out


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, interactive: bool = False, **opts):
    """Per-head scatter of bias ×10³ vs separation: a pooled panel, then one per family titled with its r."""
    chosen = resolve_models(con, models)
    got = rows(con, _SQL, {"models": chosen, "limit": MAX_HEAD_ROWS})
    summary = {r["family"]: r for r in got if r["part"] == 1}
    heads_cols = ("model", "family", "layer", "head", "x", "y")
    data = [{k: r[k] for k in heads_cols} for r in got if r["part"] == 0]
    fams = families_of(con, chosen)
    n_total = summary.get(None, {}).get("n", 0)
    ex = explorer(con, chosen) if interactive else None
    if ex is not None and not ex.keys:  # no stored points (ingest --points 0): nothing to link
        ex = None
    if ex is not None:
        ex.mark(data)
    panels, views = _panels(data, fams, summary, ex, n_total)
    shown = ("every head" if len(data) == n_total else
             f"{len(data):,} of {n_total:,} heads drawn, a deterministic sample (r, lines and means over all)")
    title = alt.TitleParams(
        f"Bias vs separation strength: pooled r = {fmt_r(summary.get(None, {}).get('r'))}; within each family in the panel titles",
        subtitle=[
            f"Planar rotation (seed 002 figure 07, Simpson's paradox): one point per head, {shown}; shared axes.",
            "First panel: all heads by family, each family's least-squares line, the pooled line (dashed) and the "
            "family means (diamonds); then one panel per family with its line.",
            *([ex.note(len(data))] if ex is not None else []),
        ],
    )
    # Every property in the constructors: each later .properties() deep-copies the whole figure.
    if ex is None:
        built = alt.concat(*panels, columns=COLUMNS, spacing=16, align="all", data=values(data), title=title)
    else:
        grid = alt.concat(*panels, columns=COLUMNS, spacing=16, align="all")
        built = alt.hconcat(grid, ex.detail(
            "'bias ×10³ ' + format(datum.x, '.3g') + ' · separation ' + format(datum.y, '.3f')"
        ), spacing=24, data=values(data), title=title)
        # Set, not add_params: on a compound chart Altair pushes parameters into every subchart and
        # lifts them back, deep-copying the whole figure (two thirds of its build time).
        built.params = [*(p.param for p in ex.filters(fams)), Explorer.selection(views, Explorer.initial(data))]
    return attach(built, *_caption(summary, len(chosen)))

"""Attention plasticity figures (SPEC §7; docs/plasticity.md): the profile, the 2-D map, the taxonomy, a series.

Sources: tables ``plasticity``, ``plasticity_profile``, ``plasticity_2d`` and the view ``taxonomy``.
AP is a pair plasticity averaged over key pairs: 1 when the query decides which of two earlier keys
wins, 0 when position decides. The empirical estimator is the primary one; the profile lets the
reader switch to the Gaussian or the thesis's closed form.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, resolve_models, rows, values
from qkdb.charts.figures.series import Series
from qkdb.charts.style import CATEGORIES, CATEGORY_COLORS, fmt_num
from qkdb.errors import ChartError

AP = "attention plasticity AP (1: the query decides, 0: position does)"
ESTIMATORS = ("empirical", "gaussian", "thesis")
# Heads drawn as grey profiles over all models: 3 estimators × 10 deciles each, under Altair's 5,000 rows.
PROFILE_HEADS = 150


def _need_plasticity(con: duckdb.DuckDBPyConnection, models: list[str]) -> None:
    n_rows, n_values = rows(con, "select count(*) as n, count(ap_overall) as v from plasticity where list_contains($m, model)",
                            {"m": models})[0].values()
    if not n_rows:
        raise ChartError(
            "no plasticity rows for these models: they were ingested before qkdb computed plasticity, or "
            "without example ids; re-ingest them (qkdb ingest --force) to compute it", kind="not_found")
    if not n_values:
        raise ChartError(
            "no head of these models has a plasticity value: every position bin has fewer than 32 queries or no "
            "earlier key pair (plasticity_profile.n_q; capture more vectors per head)", kind="not_found")


_PROFILE_SQL = """
with p as materialized (
    select pp.model, pp.layer, pp.head, pp.estimator, pp.bin, pp.tau, pp.ap, pl.context_length as l
    from plasticity_profile pp
    join plasticity pl using (model, layer, head, estimator)
    where list_contains($models, pp.model) and pp.bin_kind = 'decile'
),
heads as (
    select model, layer, head,
           row_number() over (partition by model order by hash(model, layer, head)) as k
    from (select distinct model, layer, head from p)
),
mean as (
    select model, estimator, bin, avg(tau / l) as x, avg(ap) as ap, count(ap) as n_heads
    from p group by all
)
select p.model, p.estimator, p.bin, p.tau / p.l as x, p.ap, printf('l%02d.h%02d', p.layer, p.head) as head,
       'head' as kind, null::bigint as n_heads
from p join heads h using (model, layer, head)
where h.k <= $per_model and p.ap is not null
union all
select model, estimator, bin, x, ap, 'mean' as head, 'mean' as kind, n_heads from mean where ap is not null
order by model, kind, head, estimator, bin
"""


def build_profile(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.Chart:
    """Per model: every head's decile AP profile (grey) and the mean over heads (bold); the estimator chosen in a menu."""
    chosen = resolve_models(con, models)
    drawn = drawn_models(con, chosen, models)
    _need_plasticity(con, drawn.models)
    per_model = max(3, PROFILE_HEADS // max(len(drawn.models), 1))
    data = rows(con, _PROFILE_SQL, {"models": drawn.models, "per_model": per_model})
    pick = alt.param(name="estimator", value="empirical",
                     bind=alt.binding_select(options=list(ESTIMATORS), name="estimator "))
    base = alt.Chart().transform_filter("datum.estimator == estimator")
    # A short title and five ticks: side by side, facets' axis titles must not run into each other.
    x = alt.X("x:Q", title="query position ÷ context length L", scale=alt.Scale(domain=[0, 1]),
              axis=alt.Axis(tickCount=5, format=".1f"))
    y = alt.Y("ap:Q", title="AP", scale=alt.Scale(domain=[0, 1]))
    grey = base.transform_filter(alt.datum.kind == "head").mark_line(color="#bbbbbb", strokeWidth=0.8, opacity=0.6).encode(
        x=x, y=y, detail="head:N", tooltip=["head:N", alt.Tooltip("ap:Q", format=".3f")])
    bold = base.transform_filter(alt.datum.kind == "mean").mark_line(
        color="#222222", strokeWidth=2.5, point=alt.OverlayMarkDef(size=30, color="#222222")).encode(
        x=x, y=y, tooltip=[alt.Tooltip("ap:Q", title="mean AP", format=".3f"), alt.Tooltip("n_heads:Q", title="heads")])
    built = alt.layer(grey, bold, data=values(data)).properties(width=300, height=180).facet(
        facet=alt.Facet("model:N", sort=drawn.models, title=None), columns=3,
    # Each facet its own x axis: the last row's empty cells then draw none (a shared axis is drawn
    # under every column, models or not).
    ).resolve_axis(x="independent").properties(title=alt.TitleParams(
        "Attention plasticity along the context",
        subtitle=[f"Per model, AP by decile of query position: grey, up to {per_model} heads each; bold, the mean over every head.",
                  "AP is 1 where the query decides which of two keys wins, 0 where position does.",
                  "The menu below picks the estimator (empirical, gaussian, thesis)."] + ([drawn.note] if drawn.note else [])))
    # The menu is a top-level param: FacetChart.add_params would hand it to the first layer, whose
    # siblings' filters could not read it (Vega: "Unrecognized signal name").
    built.params = [pick.param]
    means = {(d["model"], d["bin"]): d["ap"] for d in data if d["kind"] == "mean" and d["estimator"] == "empirical"}
    parts = []
    for m in drawn.models:
        bins = sorted(b for (mm, b) in means if mm == m)
        if bins:
            parts.append(f"{m} {fmt_num(means[(m, bins[0])], 2)} → {fmt_num(means[(m, bins[-1])], 2)}")
    return attach(built, "Mean AP (empirical) from the first decile with keys to the last: " + "; ".join(parts) + "."
                  if parts else None,
                  "Seed 003 predicts plasticity falls where position dominates; docs/plasticity.md defines AP.")


_HEATMAP_SQL = """
select model, key_distance_bin, query_distance_bin, sum(ap * n_pairs) / sum(n_pairs) as ap, sum(n_pairs) as n_pairs,
       count(*) as n_heads
from plasticity_2d
where list_contains($models, model) and n_pairs > 0
group by all
order by model, key_distance_bin, query_distance_bin
"""


def build_heatmap(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.Chart:
    """AP (empirical) over the distance between the two keys × the distance from the query to them (log2 bins)."""
    chosen = resolve_models(con, models)
    drawn = drawn_models(con, chosen, models)
    _need_plasticity(con, drawn.models)
    data = rows(con, _HEATMAP_SQL, {"models": drawn.models})
    for d in data:
        d["key_distance"] = f"{2 ** d['key_distance_bin']:,}"
        d["query_distance"] = f"{2 ** d['query_distance_bin']:,}"
    k_order = [f"{2 ** b:,}" for b in sorted({d["key_distance_bin"] for d in data})]
    q_order = [f"{2 ** b:,}" for b in sorted({d["query_distance_bin"] for d in data}, reverse=True)]
    rect = alt.Chart().mark_rect().encode(
        x=alt.X("key_distance:O", sort=k_order, title="keys apart (tokens, from)"),
        y=alt.Y("query_distance:O", sort=q_order, title="query after the keys (tokens, from)"),
        color=alt.Color("ap:Q", title="AP", scale=alt.Scale(scheme="viridis", domain=[0, 1])),
        tooltip=[alt.Tooltip("key_distance:N", title="keys apart from"), alt.Tooltip("query_distance:N", title="query after from"),
                 alt.Tooltip("ap:Q", format=".3f"), alt.Tooltip("n_pairs:Q", title="pairs"), alt.Tooltip("n_heads:Q", title="heads")],
    )
    built = alt.layer(rect, data=values(data)).properties(width=260, height=200).facet(
        facet=alt.Facet("model:N", sort=drawn.models, title=None), columns=3,
    # Each facet its own x axis: the last row's empty cells then draw none (a shared axis is drawn
    # under every column, models or not).
    ).resolve_axis(x="independent").properties(title=alt.TitleParams(
        "Attention plasticity by key distance and query distance",
        subtitle=["Per model: mean pair plasticity (empirical) of the key pairs in each cell (log2 bins of the keys'",
                  "distance apart and of the query's distance after their midpoint), over every head and decile bin.",
                  AP + "."] + ([drawn.note] if drawn.note else [])))
    return attach(built, f"{sum(d['n_pairs'] for d in data):,} key pairs of {len(drawn.models)} model(s).",
                  "The thesis's heatmaps: plasticity where the two keys are close in position and far from the query.")


_TAXONOMY_SQL = """
with h as (
    select t.model, m.family, t.category, p.ap_overall as ap, printf('%s l%02d.h%02d', t.model, t.layer, t.head) as head,
           row_number() over (order by hash(t.model, t.layer, t.head)) as k
    from taxonomy t
    join models m using (model)
    join plasticity p on p.model = t.model and p.layer = t.layer and p.head = t.head and p.estimator = 'empirical'
    where list_contains($models, t.model) and p.ap_overall is not null and t.category is not null
)
select model, family, category, ap, head from h where k <= $limit order by family, category, head
"""


def build_by_taxonomy(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.Chart:
    """AP (empirical, over the context) per head by its taxonomy category, a panel per family: seed 003's prediction."""
    chosen = resolve_models(con, models)
    _need_plasticity(con, chosen)
    data = rows(con, _TAXONOMY_SQL, {"models": chosen, "limit": 4000})
    present = [c for c in CATEGORIES if any(d["category"] == c for d in data)]
    colour = alt.Color("category:N", scale=alt.Scale(domain=list(CATEGORIES), range=[CATEGORY_COLORS[c] for c in CATEGORIES]),
                       legend=None)
    x = alt.X("category:N", sort=present, title=None, axis=alt.Axis(labelAngle=-30))
    box = alt.Chart().mark_boxplot(extent="min-max", size=26, opacity=0.5).encode(
        x=x, y=alt.Y("ap:Q", title="AP over the context (empirical)", scale=alt.Scale(domain=[0, 1])), color=colour)
    dots = alt.Chart().mark_tick(thickness=1, size=14, opacity=0.5).encode(
        x=x, y="ap:Q", color=colour, tooltip=["head:N", "category:N", alt.Tooltip("ap:Q", format=".3f")])
    fams = sorted({d["family"] for d in data if d["family"] is not None})
    built = alt.layer(box, dots, data=values(data)).properties(width=max(180, 60 * len(present)), height=220).facet(
        facet=alt.Facet("family:N", sort=fams, title=None), columns=3,
    ).properties(title=alt.TitleParams(
        "Does the head taxonomy predict attention plasticity?",
        subtitle=["Seed 003: position-dominated heads low, content-focused high, Q-positional in between.",
                  "AP over the context per head (empirical, ticks; boxes: quartiles), by taxonomy category",
                  "(PC0 r_q and |r_k|, thresholds 0.7 / 0.3). AP is 1 where the query decides, 0 where position does."]))
    means = {}
    for d in data:
        means.setdefault(d["category"], []).append(d["ap"])
    line = "; ".join(f"{c} {fmt_num(sum(v) / len(v), 2)} (n = {len(v)})" for c in present if (v := means.get(c)))
    return attach(built, f"Mean AP by category over {len(data):,} heads: {line}." if line else None,
                  "The findings on the categories' order test it with intervals.")


_SERIES_SQL = """
select p.model, avg(p.ap_first20) as ap_first20, avg(p.ap_last20) as ap_last20, avg(p.ap_drop) as ap_drop,
       avg(r.bias_strength) * 1e3 as bias, count(*) as n_heads
from plasticity p
join rotation r using (model, layer, head)
where p.estimator = 'empirical' and list_contains($models, p.model)
group by p.model
"""

SERIES_METRICS = (("ap_first20", "AP, first fifth of the context"), ("ap_last20", "AP, last fifth"),
                  ("ap_drop", "AP drop (first − last fifth)"), ("bias", "bias strength ×10³"))


def build_series(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.Chart:
    """Mean AP in the first and last fifth of the context, their drop, and bias strength along a checkpoint series."""
    s = Series(con, series)
    _need_plasticity(con, s.models)
    got = {d["model"]: d for d in rows(con, _SERIES_SQL, {"models": s.models})}
    data = s.label([{"model": m, "metric": label, "order": i, "value": got[m][col], "n_heads": got[m]["n_heads"]}
                    for m in s.models if m in got for i, (col, label) in enumerate(SERIES_METRICS)])
    base = alt.Chart()
    line = base.mark_line(point=alt.OverlayMarkDef(size=40, color="#222222"), color="#222222", strokeWidth=2).encode(
        x=s.x(title=None), y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
        tooltip=["checkpoint:N", "model:N", "metric:N", alt.Tooltip("value:Q", format=".4g"), alt.Tooltip("n_heads:Q", title="heads")])
    built = alt.layer(s.shading(base), line, data=values(data)).properties(
        width=max(260, 40 * len(s.order)), height=160).facet(
        facet=alt.Facet("metric:N", sort=[m[1] for m in SERIES_METRICS], title=None), columns=2,
    ).resolve_scale(y="independent").properties(title=alt.TitleParams(
        "Plasticity along training",
        subtitle=[f"Seed 003's hypothesis: long-context training raises plasticity; {s.subtitle()}; means over heads "
                  "(empirical)."]))
    first, last = s.models[0], s.models[-1]
    moves = [f"{label} {fmt_num(got[first][col], 3)} → {fmt_num(got[last][col], 3)}"
             for col, label in SERIES_METRICS if first in got and last in got]
    return attach(built, f"From {s.order[0]} to {s.order[-1]}: " + "; ".join(moves) + "." if moves else None,
                  "The findings on long-context training test the change with intervals.")

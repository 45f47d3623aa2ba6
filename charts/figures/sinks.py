"""Attention sinks (docs/attention.md): where they are in a model, how they compare with the field's
numbers, and when they appear in training.

Source: views ``sink_heads`` (per head: the mean attention weight on token 0 over queries below
``params.sink_context``, and whether it exceeds ``params.sink_epsilon``), ``sink_card`` (per model and
input kind: both rates beside Gu et al.'s published ones), ``sink_texts`` (per layer and text) and
``sink_series`` (per checkpoint: the share of sink heads). Both exist only for captures that stored each query's softmax
normaliser (``qkdb sniff``'s ``lse``); for any other the figures say so and what to capture.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, resolve_models, resolve_series, rows, scalar, values
from qkdb.charts.figures.series import Series
from qkdb.charts.style import fmt_num, fmt_pct
from qkdb.errors import ChartError

CELL = 16  # px per head and per layer: 32 × 32 heads make a 512 px panel
CAPTURE_HINT = ("capture each query's softmax normaliser with `qkdb sniff` (every position of short texts: "
                "docs/attention.md), then `qkdb ingest --path DIR`")

_MAP = """
select h.model, h.layer, h.head, h.mass_token0, h.is_sink, h.bias_share, h.n_queries
from sink_heads h
where list_contains($models, h.model)
order by h.model, h.layer, h.head
"""

_SERIES = """
select s.model, s.status, s.n_heads, s.sink_rate, s.mean_mass_token0, s.repeats_previous
from sink_series s where s.series = $s
order by s.series_order, s.model
"""


_CARD = """
select c.model, coalesce(c.hf_model, c.model) as checkpoint, c.input_kind, c.n_heads, c.n_texts,
    c.sink_rate_per_text, c.sink_rate_pooled, c.anchor_model, c.anchor_variant, c.anchor_rate
from sink_card c
where list_contains($models, c.model)
order by checkpoint, c.input_kind
"""

# Per layer: the per-text rate where every position of the texts was captured, else the pooled one
# (a sampled capture: the share of heads whose pooled mean exceeds epsilon).
_PROFILE = """
select h.model, h.input_kind, h.layer,
    coalesce(avg(h.sink_text_share), avg(h.is_sink::int)) as rate,
    case when count(h.sink_text_share) > 0 then 'per text (Gu et al.)' else 'pooled' end as estimator
from sink_heads h
where list_contains($models, h.model)
group by all
order by all
"""
ESTIMATORS = ("per text (Gu et al.)", "pooled")

KINDS = ("natural", "random", "repeated")


def _params(con) -> tuple[float, int]:
    got = rows(con, "select sink_epsilon, sink_context from params")[0]
    return float(got["sink_epsilon"]), int(got["sink_context"])


def build_map(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.FacetChart:
    """Mean attention on token 0 per layer × head, a panel per model; sink heads outlined."""
    chosen = resolve_models(con, models)
    have = [r["model"] for r in rows(con, "select distinct model from sink_heads where list_contains($m, model)",
                                     {"m": chosen})]
    if not have:
        raise ChartError(f"no attention mass for {', '.join(chosen)}: these captures did not record the "
                         f"softmax normaliser; {CAPTURE_HINT}", kind="not_found")
    shown = drawn_models(con, [m for m in chosen if m in have], models)
    data = rows(con, _MAP, {"models": shown.models})
    eps, context = _params(con)
    n_heads = max(d["head"] for d in data) + 1
    x = alt.X("head:O", title="query head")
    y = alt.Y("layer:O", title="layer")
    base = alt.Chart()
    cells = base.mark_rect().encode(
        x=x, y=y,
        color=alt.Color("mass_token0:Q", title="weight on token 0",
                        scale=alt.Scale(scheme="purples", domain=[0, 1], clamp=True)),
        tooltip=[alt.Tooltip("model:N"), alt.Tooltip("layer:O"), alt.Tooltip("head:O"),
                 alt.Tooltip("mass_token0:Q", title="weight on token 0", format=".3f"),
                 alt.Tooltip("is_sink:N", title="sink head"),
                 alt.Tooltip("bias_share:Q", title="bias share", format=".2f"),
                 alt.Tooltip("n_queries:Q", title="queries")],
    )
    outline = base.transform_filter("datum.is_sink").mark_rect(fill=None, stroke="#222222", strokeWidth=1.2).encode(
        x=x, y=y)
    built = alt.layer(cells, outline, data=values(data)).properties(
        width=max(120, CELL * n_heads), height=alt.Step(CELL),
    ).facet(facet=alt.Facet("model:N", sort=shown.models, title=None), columns=3).properties(title=alt.TitleParams(
        "Attention sinks: mean weight on token 0 per head",
        subtitle=[f"Queries below position {context}; each weight exp(scaled q·k₀ − lse) from the captured normaliser.",
                  f"Outlined: sink heads (mean weight > {fmt_num(eps, 2)}, Gu et al. 2025).",
                  *([shown.note] if shown.note else [])]))
    by_model = {m: [d for d in data if d["model"] == m] for m in shown.models}
    rates = ", ".join(f"{m} {fmt_pct(sum(bool(d['is_sink']) for d in v) / len(v), 1)} of {len(v)}"
                      for m, v in by_model.items() if v)
    return attach(built, f"Pooled sink rate (share of sink heads): {rates}.",
                  "The view sink_rate has it per model and input kind beside Gu et al.'s per-text rate "
                  "(sink_rate_per_text), which the finding attn.sink.rate tests with an interval.")


def build_series(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.LayerChart:
    """Sink rate and mean weight on token 0 per checkpoint of a series."""
    if series is None:
        # (the series figures' default is the first series; here, the first one with attention mass)
        series = scalar(con, "select min(series) from sink_series where status = 'measured'")
        if series is None:
            resolve_series(con, None)  # (no series at all: the series figures' own error)
            raise ChartError(f"no checkpoint of a training series has attention mass; {CAPTURE_HINT} "
                             "for each checkpoint (`qkdb sniff --revision A --revision B ...`: a series)", kind="not_found")
    s = Series(con, series)
    data = [d for d in s.label(rows(con, _SERIES, {"s": s.name})) if d["status"] == "measured"]
    if not data:
        raise ChartError(f"no checkpoint of series {s.name!r} has attention mass; {CAPTURE_HINT}", kind="not_found")
    eps, context = _params(con)
    long = [{**d, "what": what, "value": d[col]} for d in data
            for what, col in (("sink rate (per text, Gu et al.)", "sink_rate"), ("mean weight on token 0", "mean_mass_token0"))]
    base = alt.Chart(values(long))
    x = s.x()
    y = alt.Y("value:Q", title=None, axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1]))
    color = alt.Color("what:N", title=None, scale=alt.Scale(range=["#54278f", "#9e9ac8"]),
                      legend=alt.Legend(orient="top"))
    tip = [alt.Tooltip("checkpoint:N"), alt.Tooltip("model:N"), alt.Tooltip("what:N"),
           alt.Tooltip("value:Q", format=".1%"), alt.Tooltip("n_heads:Q", title="heads"),
           alt.Tooltip("repeats_previous:N", title="same as previous")]
    line = base.mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tip)
    built = s.panel(base, line, title="Attention sinks over training",
                    subtitle=f"{s.subtitle()}; sink head: mean weight on token 0 above {fmt_num(eps, 2)} "
                             f"over queries below position {context}.")
    first, last = data[0], data[-1]
    repeats = [d["checkpoint"] for d in data if d["repeats_previous"]]
    return attach(built,
                  f"Sink rate {fmt_pct(first['sink_rate'], 1)} at {first['checkpoint']} → "
                  f"{fmt_pct(last['sink_rate'], 1)} at {last['checkpoint']} ({len(data)} checkpoints measured).",
                  f"Identical to the previous checkpoint: {', '.join(repeats)}." if repeats else None)


def build_card(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.HConcatChart:
    """Sink rates by input kind per checkpoint beside Gu et al.'s, and the per-layer profile."""
    resolve_models(con, models)  # (no model at all, or one not ingested: the figures' own errors)
    have = [r["model"] for r in rows(con, "select distinct model from sink_card")]
    if not have:
        raise ChartError(f"no attention mass in this warehouse: no capture recorded the softmax normaliser; "
                         f"{CAPTURE_HINT}", kind="not_found")
    chosen = [m for m in resolve_models(con, models) if m in have] if models else have
    if not chosen:
        raise ChartError(f"no attention mass for {', '.join(resolve_models(con, models))}: these captures did not "
                         f"record the softmax normaliser; {CAPTURE_HINT}", kind="not_found")
    eps, context = _params(con)
    card = rows(con, _CARD, {"models": chosen})
    long = [{**d, "estimator": est, "rate": d[col]} for d in card
            for est, col in (("per text (Gu et al.)", "sink_rate_per_text"), ("pooled", "sink_rate_pooled"))
            if d[col] is not None]
    anchors = [{**d, "rate": d["anchor_rate"], "estimator": f"Gu et al. Table 1 ({d['anchor_variant']})"}
               for d in card if d["anchor_rate"] is not None]
    kind_color = alt.Color("input_kind:N", title="input", sort=list(KINDS),
                           scale=alt.Scale(domain=list(KINDS), range=["#54278f", "#e6550d", "#31a354"]))
    x = alt.X("rate:Q", title=f"sink rate (ε = {fmt_num(eps, 2)}, T = {context})", axis=alt.Axis(format="%"),
              scale=alt.Scale(domain=[0, 1]))
    y = alt.Y("checkpoint:N", title=None, axis=alt.Axis(labelLimit=260))
    tip = [alt.Tooltip("checkpoint:N"), alt.Tooltip("model:N"), alt.Tooltip("input_kind:N"),
           alt.Tooltip("estimator:N"), alt.Tooltip("rate:Q", format=".1%")]
    points = alt.Chart(values(long)).mark_point(size=90, filled=True).encode(
        x=x, y=y, color=kind_color, tooltip=[*tip, alt.Tooltip("n_heads:Q", title="heads"),
                                             alt.Tooltip("n_texts:Q", title="texts")],
        shape=alt.Shape("estimator:N", title="estimator",
                        scale=alt.Scale(domain=list(ESTIMATORS), range=["circle", "triangle-up"])),
        yOffset=alt.YOffset("input_kind:N", sort=list(KINDS)))
    layers = [points]
    if anchors:
        layers.append(alt.Chart(values(anchors)).mark_tick(thickness=2, size=14).encode(
            x=x, y=y, color=kind_color, yOffset=alt.YOffset("input_kind:N", sort=list(KINDS)),
            tooltip=[*tip, alt.Tooltip("anchor_model:N", title="published for")]))
    rates = alt.layer(*layers).properties(width=320, height=alt.Step(54), title=alt.TitleParams(
        "Sink rate by input", subtitle=["Dots: per text (Gu et al.'s estimator); triangles: pooled; "
                                        "ticks: Gu et al. 2025 Table 1 for the same checkpoint."]))
    profile_rows = rows(con, _PROFILE, {"models": chosen})
    label = {d["model"]: d["checkpoint"] for d in card}
    profile_rows = [{**d, "checkpoint": label.get(d["model"], d["model"])} for d in profile_rows]
    pooled_only = sorted({d["checkpoint"] for d in profile_rows if d["estimator"] == "pooled"})
    profile = alt.Chart(values(profile_rows)).mark_line(point=True).encode(
        x=alt.X("layer:Q", title="layer", axis=alt.Axis(tickMinStep=1)),
        y=alt.Y("rate:Q", title="sink rate of the layer's heads", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=kind_color, detail="checkpoint:N",
        strokeDash=alt.StrokeDash("estimator:N", title="estimator", scale=alt.Scale(domain=list(ESTIMATORS),
                                                                                   range=[[1, 0], [4, 3]])),
        tooltip=[alt.Tooltip("checkpoint:N"), alt.Tooltip("input_kind:N"), alt.Tooltip("layer:Q"),
                 alt.Tooltip("estimator:N"), alt.Tooltip("rate:Q", format=".1%")],
    ).properties(width=320, title=alt.TitleParams(
        "Per layer", subtitle=["StreamingLLM (Xiao et al. 2024, Fig. 12): ~0 in layers 0-1, 0.6-0.9 from layer 2 on.",
                               *([f"Dashed: pooled (sampled capture, no per-text rate): {', '.join(pooled_only)}."]
                                 if pooled_only else [])]))
    built = alt.hconcat(rates, profile).properties(title=alt.TitleParams(
        "The sink card: attention sinks as Gu et al. measure them",
        subtitle=[f"A head has a sink on a text when its mean weight on token 0 over the text's first {context} "
                  f"positions exceeds {fmt_num(eps, 2)}."]))
    parts = []
    for d in card:
        anchor = (f" (Gu et al.: {fmt_pct(d['anchor_rate'], 1)} for {d['anchor_model']})"
                  if d["anchor_rate"] is not None else "")
        per_text = "n/a" if d["sink_rate_per_text"] is None else fmt_pct(d["sink_rate_per_text"], 1)
        parts.append(f"{d['checkpoint']} {d['input_kind']}: {per_text} per text, "
                     f"{fmt_pct(d['sink_rate_pooled'], 1)} pooled{anchor}")
    return attach(built, "Sink rates: " + "; ".join(parts) + ".",
                  "The view sink_card has them with the per-layer rates; findings attn.sink.rate (natural text) "
                  "and attn.sink.repeated (repeated tokens, RoPE models) test them with intervals.")

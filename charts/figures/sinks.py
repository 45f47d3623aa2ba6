"""Attention sinks (docs/attention.md): where they are in a model, and when they appear in training.

Source: views ``sink_heads`` (per head: the mean attention weight on token 0 over queries below
``params.sink_context``, and whether it exceeds ``params.sink_epsilon``) and ``sink_series`` (per
checkpoint: the share of sink heads). Both exist only for captures that stored each query's softmax
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

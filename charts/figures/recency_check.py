"""Recency check (SPEC §7): each head's measured logit slope against bias_strength, a panel per family.

Source: table ``recency`` (the OLS slope of q.k_s in the key position s over a query's own earlier
keys, averaged over queries) and ``models``. Seed 002 claims the logits carry a recency term
mu_Q^a · alpha_K · j: on the dashed identity line the measured slope is that term. Both are logit
per token before the attention scale, shown ×10³.
"""

from __future__ import annotations

import math

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import MAX_HEAD_ROWS, families_of, resolve_models, rows, scalar, values
from qkdb.charts.style import BIAS_DEF, family_scale, fmt_num
from qkdb.errors import ChartError

_SQL = """
with h as (
    select r.model, m.family, r.logit_slope * 1e3 as measured, r.predicted_slope * 1e3 as predicted,
           printf('%s l%02d.h%02d', r.model, r.layer, r.head) as head,
           row_number() over (order by hash(r.model, r.layer, r.head)) as k
    from recency r join models m using (model)
    where list_contains($models, r.model) and r.logit_slope is not null and r.predicted_slope is not null
)
select model, family, measured, predicted, head from h where k <= $limit order by family, model, head
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.Chart:
    """Measured logit slope against the predicted recency term per head, one panel per family, with y = x."""
    chosen = resolve_models(con, models)
    if not scalar(con, "select count(*) from recency where list_contains($m, model)", {"m": chosen}):
        raise ChartError("no recency rows for these models: re-ingest them with this qkdb (qkdb ingest --force)",
                         kind="not_found")
    data = rows(con, _SQL, {"models": chosen, "limit": MAX_HEAD_ROWS})
    fams = families_of(con, chosen)
    stats = {}
    for f in fams:
        xs = [(d["predicted"], d["measured"]) for d in data if d["family"] == f]
        stats[f] = (_corr(xs), len(xs))
    for d in data:
        r, n = stats[d["family"]]
        d["panel"] = f"{d['family']}: r = {fmt_num(r, 2)}, n = {n}"
    panels = [f"{f}: r = {fmt_num(stats[f][0], 2)}, n = {stats[f][1]}" for f in fams if stats[f][1]]
    lo = min([0.0] + [min(d["measured"], d["predicted"]) for d in data])
    hi = max([0.0] + [max(d["measured"], d["predicted"]) for d in data])
    dots = alt.Chart().mark_circle(size=18, opacity=0.6).encode(
        x=alt.X("predicted:Q", title="bias strength (×10³ per token)", scale=alt.Scale(domain=[lo, hi])),
        y=alt.Y("measured:Q", title="measured logit slope (×10³ per token)", scale=alt.Scale(domain=[lo, hi])),
        color=alt.Color("family:N", scale=family_scale(fams), legend=None),
        tooltip=["head:N", alt.Tooltip("predicted:Q", format=".3g"), alt.Tooltip("measured:Q", format=".3g")])
    identity = alt.Chart().mark_rule(color="#333333", strokeDash=[4, 3]).encode(
        x=alt.datum(lo), y=alt.datum(lo), x2=alt.datum(hi), y2=alt.datum(hi))
    built = alt.layer(identity, dots, data=values(data)).properties(width=240, height=240).facet(
        facet=alt.Facet("panel:N", sort=panels, title=None), columns=3,
    ).properties(title=alt.TitleParams(
        "Does the recency term explain the logits?",
        subtitle=["Seed 002: the logits carry a recency term, bias strength × key position. Per head: the measured",
                  "slope of q·k in the key position (over each query's own earlier keys) against bias strength;",
                  "dashed: y = x. Other position terms of the logit move heads off it, e.g. the queries' own drift.",
                  BIAS_DEF + "."]))
    every = [(d["predicted"], d["measured"]) for d in data]
    return attach(built, f"Over {len(every):,} heads of {len(chosen)} model(s): r = {fmt_num(_corr(every), 2)}.",
                  "The findings on the recency term test the correlation and the ratio with intervals.")


def _corr(pairs: list[tuple[float, float]]) -> float | None:
    n = len(pairs)
    if n < 3:
        return None
    mx = sum(x for x, _ in pairs) / n
    my = sum(y for _, y in pairs) / n
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    syy = sum((y - my) ** 2 for _, y in pairs)
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None

"""PCA figure 12: phase portraits, PC0 r_q against r_k of every head, a panel per checkpoint.

Source: view ``taxonomy`` (per head) of the series' checkpoints, ``params`` for the thresholds.
Every head up to :data:`~qkdb.charts.data.MAX_HEAD_ROWS` over all panels, past that a deterministic
sample of that many (``hash(model, layer, head)`` order), which the caption says; each panel's
position-dominated share counts all of its checkpoint's heads.
Points take their taxonomy category's colour (as in ``rq-vs-rk``'s categories); the
position-dominated corners (r_q > high, |r_k| > high) are shaded and named, so the drift from a
diffuse cloud into that corner reads off the panels in training order, and each panel's header
gives its checkpoint and position-dominated share. Panels are large enough to read at paper size.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import MAX_HEAD_ROWS, rows, values
from qkdb.charts.figures.rules import hlines, vlines
from qkdb.charts.figures.rules import taxonomy_thresholds
from qkdb.charts.figures.series import Series
from qkdb.charts.style import CATEGORIES, category_scale, fmt_pct

COLUMNS = 4  # 4 × 190 px: readable when the figure is scaled to a page column
SIZE = 190
# Past this many checkpoints (a training-dynamics study has hundreds) the panels are this many,
# evenly spaced in training order, the first and the last included; the subtitle says so.
MAX_PANELS = 12


def evenly_spaced(items: list, limit: int) -> list:
    """``limit`` of ``items`` evenly spaced in their order, the first and the last included (all if fewer)."""
    n = len(items)
    if n <= limit:
        return list(items)
    if limit <= 1:
        return list(items[-1:])
    return [items[i] for i in sorted({round(k * (n - 1) / (limit - 1)) for k in range(limit)})]

_SQL = """
with t as materialized (
    select model, layer, head, r_q, r_k, category
    from taxonomy
    where list_contains($models, model) and r_q is not null and r_k is not null
), f as (
    select model, avg((category = 'position-dominated')::int) as share_pd from t group by model
)
select t.*, f.share_pd, count(*) over () as n_total
from t join f using (model)
qualify row_number() over (order by hash(t.model, t.layer, t.head)) <= $limit
order by t.model, t.layer, t.head
"""


def _corners(base: alt.Chart, high: float, x: dict, y: dict) -> list[alt.Chart]:
    """The position-dominated corners, shaded once per panel (one aggregated row) and named."""
    one = base.transform_aggregate(_n="count()")
    shade = {"color": "#6a3d9a", "opacity": 0.08}

    # Datum positions carry the points' scales and axes: the first layer's axis is the one drawn.
    def at_x(v):
        return alt.XDatum(v, **x)

    def at_y(v):
        return alt.YDatum(v, **y)

    return [
        one.mark_rect(**shade).encode(x=at_x(high), x2=alt.X2Datum(1.0), y=at_y(high), y2=alt.Y2Datum(1.0)),
        one.mark_rect(**shade).encode(x=at_x(high), x2=alt.X2Datum(1.0), y=at_y(-1.0), y2=alt.Y2Datum(-high)),
        # Named in the lower corner, where discordant heads are rare, so the label hides no point.
        one.mark_text(align="right", baseline="bottom", dx=-3, dy=-3, fontSize=9, color="#6a3d9a").encode(
            x=at_x(1.0), y=at_y(-1.0), text=alt.value("position-dominated")),
    ]


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.FacetChart:
    """Per-head PC0 r_q vs r_k scatter, one panel per checkpoint, coloured by taxonomy category."""
    s = Series(con, series)
    high, low = taxonomy_thresholds(con)
    drawn = evenly_spaced(s.models, MAX_PANELS)
    data = s.label(rows(con, _SQL, {"models": drawn, "limit": MAX_HEAD_ROWS}))
    n_total = data[0]["n_total"] if data else 0
    for d in data:
        del d["n_total"]
    labels, share = {}, {}
    for d in data:
        share[d["checkpoint"]] = d["share_pd"]
        d["panel"] = labels.setdefault(d["checkpoint"], f"{d['checkpoint']} · {fmt_pct(d['share_pd'])}")
    panels = [labels[c] for c in s.order if c in labels]
    base = alt.Chart()
    x_def = {"title": "PC0 r_q", "scale": alt.Scale(domain=[-0.1, 1.0]), "axis": alt.Axis(values=[0, low, high, 1.0])}
    y_def = {"title": "PC0 r_k", "scale": alt.Scale(domain=[-1.0, 1.0]),
             # tickCount as large as the list: Vega thins explicit values down to the default count.
             "axis": alt.Axis(values=[-1, -high, -low, 0, low, high, 1], tickCount=7, labelOverlap=False)}
    x, y = alt.X("r_q:Q", **x_def), alt.Y("r_k:Q", **y_def)
    points = base.mark_circle(size=16, opacity=0.75).encode(
        x=x, y=y, color=alt.Color("category:N", scale=category_scale(), sort=list(CATEGORIES), title="category",
                                  legend=alt.Legend(symbolOpacity=1, orient="right")),
        tooltip=[alt.Tooltip("checkpoint:N"), alt.Tooltip("layer:Q"), alt.Tooltip("head:Q"), alt.Tooltip("r_q:Q", format=".3f"),
                 alt.Tooltip("r_k:Q", format=".3f"), alt.Tooltip("category:N")],
    )
    layer = alt.layer(
        *_corners(base, high, x_def, y_def),
        vlines(base, [low, high], color="#888888"), hlines(base, [-high, -low, low, high], color="#888888"),
        points, data=values(data),
    )
    built = layer.properties(width=SIZE, height=SIZE).facet(
        facet=alt.Facet("panel:N", sort=panels, title=None, header=alt.Header(labelFontSize=11, labelLimit=SIZE + 20)),
        columns=min(COLUMNS, len(panels)), spacing=14,
    ).resolve_axis(
        # An axis per panel (the scale stays shared): a faceted grid's shared x axes sit in the
        # footer of every column, so a last row with empty slots drew axes under nothing.
        x="independent",
    ).properties(
        title=alt.TitleParams(
            "Phase portraits: PC0 r_q vs r_k per head at each checkpoint",
            subtitle=[f"Combined Q/K PCA (seed 003 figure 12), {s.subtitle()}.",
                      *([f"{len(drawn)} of them drawn, evenly spaced in training order (first and last included)."]
                        if len(drawn) < len(s.models) else []),
                      f"Panel header: checkpoint · share of position-dominated heads; dashed: taxonomy thresholds "
                      f"{low:g} / {high:g} on r_q and ±{low:g} / ±{high:g} on r_k; shaded: position-dominated "
                      f"(r_q > {high:g} and |r_k| > {high:g})."],
        )
    )
    order = [c for c in s.order if c in share]
    shares = [share[c] for c in order]
    most = max(range(len(shares)), key=shares.__getitem__) if shares else 0
    return attach(
        built,
        (f"{len(data):,} heads drawn" if len(data) == n_total else
         f"{len(data):,} of {n_total:,} heads drawn, a deterministic sample (the shares count them all),")
        + f" over the {'drawn ' if len(drawn) < len(s.models) else ''}checkpoints of {s.name}. "
        "The position-dominated share goes "
        f"{fmt_pct(shares[0] if shares else None)} → {fmt_pct(shares[-1] if shares else None)}"
        + (f", highest at {order[most]} ({fmt_pct(shares[most])})" if shares and 0 < most < len(shares) - 1 else "")
        + ".",
        "The seed describes the cloud tightening into the position-dominated corner over training.",
    )

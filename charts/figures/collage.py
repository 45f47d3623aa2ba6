"""The seeds' 2×2 scatter collages (seed 000: {a, b} plane; seed 001: PC0 vs PC1).

Per head one panel of its sampled points (table ``points``): queries on a truncated ``Blues`` scale
by position, keys on a truncated ``Reds`` scale, light = early and dark = late. The two position
scales use different channels (``color`` for Q, ``fill`` for K) and different fields
(``q_position``, ``k_position``), each scale's domain being its own field's extent: Vega-Lite
merges the legends of two scales with equal domains into one (blue) key, which left the red K
points without one. The per-head statistics the seeds print in a text box are the panel's subtitle.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import (
    POINTS_PER_KIND,
    check_heads,
    head_label,
    model_heads,
    model_table,
    parse_heads,
    resolve_one_model,
    rows,
    seed_sample,
    values,
)
from qkdb.charts.caption import attach
from qkdb.charts.style import K_SCHEME, PANEL, Q_SCHEME
from qkdb.errors import ChartError

AXIS_EXTENT = 34  # px reserved for y-axis labels, so "−10" and "5" leave the panels aligned

_POINTS = """
select layer, head, kind, position, example_id, {x} as x, {y} as y,
       case when kind = 'q' then position end as q_position, case when kind = 'k' then position end as k_position
from {points}
where model = $model and list_contains($heads, printf('%d.%d', layer, head))
  and {x} is not null and {y} is not null
qualify row_number() over (partition by layer, head, kind order by hash(idx)) <= $per_kind
order by layer, head, kind desc, idx
"""


def collage_heads(con: duckdb.DuckDBPyConnection, model: str, head) -> list[tuple[int, int]]:
    """The heads to draw: those asked for, else the seeds' ``random.Random(42)`` sample of four."""
    heads = parse_heads(head)
    if heads:
        check_heads(con, model, heads)
        return heads
    all_heads = model_heads(con, model)
    if not all_heads:
        raise ChartError(f"model {model!r} has no heads in the warehouse; re-ingest it", kind="not_found")
    return seed_sample(all_heads)


def point_rows(con: duckdb.DuckDBPyConnection, model: str, heads: list[tuple[int, int]], x: str, y: str) -> list[dict]:
    data = rows(con, _POINTS.format(x=x, y=y, points=model_table(con, "points", model)), {
        "model": model, "heads": [f"{l}.{h}" for l, h in heads], "per_kind": POINTS_PER_KIND,
    })
    have = {(d["layer"], d["head"]) for d in data}
    if not have:
        raise ChartError(
            f"no sampled points are stored for model {model!r} (heads {', '.join(head_label(*h) for h in heads)}): "
            "re-ingest it with points, e.g. `qkdb ingest --model ... --force` (the default keeps 512 per kind)",
            kind="not_found",
        )
    return data


def position_colors(legends: bool = True) -> tuple[alt.Color, alt.Fill]:
    """The Q (color, Blues) and K (fill, Reds) position encodings, each with its own legend.

    Vega-Lite merges the legends of two channels whose scale domains are equal, and an explicit
    domain or one field for both makes them equal whenever Q and K span the same positions. Each
    scale's domain is therefore its own field's extent, which no other channel shares.
    """
    def legend(title):
        return alt.Legend(title=title, gradientLength=120, orient="right") if legends else None

    return (
        alt.Color("q_position:Q", scale=alt.Scale(scheme=Q_SCHEME), legend=legend("Q position (token)")),
        alt.Fill("k_position:Q", scale=alt.Scale(scheme=K_SCHEME), legend=legend("K position (token)")),
    )


def qk_layers(base: alt.Chart, x: alt.X, y: alt.Y, color: alt.Color, fill: alt.Fill, *, size: float, tooltip) -> list[alt.Chart]:
    """Q then K points (legends follow the layer order: Q's first, as the seeds list them)."""
    q = base.transform_filter("datum.kind == 'q'").mark_circle(size=size, opacity=0.6).encode(
        x=x, y=y, color=color, tooltip=tooltip,
    )
    k = base.transform_filter("datum.kind == 'k'").mark_circle(size=size, opacity=0.6).encode(
        x=x, y=y, fill=fill, tooltip=tooltip,
    )
    return [q, k]


def panel(
    data: list[dict],
    *,
    x_title: str,
    y_title: str,
    title: str,
    subtitle: list[str],
    width: int = PANEL,
    height: int = PANEL,
    size: float = 9,
) -> alt.LayerChart:
    """One head's scatter: Q points (Blues by position) and K points (Reds by position)."""
    base = alt.Chart(values(data))
    x = alt.X("x:Q", title=x_title, scale=alt.Scale(zero=False, nice=True))
    y = alt.Y("y:Q", title=y_title, scale=alt.Scale(zero=False, nice=True), axis=alt.Axis(minExtent=AXIS_EXTENT, labelFlush=True))
    tooltip = [alt.Tooltip("kind:N"), alt.Tooltip("position:Q"), alt.Tooltip("example_id:Q", title="example"),
               alt.Tooltip("x:Q", title=x_title, format=".3g"), alt.Tooltip("y:Q", title=y_title, format=".3g")]
    color, fill = position_colors()
    return alt.layer(*qk_layers(base, x, y, color, fill, size=size, tooltip=tooltip)).properties(
        width=width, height=height, title=alt.TitleParams(title, subtitle=subtitle, anchor="middle", fontSize=13)
    )


def grid(panels: list[alt.LayerChart], columns: int = 2) -> alt.ConcatChart:
    # align="all": every panel's plot area on one grid whatever its titles and tick labels.
    return alt.concat(*panels, columns=columns, spacing=18).properties(align="all")


def build_collage(
    con: duckdb.DuckDBPyConnection,
    models,
    head,
    *,
    figure: str,
    x: str,
    y: str,
    x_title: str,
    y_title: str,
    stats,
    caption,
    title: str,
    subtitle: str,
) -> alt.ConcatChart:
    """A collage of the chosen heads.

    ``stats(con, model, heads)`` gives each head's subtitle lines; ``caption(model, heads, data, lines)``
    the figure's caption from the drawn points.
    """
    model = resolve_one_model(con, models, figure)
    heads = collage_heads(con, model, head)
    data = point_rows(con, model, heads, x, y)
    lines = stats(con, model, heads)
    # Every panel gets as many subtitle lines as the longest, so the plot areas line up.
    depth = max((len(v) for v in lines.values()), default=0)
    lines = {h: [*v, *[""] * (depth - len(v))] for h, v in lines.items()}
    panels = [
        panel(
            [d for d in data if (d["layer"], d["head"]) == h],
            x_title=x_title, y_title=y_title, title=head_label(*h), subtitle=lines.get(h, []),
        )
        for h in heads
    ]
    chosen = "chosen heads" if head is not None else "heads drawn with random.Random(42), as the seeds"
    built = grid(panels).properties(
        title=alt.TitleParams(f"{title}: {model}", subtitle=[f"{subtitle}; {chosen}."])
    )
    return attach(built, caption(model, heads, data, lines))


def qk_gap(data: list[dict], head: tuple[int, int], axis: str = "x") -> float | None:
    """Mean Q minus mean K of one head's drawn points along ``axis``."""
    def mean(kind):
        v = [d[axis] for d in data if (d["layer"], d["head"]) == head and d["kind"] == kind]
        return sum(v) / len(v) if v else None

    q, k = mean("q"), mean("k")
    return None if q is None or k is None else q - k

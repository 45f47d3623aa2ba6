"""The seeds' 2×2 scatter collages (seed 000: {a, b} plane; seed 001: PC0 vs PC1).

Per head one panel of its sampled points (table ``points``): queries on a truncated ``Blues`` scale
by position, keys on a truncated ``Reds`` scale, light = early and dark = late. The two position
scales use different channels (``color`` for Q, ``fill`` for K) so each gets its own legend, shared
by all panels. The per-head statistics the seeds print in a text box are the panel's subtitle.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.data import (
    POINTS_PER_KIND,
    check_heads,
    head_label,
    model_heads,
    parse_heads,
    resolve_one_model,
    rows,
    seed_sample,
    values,
)
from qkdb.charts.style import K_SCHEME, PANEL, Q_SCHEME
from qkdb.errors import ChartError

_POINTS = """
select layer, head, kind, position, example_id, {x} as x, {y} as y
from points
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
        raise ChartError(f"model {model!r} has no heads in the warehouse; re-ingest it")
    return seed_sample(all_heads)


def point_rows(con: duckdb.DuckDBPyConnection, model: str, heads: list[tuple[int, int]], x: str, y: str) -> list[dict]:
    data = rows(con, _POINTS.format(x=x, y=y), {
        "model": model, "heads": [f"{l}.{h}" for l, h in heads], "per_kind": POINTS_PER_KIND,
    })
    have = {(d["layer"], d["head"]) for d in data}
    if not have:
        raise ChartError(
            f"no sampled points are stored for model {model!r} (heads {', '.join(head_label(*h) for h in heads)}): "
            "re-ingest it with points, e.g. `qkdb ingest --model ... --force` (the default keeps 512 per kind)"
        )
    return data


def panel(
    data: list[dict],
    *,
    x_title: str,
    y_title: str,
    title: str,
    subtitle: list[str],
    q_domain: list[float],
    k_domain: list[float],
    width: int = PANEL,
    height: int = PANEL,
    size: float = 9,
) -> alt.LayerChart:
    """One head's scatter: Q points (Blues by position) and K points (Reds by position)."""
    base = alt.Chart(values(data))
    x = alt.X("x:Q", title=x_title, scale=alt.Scale(zero=False, nice=True))
    y = alt.Y("y:Q", title=y_title, scale=alt.Scale(zero=False, nice=True))
    tooltip = [alt.Tooltip("kind:N"), alt.Tooltip("position:Q"), alt.Tooltip("example_id:Q", title="example"),
               alt.Tooltip("x:Q", title=x_title, format=".3g"), alt.Tooltip("y:Q", title=y_title, format=".3g")]
    k = base.transform_filter("datum.kind == 'k'").mark_circle(size=size, opacity=0.6).encode(
        x=x, y=y, tooltip=tooltip,
        fill=alt.Fill("position:Q", scale=alt.Scale(scheme=K_SCHEME, domain=k_domain), title="K position"),
    )
    q = base.transform_filter("datum.kind == 'q'").mark_circle(size=size, opacity=0.6).encode(
        x=x, y=y, tooltip=tooltip,
        color=alt.Color("position:Q", scale=alt.Scale(scheme=Q_SCHEME, domain=q_domain), title="Q position"),
    )
    # Legends follow the layer order: Q's first, as the seeds list them.
    return alt.layer(q, k).properties(
        width=width, height=height, title=alt.TitleParams(title, subtitle=subtitle, anchor="middle", fontSize=13)
    )


def position_domains(data: list[dict]) -> tuple[list[float], list[float]]:
    def dom(kind):
        p = [d["position"] for d in data if d["kind"] == kind]
        return [min(p), max(p)] if p else [0, 1]

    return dom("q"), dom("k")


def grid(panels: list[alt.LayerChart], columns: int = 2) -> alt.ConcatChart:
    return alt.concat(*panels, columns=columns, spacing=18)


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
    title: str,
    subtitle: str,
) -> alt.ConcatChart:
    """A collage of the chosen heads; ``stats(con, model, heads)`` gives each head's subtitle lines."""
    model = resolve_one_model(con, models, figure)
    heads = collage_heads(con, model, head)
    data = point_rows(con, model, heads, x, y)
    q_dom, k_dom = position_domains(data)
    lines = stats(con, model, heads)
    panels = [
        panel(
            [d for d in data if (d["layer"], d["head"]) == h],
            x_title=x_title, y_title=y_title, title=head_label(*h), subtitle=lines.get(h, []),
            q_domain=q_dom, k_domain=k_dom,
        )
        for h in heads
    ]
    chosen = "chosen heads" if head is not None else "heads drawn with random.Random(42), as the seeds"
    return grid(panels).properties(
        title=alt.TitleParams(f"{title}: {model}", subtitle=[f"{subtitle}; {chosen}."])
    )

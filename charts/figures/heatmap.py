"""The annotated depth heatmap the seeds draw: a row per model (or checkpoint), a column per depth bin.

Seed 004: ``imshow`` with ``Blues`` (r_q) or ``Reds`` (r_k), vmin 0, vmax 1, one cell per
(model, depth bin) holding the mean over the heads in that bin, printed in the cell. A cell with
no head is drawn, not left blank: light grey with a dash when the model has layers at that depth
that were not sampled, a dot when it has no layer there at all (fewer than ten layers); the
subtitle says which is which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import duckdb

from qkdb.charts.data import rows, values
from qkdb.charts.style import HEATMAP_CELL

N_BINS = 10
EMPTY_FILL = "#eeeeee"

_LAYERS = "select model, n_layers from models where list_contains($models, model)"


def depth_bins_with_layers(n_layers: int | None) -> set[int]:
    """The depth bins some layer falls in (ingest's rule: min(9, floor(10 · layer / (n_layers − 1))))."""
    if not n_layers:
        return set(range(N_BINS))
    if n_layers == 1:
        return {0}
    return {min(N_BINS - 1, math.floor(10 * layer / (n_layers - 1))) for layer in range(n_layers)}


def complete(con: duckdb.DuckDBPyConnection, data: list[dict], models: Sequence[str]) -> list[dict]:
    """``data`` plus a row for every (model, depth bin) it lacks: ``n_heads`` 0, no value, and
    ``empty`` saying why ('unsampled' or 'no layer'); rows with heads get ``empty`` None."""
    layers = {r["model"]: r["n_layers"] for r in rows(con, _LAYERS, {"models": list(models)})}
    have = {(d["model"], d["depth_bin"]) for d in data}
    keys = list(data[0]) if data else ["model", "depth_bin", "n_heads"]
    out = [{**d, "empty": None} for d in data]
    for m in models:
        exists = depth_bins_with_layers(layers.get(m))
        for b in range(N_BINS):
            if (m, b) not in have:
                out.append({**{k: None for k in keys}, "model": m, "depth_bin": b, "n_heads": 0,
                            "empty": "unsampled" if b in exists else "no layer"})
    return out


def empty_note(data: list[dict]) -> str:
    """The subtitle line explaining empty cells ('' when there are none)."""
    kinds = {d["empty"] for d in data if d.get("empty")}
    parts = []
    if "unsampled" in kinds:
        parts.append("–: no ingested head at that depth (its layers were not sampled)")
    if "no layer" in kinds:
        parts.append("·: the model has no layer at that depth (fewer than ten layers)")
    return "; ".join(parts) + "." if parts else ""


def depth_heatmap(
    data: list[dict],
    *,
    row: str,
    row_title: str,
    row_order: Sequence[str],
    value: str,
    value_title: str,
    scheme: str,
    domain: tuple[float, float] | None = (0.0, 1.0),
    domain_mid: float | None = None,
    fmt: str = ".2f",
    light_text_above: float = 0.6,
    title: str | alt.TitleParams | None = None,
    show_rows: bool = True,
) -> alt.LayerChart:
    """Rect + text layers; ``light_text_above`` is the |value| above which the annotation turns white.

    Parameters
    ----------
    data
        One dict per (row, depth_bin) with ``row``, ``depth_bin``, ``value``, ``n_heads`` and
        ``empty`` (see :func:`complete`: cells without heads are drawn grey, marked – or ·).
    domain
        Colour domain; values outside are clamped (the seeds fix 0..1 for correlations).
    domain_mid
        Centre of a diverging scheme (e.g. 0 for a signed bias).
    """
    scale = alt.Scale(scheme=scheme, clamp=True)
    if domain is not None:
        scale = alt.Scale(scheme=scheme, domain=list(domain), clamp=True)
    if domain_mid is not None:
        scale = alt.Scale(scheme=scheme, domainMid=domain_mid, **({"domain": list(domain)} if domain else {}))
    x = alt.X(
        "depth_bin:O",
        title="relative depth, bin start (layer / (n_layers − 1))",
        scale=alt.Scale(domain=list(range(N_BINS))),
        axis=alt.Axis(labelExpr="format(datum.value / 10, '.1f')", labelAngle=0),
    )
    y = alt.Y(f"{row}:N", sort=list(row_order), title=row_title if show_rows else None,
              axis=alt.Axis(labels=show_rows, ticks=show_rows, labelLimit=320))
    tooltip = [
        alt.Tooltip(f"{row}:N", title=row_title),
        alt.Tooltip("depth_bin:O", title="depth bin"),
        alt.Tooltip(f"{value}:Q", title=value_title, format=fmt),
        alt.Tooltip("n_heads:Q", title="heads"),
    ]
    base = alt.Chart(values(data))
    full = base.transform_filter("datum.n_heads > 0")
    empty = base.transform_filter("datum.n_heads == 0")
    rect = full.mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=x, y=y, color=alt.Color(f"{value}:Q", scale=scale, title=value_title), tooltip=tooltip
    )
    text = full.mark_text(fontSize=10).encode(
        x=x,
        y=y,
        text=alt.Text(f"{value}:Q", format=fmt),
        color=alt.condition(
            f"abs(datum['{value}']) > {light_text_above}", alt.value("white"), alt.value("#222222")
        ),
    )
    blank = empty.mark_rect(fill=EMPTY_FILL, stroke="white", strokeWidth=0.5).encode(
        x=x, y=y, tooltip=[alt.Tooltip(f"{row}:N", title=row_title), alt.Tooltip("depth_bin:O", title="depth bin"),
                           alt.Tooltip("empty:N", title="no heads")],
    )
    mark = empty.transform_calculate(sign="datum.empty == 'no layer' ? '·' : '–'").mark_text(
        fontSize=11, color="#888888"
    ).encode(x=x, y=y, text=alt.Text("sign:N"))
    chart = alt.layer(rect, text, blank, mark).properties(
        width=HEATMAP_CELL * N_BINS, height=alt.Step(HEATMAP_CELL * 0.8)
    )
    if title is not None:
        chart = chart.properties(title=title)
    return chart


def summary(data: list[dict], value: str, row: str, fmt) -> str:
    """One sentence on a heatmap's values: range, the rows with the highest and lowest mean, and
    early (bins 0–2) against late (bins 7–9) layers."""
    cells = [d for d in data if d.get(value) is not None and d.get("n_heads")]
    if not cells:
        return "No cell has a value."

    def mean(ds):
        w = sum(d["n_heads"] for d in ds)
        return sum(d[value] * d["n_heads"] for d in ds) / w if w else None

    by_row: dict[str, list[dict]] = {}
    for d in cells:
        by_row.setdefault(d[row], []).append(d)
    means = {r: mean(ds) for r, ds in by_row.items()}
    top, bottom = max(means, key=means.get), min(means, key=means.get)
    early = mean([d for d in cells if d["depth_bin"] <= 2])
    late = mean([d for d in cells if d["depth_bin"] >= 7])
    lo, hi = min(d[value] for d in cells), max(d[value] for d in cells)
    text = f"Cells range {fmt(lo)} to {fmt(hi)}."
    if len(means) > 1:
        text += f" Averaged over depth, {top} is highest ({fmt(means[top])}) and {bottom} lowest ({fmt(means[bottom])})."
    if early is not None and late is not None:
        text += f" Early layers (depth < 0.3) average {fmt(early)}, late ones (≥ 0.7) {fmt(late)}."
    n_empty = sum(1 for d in data if d.get("empty") == "unsampled")
    if n_empty:
        text += f" {n_empty} cell(s) have no sampled head."
    return text

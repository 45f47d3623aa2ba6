"""Which RoPE frequencies the logits are built from (SPEC §4.8; Barbero et al. 2025, Liu et al. 2023).

Source: view ``frequency_usage_by_layer``. A panel per model: layer × RoPE plane, planes in order of
falling frequency (j = 0 turns fastest), each cell the layer's mean ``logit_share``; the layer's
critical plane (the first that does not finish a turn in the trained context) outlined.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import drawn_models, resolve_models, rows, values
from qkdb.charts.style import fmt_num, fmt_pct
from qkdb.errors import ChartError

CELL = 12  # px per plane and per layer: 64 planes make a 768 px panel

_CELLS = """
select model, layer, j, omega, turns_trained, critical_plane, low_band, n_heads, mean_logit_share,
    mean_bound_share, mean_low_band_excess
from frequency_usage_by_layer
where list_contains($models, model)
order by model, layer, j
"""

# Per model: the heads' mean low_band_excess (the same on each plane's row of a head: plane 0's), the
# critical planes and the planes per head.
_MODELS = """
select model, count(*) filter (where j = 0) as n_heads, avg(low_band_excess) filter (where j = 0) as excess,
    min(critical_plane) as crit_lo, max(critical_plane) as crit_hi, max(j) + 1 as n_planes,
    any_value(trained_context) as trained_context
from frequency_usage
where list_contains($models, model)
group by model
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.FacetChart:
    """A layer × plane heatmap of the mean logit_share per model, the critical plane outlined."""
    chosen = resolve_models(con, models)
    have = {r["model"] for r in rows(con, "select distinct model from frequency_usage where list_contains($m, model)",
                                     {"m": chosen})}
    if not have:
        raise ChartError(f"no frequency usage for {', '.join(chosen)}: it needs RoPE layers, texts (example_id) and "
                         "the RoPE-plane stage (not --no-complement); re-ingest to compute it", kind="not_found")
    shown = drawn_models(con, [m for m in chosen if m in have], models)
    data = rows(con, _CELLS, {"models": shown.models})
    n_planes = max(d["j"] for d in data) + 1
    x = alt.X("j:O", title="RoPE plane j (frequency falls →)", axis=alt.Axis(labelAngle=0, values=list(range(0, n_planes, 4))))
    y = alt.Y("layer:O", title="layer")
    top = max((d["mean_logit_share"] or 0.0 for d in data), default=0.0) or 1.0
    cells = alt.Chart().mark_rect().encode(
        x=x, y=y,
        color=alt.Color("mean_logit_share:Q", title="share of |logit|",
                        scale=alt.Scale(scheme="viridis", domain=[0, top], clamp=True)),
        tooltip=[alt.Tooltip("model:N"), alt.Tooltip("layer:O"), alt.Tooltip("j:O", title="plane"),
                 alt.Tooltip("omega:Q", title="ω (rad/token)", format=".3g"),
                 alt.Tooltip("turns_trained:Q", title="turns in the trained context", format=".3g"),
                 alt.Tooltip("mean_logit_share:Q", title="mean logit share", format=".3f"),
                 alt.Tooltip("mean_bound_share:Q", title="mean bound share", format=".3f"),
                 alt.Tooltip("n_heads:Q", title="heads")],
    )
    critical = alt.Chart().transform_filter("datum.j == datum.critical_plane").mark_rect(
        fill=None, stroke="#ff3b30", strokeWidth=1.5).encode(x=x, y=y)
    per_model = {r["model"]: r for r in rows(con, _MODELS, {"models": shown.models})}
    built = alt.layer(cells, critical, data=values(data)).properties(
        width=max(160, CELL * n_planes), height=alt.Step(CELL),
    ).facet(facet=alt.Facet("model:N", sort=shown.models, title=None), columns=2).properties(title=alt.TitleParams(
        "Which RoPE frequencies the logits are built from: mean share of |q·k| per plane",
        subtitle=["Each cell: the layer's heads' mean |q⁽ʲ⁾·k⁽ʲ⁾| over causal pairs of one text, as a share of the "
                  "logit's magnitude (non-rotating dims counted as one more part).",
                  "Outlined in red: the layer's critical plane, the first that does not finish a turn in the trained "
                  "context (Liu et al. 2023); the planes from there on are the low band (Barbero et al. 2025).",
                  *([shown.note] if shown.note else [])]))
    return attach(built, *_caption(per_model, shown.models))


def _caption(per_model: dict, models: list[str]) -> list[str]:
    said = []
    for m in models:
        r = per_model.get(m)
        if r is None:
            continue
        if r["crit_lo"] is None:
            said.append(f"{m}: no critical plane (no trained context is known, or every plane turns within it).")
            continue
        crit = (f"plane {r['crit_lo']}" if r["crit_lo"] == r["crit_hi"] else f"planes {r['crit_lo']}–{r['crit_hi']}")
        low = r["n_planes"] - r["crit_lo"]
        said.append(f"{m}: critical {crit} of {r['n_planes']} at {r['trained_context']:,} tokens; the low band "
                    f"({low} planes, {fmt_pct(low / r['n_planes'], 0)} of them) carries {fmt_num(r['excess'], 2)}× "
                    f"its even share of the logits (mean over {r['n_heads']:,} heads).")
    said.append("Read: bright columns right of the red outline are logits made of frequencies that never finish a "
                "turn in the trained context, the band Barbero et al. find carries the queries' and keys' norm; "
                "rope.low_band tests the mean excess above 1 with an interval per model.")
    return said

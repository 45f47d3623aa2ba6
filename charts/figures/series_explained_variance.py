"""PCA figure 09: explained variance over training, mean share of the first PCs per checkpoint (±1 sd).

Source: view ``explained_variance`` (model rows of the series' checkpoints). PC0 holds several
times the share of PC1 and PC2, which on one axis lay on top of each other at the bottom; so PC0
has the upper panel and PC1, PC2 the lower one, each with its own axis, in hues (and dashes) that
tell them apart, their ±1 sd whiskers set apart (``xOffset``). Background tinted by training phase.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import rows, values
from qkdb.charts.figures.series import Series
from qkdb.charts.style import fmt_pct

N_PCS = 3
PC_COLORS = ("#3f007d", "#1b9e77", "#d95f02")
PC_DASH = ([1, 0], [1, 0], [6, 3])

_SQL = """
select model, 'PC' || pc as pc_label, pc, mean_explained_variance as mean, sd_explained_variance as sd,
       greatest(mean_explained_variance - coalesce(sd_explained_variance, 0), 0) as lo,
       mean_explained_variance + coalesce(sd_explained_variance, 0) as hi, n_heads
from explained_variance
where scope = 'model' and list_contains($models, model) and pc < $n_pcs
order by model, pc
"""


def _panel(s: Series, data: list[dict], pcs: list[str], title: str, height: int) -> alt.LayerChart:
    rows_ = [d for d in data if d["pc_label"] in pcs]
    base = alt.Chart(values(rows_))
    labels = [f"PC{i}" for i in range(N_PCS)]
    color = alt.Color("pc_label:N", scale=alt.Scale(domain=labels, range=list(PC_COLORS)), title="component",
                      legend=alt.Legend(orient="right"))
    # Same field and domain as the colour: Vega-Lite merges the two into one key (colour and dash).
    dash = alt.StrokeDash("pc_label:N", scale=alt.Scale(domain=labels, range=list(PC_DASH)), title="component",
                          legend=alt.Legend(orient="right"))
    offset = alt.XOffset("pc_label:N", sort=pcs, scale=alt.Scale(paddingOuter=1))
    x = s.x() if pcs[0] != "PC0" else s.x(title=None, labels=False)  # the lower panel names the checkpoints
    bars = base.mark_rule(strokeWidth=1.5, opacity=0.7).encode(x=x, xOffset=offset, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"), color=color)
    line = base.mark_line(point=True, strokeWidth=2.5).encode(
        x=x, xOffset=offset, color=color, strokeDash=dash,
        y=alt.Y("mean:Q", title=title, axis=alt.Axis(format="%"), scale=alt.Scale(zero=True, nice=True)),
        tooltip=[alt.Tooltip("checkpoint:N"), alt.Tooltip("model:N"), alt.Tooltip("pc_label:N"), alt.Tooltip("mean:Q", format=".1%"),
                 alt.Tooltip("sd:Q", format=".1%"), alt.Tooltip("n_heads:Q", title="heads")],
    )
    return s.panel(base, bars, line, title=None, height=height, x=x)


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.VConcatChart:
    """Mean explained variance of PC0 (upper panel) and PC1–PC2 (lower) across the checkpoints of a series."""
    s = Series(con, series)
    data = s.label(rows(con, _SQL, {"models": s.models, "n_pcs": N_PCS}))
    built = alt.vconcat(
        _panel(s, data, ["PC0"], "PC0: share of Q/K variance", 200),
        _panel(s, data, ["PC1", "PC2"], "PC1, PC2: share", 150),
        spacing=10,
    ).resolve_scale(color="shared", y="independent").properties(
        title=alt.TitleParams(
            "Explained variance over training",
            subtitle=[f"Combined Q/K PCA (seed 003 figure 09), {s.subtitle()}; means over heads, bars ±1 sd; "
                      "PC1 and PC2 on their own axis below."],
        )
    )
    ev = {(d["model"], d["pc"]): d["mean"] for d in data}

    def move(pc):
        return f"PC{pc} {fmt_pct(ev.get((s.models[0], pc)), 1)} → {fmt_pct(ev.get((s.models[-1], pc)), 1)}"

    return attach(
        built,
        f"Mean explained variance from {s.order[0]} to {s.order[-1]}: {move(0)}, {move(1)}, {move(2)}.",
        "The seed reports PC0 growing 19% → 29% → 34% over training.",
    )

"""PCA figure 06 (seed 001): 2×2 heads of one model on (PC0, PC1), Q blues / K reds by position.

Source: table ``points`` (canonical PC0/PC1 projections, pooled mean removed) and ``pca`` for the
stats box (explained variance, r_q, r_k of PC0 and PC1). Heads: ``random.Random(42).sample`` of the
model's heads, as the seeds drew them, or the ones given with ``head``.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import count, span
from qkdb.charts.figures.collage import build_collage, qk_gap
from qkdb.charts.data import head_label, model_table, rows
from qkdb.charts.style import fmt_num, fmt_pct

_STATS = """
select layer, head, pc, explained_variance, r_q, r_k
from {pca}
where model = $model and pc < 2 and list_contains($heads, printf('%d.%d', layer, head))
order by layer, head, pc
"""


def build(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, **opts) -> alt.ConcatChart:
    """Scatter of sampled Q and K points on PC0/PC1 for four heads (or the given ones)."""
    got: list[dict] = []

    def stats(con, model, heads):
        got.extend(rows(con, _STATS.format(pca=model_table(con, "pca", model)), {"model": model, "heads": [f"{l}.{h}" for l, h in heads]}))
        out: dict[tuple[int, int], list[str]] = {}
        for r in got:
            out.setdefault((r["layer"], r["head"]), []).append(
                f"PC{r['pc']}: EV {fmt_pct(r['explained_variance'], 1)} · r_q {fmt_num(r['r_q'])} · r_k {fmt_num(r['r_k'])}"
            )
        return out

    def caption(model, heads, data, lines):
        pc0 = [r for r in got if r["pc"] == 0]
        gaps = [abs(g) for g in (qk_gap(data, h) for h in heads) if g is not None]
        return (
            f"{count(len(heads), 'head')} of {model} ({', '.join(head_label(*h) for h in heads)}). "
            f"Along PC0 the Q and K clusters' means lie {span(gaps, lambda v: f'{v:.0f}')} units apart; "
            f"PC0 explains {span((r['explained_variance'] for r in pc0), lambda v: fmt_pct(v))} of each head's "
            f"combined variance and correlates with position at r_q {span((r['r_q'] for r in pc0), fmt_num)}, "
            f"r_k {span((r['r_k'] for r in pc0), fmt_num)}."
        )

    return build_collage(
        con, models, head, figure="pca-collage", x="pc0", y="pc1", x_title="PC0", y_title="PC1",
        stats=stats, caption=caption, title="Q/K on the first two principal components",
        subtitle="Combined Q/K PCA (seed 001): Q blue, K red, light = early, dark = late position",
    )

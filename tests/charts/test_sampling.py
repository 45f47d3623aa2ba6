"""Figures with a mark per head switch to a deterministic sample past MAX_HEAD_ROWS marks; their numbers stay exact.

The session's chart warehouse has 60 pooled heads (three models of 20) and 60 heads in the series'
three checkpoints. Each figure is built with its limit lowered below that, and checked against
the same figure unsampled and against numpy over every head of the base tables: the marks are the
first heads in ``hash(model, layer, head)`` order, the caption or subtitle says how many of how
many are drawn, and every statistic it prints (correlations, shares, lines, means) counts all.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkdb.charts import explorer as explorer_module
from qkdb.charts import style
from qkdb.charts.api import chart
from qkdb.charts.caption import text_of
from qkdb.charts.figures import bias_vs_separation, rq_vs_rk, series_phase_portraits

from helpers.chart_warehouse import POOLED_MODELS, SERIES
from helpers.specs import nodes

LIMIT = 7


def _heads_rows(spec: dict) -> list[dict]:
    """The dataset with one row per drawn head."""
    (got,) = [v for v in spec.get("datasets", {}).values() if v and "layer" in v[0] and "head" in v[0]]
    return got


def _subtitles(spec: dict) -> str:
    t = spec.get("title", {})
    return " ".join(t.get("subtitle", [])) if isinstance(t, dict) else ""


def _base(con, models: list[str]) -> list[dict]:
    """Per head from the base tables (no finding view), with DuckDB's hash order of the figures' sample."""
    cur = con.execute("""
        select h.model, m.family, h.layer, h.head, p.r_q, p.r_k, r.bias_strength, r.separation_strength,
               hash(h.model, h.layer, h.head) as k
        from heads h join models m on m.model = h.model
        join pca p on p.model = h.model and p.layer = h.layer and p.head = h.head and p.pc = 0
        join rotation r on r.model = h.model and r.layer = h.layer and r.head = h.head
        where list_contains($models, h.model)
    """, {"models": models})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _first(heads: list[dict], n: int) -> set[tuple]:
    return {(h["model"], h["layer"], h["head"]) for h in sorted(heads, key=lambda h: h["k"])[:n]}


def _keys(rows: list[dict]) -> set[tuple]:
    return {(r["model"], r["layer"], r["head"]) for r in rows}


def _sampled(monkeypatch, module, name: str, con, **opts) -> dict:
    monkeypatch.setattr(module, "MAX_HEAD_ROWS", LIMIT)
    return chart(name, con, **opts).to_dict()


def test_bias_vs_separation_samples_its_points_and_keeps_every_statistic_exact(con, monkeypatch):
    full = chart("bias-vs-separation", con).to_dict()
    spec = _sampled(monkeypatch, bias_vs_separation, "bias-vs-separation", con)
    heads = _base(con, POOLED_MODELS)
    n = len(heads)
    assert n > LIMIT
    # Unsampled: a mark per head and "every head"; sampled: LIMIT marks, the first in hash order, said so.
    assert _keys(_heads_rows(full)) == _keys(heads) and "every head" in _subtitles(full)
    drawn = _heads_rows(spec)
    assert len(drawn) == LIMIT and _keys(drawn) == _first(heads, LIMIT)
    assert f"{LIMIT:,} of {n:,} heads drawn, a deterministic sample (r, lines and means over all)" in _subtitles(spec)
    # Titles: r and n over every head, pooled and per family (numpy, from the base tables).
    titles = [p["title"]["text"] for p in spec["concat"]]
    x_all = np.array([h["bias_strength"] * 1e3 for h in heads])
    y_all = np.array([h["separation_strength"] for h in heads])
    assert titles[0] == f"all families, pooled: r = {style.fmt_r(np.corrcoef(x_all, y_all)[0, 1])} (n = {n})"
    lines = next(v for v in spec["datasets"].values() if v and "line" in v[0])
    means = next(v for v in spec["datasets"].values() if v and "line" not in v[0] and "layer" not in v[0])
    for fam in sorted({h["family"] for h in heads}):
        sub = [h for h in heads if h["family"] == fam]
        x = np.array([h["bias_strength"] * 1e3 for h in sub])
        y = np.array([h["separation_strength"] for h in sub])
        assert f"{fam}: r = {style.fmt_r(np.corrcoef(x, y)[0, 1])} (n = {len(sub)})" in titles
        # The family's least-squares line over all its heads, drawn across its whole range of bias.
        slope, intercept = np.polyfit(x, y, 1)
        ends = sorted((p["x"], p["y"]) for p in lines if p["family"] == fam)
        assert [e[0] for e in ends] == pytest.approx([x.min(), x.max()], rel=1e-12)
        assert [e[1] for e in ends] == pytest.approx([intercept + slope * x.min(), intercept + slope * x.max()], rel=1e-9)
        (mean,) = [m for m in means if m["family"] == fam]
        assert (mean["x"], mean["y"]) == pytest.approx((x.mean(), y.mean()), rel=1e-12)
    slope, intercept = np.polyfit(x_all, y_all, 1)
    pooled = sorted((p["x"], p["y"]) for p in lines if p["family"] is None)
    assert [e[1] for e in pooled] == pytest.approx([intercept + slope * x_all.min(), intercept + slope * x_all.max()],
                                                    rel=1e-9)
    # The axes reach every head, drawn or not; the statistics and the caption are the unsampled figure's.
    domain = next(e["scale"]["domain"] for n_ in nodes(spec) if isinstance(n_.get("encoding"), dict)
                  for ch, e in n_["encoding"].items() if ch == "x" and "scale" in e)
    assert domain[0] < x_all.min() and x_all.max() < domain[1]
    assert text_of(spec) == text_of(full)
    assert lines == next(v for v in full["datasets"].values() if v and "line" in v[0])


def test_rq_vs_rk_samples_its_points_and_counts_every_head(con, monkeypatch):
    spec = _sampled(monkeypatch, rq_vs_rk, "rq-vs-rk", con)
    heads = _base(con, POOLED_MODELS)
    drawn = _heads_rows(spec)
    assert len(drawn) == LIMIT and _keys(drawn) == _first(heads, LIMIT)
    caption = text_of(spec)
    assert f"{len(heads)} heads of 3 models ({LIMIT:,} drawn, a deterministic sample; shares count them all)" in caption
    assert f"{LIMIT:,} of {len(heads):,} heads drawn, a deterministic sample" in " ".join(spec["title"]["subtitle"])
    # The category shares over every head, by the thresholds in force (0.7 / 0.3).
    r_q = np.array([h["r_q"] for h in heads])
    r_k = np.abs([h["r_k"] for h in heads])
    pos_dom = np.mean((r_q > 0.7) & (r_k > 0.7))
    assert f"position-dominated {style.fmt_pct(pos_dom, 1)}" in caption
    monkeypatch.setattr(rq_vs_rk, "MAX_HEAD_ROWS", 10_000)
    unsampled = chart("rq-vs-rk", con).to_dict()
    assert len(_heads_rows(unsampled)) == len(heads) and "drawn" not in text_of(unsampled)


def test_phase_portraits_sample_across_checkpoints_and_keep_each_share(con, monkeypatch):
    spec = _sampled(monkeypatch, series_phase_portraits, "series-phase-portraits", con)
    models = [name for name, _ in SERIES]
    heads = _base(con, models)
    drawn = _heads_rows(spec)
    assert len(drawn) == LIMIT and _keys(drawn) == _first(heads, LIMIT)
    assert text_of(spec).startswith(f"{LIMIT:,} of {len(heads):,} heads drawn, a deterministic sample (the shares count them all)")
    # Each drawn checkpoint's header share counts all of its heads.
    for row in drawn:
        sub = [h for h in heads if h["model"] == row["model"]]
        share = np.mean([(h["r_q"] > 0.7) and abs(h["r_k"]) > 0.7 for h in sub])
        assert row["share_pd"] == pytest.approx(share, abs=1e-12)
    monkeypatch.setattr(series_phase_portraits, "MAX_HEAD_ROWS", 10_000)
    full = chart("series-phase-portraits", con).to_dict()
    assert len(_heads_rows(full)) == len(heads) and text_of(full).startswith(f"{len(heads):,} heads drawn over")


def test_the_explorer_reads_points_of_drawn_heads_from_the_first_models_only(con, monkeypatch):
    heads = _base(con, POOLED_MODELS)
    every = explorer_module.Explorer(con, POOLED_MODELS)
    assert {k for k in every.keys} == _first(heads, explorer_module.EXPLORER_HEADS)  # all drawn, all small models
    monkeypatch.setattr(explorer_module, "MAX_HEAD_ROWS", LIMIT)
    monkeypatch.setattr(explorer_module, "EXPLORER_SCAN_HEADS", 1)  # one model's points at most
    one = explorer_module.Explorer(con, POOLED_MODELS)
    first = min(heads, key=lambda h: h["k"])
    assert {m for m, _, _ in one.keys} == {first["model"]}
    assert one.keys == {k for k in _first(heads, LIMIT) if k[0] == first["model"]}
    assert {line.split(",")[0] for line in one.csv.splitlines()[1:]} == {str(POOLED_MODELS.index(first["model"]))}

"""Every figure of SPEC §7 on simulated data: spec round-trips, golden structure, real renders, errors.

The warehouse (session scope, built once) holds two standalone simulated models in two families
and three checkpoints of the registry's SmolLM3-3B series (stage1 40k, stage1 2.4M, lc-4k-to-32k
4k), the last with a planted collapse of the key drift slope. Checks of figure *content* compare
the chart data with values computed here from the base tables (numpy), not through the views.
"""

from __future__ import annotations

import json
import random
import re
import struct

import altair as alt
import numpy as np
import pytest

import qkdb
from qkdb.charts import registry, render, style
from qkdb.charts.caption import text_of
from qkdb.charts.api import chart
from qkdb.charts.data import ROW_LIMIT, parse_head
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES, ChartError
from qkdb.ingest.capture.simulate import read_planted

from helpers.chart_warehouse import HEAD_DIM, LAYERS, POOLED_MODELS, SERIES, SINK_SERIES, STANDALONE, VECTORS  # noqa: F401
from helpers.specs import nodes

# SPEC §7, in its order.
SPEC_NAMES = [
    "pc-roles", "rq-vs-rk", "depth-heatmap-rq", "depth-heatmap-rk", "explained-variance", "pca-collage",
    "ab-plane-collage", "drift-bars", "variance-decomposition", "bias-strength", "slope-ratio", "depth-heatmaps",
    "bias-vs-separation", "complement-collage", "frequency-usage", "series-position-signal", "series-taxonomy",
    "series-explained-variance", "series-depth-heatmap-rq", "series-depth-heatmap-rk", "series-phase-portraits",
    "series-trajectory", "series-bias-decomposition",
    "plasticity-profile", "plasticity-heatmap", "plasticity-by-taxonomy", "recency-check", "series-plasticity",
    "plasticity-vs-benchmark", "plasticity-retention", "sink-map", "sink-series", "sink-card",
]

@pytest.fixture(scope="session")
def con(chart_home):
    c = qkdb.api.connect(chart_home)
    yield c
    c.close()


@pytest.fixture(scope="session")
def sinks_con(sink_home):
    c = qkdb.api.connect(sink_home, read_only=True)
    yield c
    c.close()


@pytest.fixture(scope="session")
def con_of(con, sinks_con):
    """The warehouse a figure is drawn from: the attention figures have their own (planted sinks)."""
    return lambda name: sinks_con if registry.FIGURES[name].group == "attention" else con


@pytest.fixture(scope="session")
def specs(con_of) -> dict[str, dict]:
    return {name: chart(name, con_of(name)).to_dict(validate=True) for name in registry.FIGURES}


# --------------------------------------------------------------------------- helpers


def datasets(spec: dict) -> dict[str, list[dict]]:
    return spec.get("datasets", {})


def only_rows(spec: dict) -> list[dict]:
    ds = datasets(spec)
    assert len(ds) == 1, f"expected one dataset, got {list(ds)}"
    return next(iter(ds.values()))


def structure(node: dict) -> dict:
    """Composition, marks and encodings (channel=field:type, tooltips left out) of a spec."""
    for key in ("layer", "hconcat", "vconcat"):
        if key in node:
            return {key: [structure(n) for n in node[key]]}
    if "concat" in node:
        return {"concat": len(node["concat"]), "first": structure(node["concat"][0])}
    if "facet" in node:
        f = node["facet"]
        facet = {"facet": f["field"]} if "field" in f else {ch: v["field"] for ch, v in f.items()}
        return {"facet": facet, "spec": structure(node["spec"])}
    mark = node["mark"]["type"] if isinstance(node["mark"], dict) else node["mark"]
    enc = []
    for ch, e in sorted(node.get("encoding", {}).items()):
        if ch == "tooltip":
            continue
        if "field" in e:
            enc.append(f"{ch}={e['field']}:{e.get('type', '-')}")
        else:
            enc.append(f"{ch}={'datum' if 'datum' in e else 'value'}")
    return {"mark": mark, "encoding": enc}


def encodings(spec: dict, channel: str) -> list[dict]:
    return [n["encoding"][channel] for n in nodes(spec) if isinstance(n.get("encoding"), dict) and channel in n["encoding"]]


def title_texts(spec: dict) -> list[str]:
    out = []
    for n in nodes(spec):
        t = n.get("title")
        if isinstance(t, str):
            out.append(t)
        elif isinstance(t, dict):
            for k in ("text", "subtitle"):
                v = t.get(k)
                out.extend(v if isinstance(v, list) else [v] if isinstance(v, str) else [])
    return out


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def base_heads(con, where: str = "true") -> list[dict]:
    """Per head, straight from the base tables (no finding view): PC0 and rotation metrics."""
    cur = con.execute(f"""
        select h.model, m.family, m.series, m.series_order, h.layer, h.head, h.depth_bin,
               p.r_q, p.r_k, r.bias_strength, r.separation_strength, r.r_k_a, r.mu_q_a, r.alpha_k
        from heads h join models m on m.model = h.model
        join pca p on p.model = h.model and p.layer = h.layer and p.head = h.head and p.pc = 0
        join rotation r on r.model = h.model and r.layer = h.layer and r.head = h.head
        where {where}
    """)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


POOLED = ["sim-a-1b", "sim-b-2b", "smollm3-3b-lc-4k-to-32k-step-4000"]  # standalone + latest checkpoint


# --------------------------------------------------------------------------- registry and API


def test_registry_names_every_spec_figure():
    assert list(registry.FIGURES) == SPEC_NAMES
    for name, line in registry.listing():
        assert line and "\n" not in line
    assert {f.group for f in registry.FIGURES.values()} == set(registry.GROUPS)
    # Builders are named, imported when a figure is drawn: every name must lead to a function.
    assert all(callable(f.function()) for f in registry.FIGURES.values())


def test_unknown_figure_suggests_close_names(con):
    with pytest.raises(ChartError, match="Did you mean bias-strength"):
        chart("bias-strenght", con)


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_spec_round_trips(name, con_of, specs):
    built = chart(name, con_of(name))
    spec = specs[name]
    assert built.to_dict() == spec  # the same warehouse gives the same spec, byte for byte
    assert json.loads(built.to_json()) == spec
    # Altair re-loads the spec into the same chart. from_json/from_dict turn every data value into
    # an object (seconds for a collage), so the spec goes round with a few rows per dataset.
    cls = type(built)
    small = {**spec, "datasets": {k: v[:5] for k, v in datasets(spec).items()}}
    assert cls.from_json(json.dumps(small)).to_dict() == small  # from_json is from_dict of the parsed text
    assert spec["usermeta"]["qkdb"]["figure"] == name
    # The configured font exists on this machine's font stack and is the one every text uses.
    assert spec["config"]["font"] == style.FONT_STACK
    # Far below Altair's row limit by design, and no external data.
    for rows in datasets(spec).values():
        assert 0 < len(rows) <= ROW_LIMIT
    assert not any("url" in n for n in nodes(spec))


INTERACTIVE = [n for n, f in registry.FIGURES.items() if f.interactive]


def test_interactive_figures_are_the_cross_model_scatters():
    assert INTERACTIVE == ["rq-vs-rk", "bias-vs-separation"]


@pytest.mark.parametrize("name", INTERACTIVE)
def test_interactive_spec_round_trips_and_renders(name, con):
    built = chart(name, con, interactive=True)
    spec = built.to_dict(validate=True)
    assert built.to_dict() == spec
    small = {**spec, "datasets": {k: v[:5] if isinstance(v, list) else v for k, v in datasets(spec).items()}}
    assert type(built).from_json(json.dumps(small)).to_dict() == small
    # One selection over the outlined heads' layers, and the detail panels filtered by it.
    select = next(p for p in spec["params"] if p["name"] == "head_select")
    names = {n["name"] for n in nodes(spec) if isinstance(n.get("name"), str) and "mark" in n}
    assert select["views"] and set(select["views"]) <= names
    assert sum(1 for n in nodes(spec) if n.get("filter") == {"param": "head_select", "empty": False}) >= 3
    w, h = png_size(render.render(spec, "png", scale=1))
    assert 400 <= w <= 4000 and 250 <= h <= 4000


@pytest.mark.parametrize("name", INTERACTIVE)
def test_interactive_figure_without_stored_points_is_the_static_one(name, con, monkeypatch):
    """ingest --points 0 stores no points: nothing to link, and empty detail panels would make Vega warn."""
    from qkdb.charts import explorer

    monkeypatch.setattr(explorer, "EXPLORER_HEADS", 0)
    assert chart(name, con, interactive=True).to_dict() == chart(name, con).to_dict()


GOLDEN = {
    "pc-roles": {"layer": [
        {"mark": "bar", "encoding": ["color=kind:nominal", "x=pc_label:nominal", "xOffset=kind:nominal", "y=mean:quantitative"]},
        {"mark": "rule", "encoding": ["x=pc_label:nominal", "xOffset=kind:nominal", "y=lo:quantitative", "y2=hi:-"]},
        {"mark": "rule", "encoding": ["y=datum"]},
    ]},
    "rq-vs-rk": {"layer": [
        {"mark": "rule", "encoding": ["x=_xline:quantitative"]},
        {"mark": "rule", "encoding": ["y=_yline:quantitative"]},
        {"mark": "circle", "encoding": ["color=family:nominal", "x=r_q:quantitative", "y=r_k:quantitative"]},
    ]},
    "depth-heatmap-rq": {"layer": [
        {"mark": "rect", "encoding": ["color=value:quantitative", "x=depth_bin:ordinal", "y=model:nominal"]},
        {"mark": "text", "encoding": ["color=value", "text=value:quantitative", "x=depth_bin:ordinal", "y=model:nominal"]},
        {"mark": "rect", "encoding": ["x=depth_bin:ordinal", "y=model:nominal"]},  # cells without heads
        {"mark": "text", "encoding": ["text=sign:nominal", "x=depth_bin:ordinal", "y=model:nominal"]},
    ]},
    "explained-variance": {"layer": [
        {"mark": "bar", "encoding": ["x=pc_label:nominal", "y=mean:quantitative"]},
        {"mark": "rule", "encoding": ["x=pc_label:nominal", "y=lo:quantitative", "y2=hi:-"]},
        {"mark": "text", "encoding": ["text=mean:quantitative", "x=pc_label:nominal", "y=hi:quantitative"]},
        {"mark": "line", "encoding": ["x=pc_label:nominal", "y=cumulative:quantitative"]},
    ]},
    "pca-collage": {"concat": 4, "first": {"layer": [
        {"mark": "circle", "encoding": ["color=q_position:quantitative", "x=x:quantitative", "y=y:quantitative"]},
        {"mark": "circle", "encoding": ["fill=k_position:quantitative", "x=x:quantitative", "y=y:quantitative"]},
    ]}},
    # A panel per family (FamA, FamB, SmolLM3) and the pooled row: a vconcat, not a facet, whose
    # independent y made Vega warn in the browser.
    "drift-bars": {"vconcat": [{"layer": [
        {"mark": "bar", "encoding": ["color=kind:nominal", "x=drift:quantitative", "y=model:nominal", "yOffset=kind:nominal"]},
        {"mark": "tick", "encoding": ["x=pc0:quantitative", "y=model:nominal", "yOffset=kind:nominal"]},
    ]}] * 4},
    "variance-decomposition": {"layer": [
        {"mark": "bar", "encoding": ["color=part:nominal", "order=part_order:quantitative", "x=share:quantitative", "y=model:nominal"]},
        {"mark": "text", "encoding": ["detail=part:nominal", "order=part_order:quantitative", "text=share:quantitative", "x=share:quantitative", "y=model:nominal"]},
    ]},
    "bias-strength": {"facet": {"row": "panel"}, "spec": {"layer": [
        {"mark": "rect", "encoding": ["color=family:nominal", "x=x0:quantitative", "x2=x1:-", "y=count:quantitative", "y2=datum"]},
        {"mark": "rule", "encoding": ["x=datum"]},
    ]}},
    "slope-ratio": {"layer": [
        {"mark": "rule", "encoding": ["x=datum"]},
        {"mark": "text", "encoding": ["text=value", "x=datum", "y=value"]},  # "equal drift", by its line
        {"mark": "rule", "encoding": ["color=family:nominal", "x=q25_ratio:quantitative", "x2=q75_ratio:-", "y=model:nominal"]},
        {"mark": "circle", "encoding": ["color=family:nominal", "x=median_ratio:quantitative", "y=model:nominal"]},
        {"mark": "text", "encoding": ["text=median_ratio:quantitative", "x=median_ratio:quantitative", "y=model:nominal"]},
    ]},
    "depth-heatmaps": {"hconcat": [
        {"layer": [
            {"mark": "rect", "encoding": ["color=abs_r_k_a:quantitative", "x=depth_bin:ordinal", "y=model:nominal"]},
            {"mark": "text", "encoding": ["color=value", "text=abs_r_k_a:quantitative", "x=depth_bin:ordinal", "y=model:nominal"]},
            {"mark": "rect", "encoding": ["x=depth_bin:ordinal", "y=model:nominal"]},
            {"mark": "text", "encoding": ["text=sign:nominal", "x=depth_bin:ordinal", "y=model:nominal"]},
        ]},
        {"layer": [
            {"mark": "rect", "encoding": ["color=bias_e3:quantitative", "x=depth_bin:ordinal", "y=model:nominal"]},
            {"mark": "text", "encoding": ["color=value", "text=bias_e3:quantitative", "x=depth_bin:ordinal", "y=model:nominal"]},
            {"mark": "rect", "encoding": ["x=depth_bin:ordinal", "y=model:nominal"]},
            {"mark": "text", "encoding": ["text=sign:nominal", "x=depth_bin:ordinal", "y=model:nominal"]},
        ]},
    ]},
    # The pooled panel first (points, each family's line, the pooled line, the family means), then one per family.
    "bias-vs-separation": {"concat": 1 + 3, "first": {"layer": [
        {"mark": "circle", "encoding": ["color=family:nominal", "x=x:quantitative", "y=y:quantitative"]},
        {"mark": "line", "encoding": ["color=family:nominal", "x=x:quantitative", "y=y:quantitative"]},
        {"mark": "line", "encoding": ["x=x:quantitative", "y=y:quantitative"]},
        {"mark": "point", "encoding": ["color=family:nominal", "x=x:quantitative", "y=y:quantitative"]},
    ]}},
    "complement-collage": {"concat": (HEAD_DIM - 2) // 2, "first": {"layer": [
        {"mark": "circle", "encoding": ["color=q_position:quantitative", "x=c0:quantitative", "y=c1:quantitative"]},
        {"mark": "circle", "encoding": ["fill=k_position:quantitative", "x=c0:quantitative", "y=c1:quantitative"]},
    ]}},
    "series-position-signal": {"layer": [
        {"mark": "rect", "encoding": ["fill=phase:nominal", "x=checkpoint:nominal"]},
        {"mark": "rule", "encoding": ["color=kind:nominal", "x=checkpoint:nominal", "xOffset=kind:nominal", "y=lo:quantitative", "y2=hi:-"]},
        {"mark": "line", "encoding": ["color=kind:nominal", "x=checkpoint:nominal", "xOffset=kind:nominal", "y=mean:quantitative"]},
        {"mark": "text", "encoding": ["text=phase:nominal", "x=checkpoint:nominal", "y=value"]},
    ]},
    "series-taxonomy": {"layer": [
        {"mark": "bar", "encoding": ["color=category:nominal", "order=category_order:quantitative", "x=checkpoint:nominal", "y=fraction:quantitative"]},
        {"mark": "text", "encoding": ["detail=category:nominal", "opacity=value", "order=category_order:quantitative", "text=fraction:quantitative", "x=checkpoint:nominal", "y=fraction:quantitative"]},
    ]},
    "series-explained-variance": {"vconcat": [{"layer": [
        {"mark": "rect", "encoding": ["fill=phase:nominal", "x=checkpoint:nominal"]},
        {"mark": "rule", "encoding": ["color=pc_label:nominal", "x=checkpoint:nominal", "xOffset=pc_label:nominal", "y=lo:quantitative", "y2=hi:-"]},
        {"mark": "line", "encoding": ["color=pc_label:nominal", "strokeDash=pc_label:nominal", "x=checkpoint:nominal", "xOffset=pc_label:nominal", "y=mean:quantitative"]},
        {"mark": "text", "encoding": ["text=phase:nominal", "x=checkpoint:nominal", "y=value"]},
    ]}] * 2},
    "series-depth-heatmap-rk": {"layer": [
        {"mark": "rect", "encoding": ["color=value:quantitative", "x=depth_bin:ordinal", "y=checkpoint:nominal"]},
        {"mark": "text", "encoding": ["color=value", "text=value:quantitative", "x=depth_bin:ordinal", "y=checkpoint:nominal"]},
        {"mark": "rect", "encoding": ["x=depth_bin:ordinal", "y=checkpoint:nominal"]},
        {"mark": "text", "encoding": ["text=sign:nominal", "x=depth_bin:ordinal", "y=checkpoint:nominal"]},
    ]},
    "series-phase-portraits": {"facet": {"facet": "panel"}, "spec": {"layer": [
        {"mark": "rect", "encoding": ["x=datum", "x2=datum", "y=datum", "y2=datum"]},  # position-dominated corners
        {"mark": "rect", "encoding": ["x=datum", "x2=datum", "y=datum", "y2=datum"]},
        {"mark": "text", "encoding": ["text=value", "x=datum", "y=datum"]},
        {"mark": "rule", "encoding": ["x=_xline:quantitative"]},
        {"mark": "rule", "encoding": ["y=_yline:quantitative"]},
        {"mark": "circle", "encoding": ["color=category:nominal", "x=r_q:quantitative", "y=r_k:quantitative"]},
    ]}},
    "series-trajectory": {"facet": {"facet": "metric"}, "spec": {"layer": [
        {"mark": "rect", "encoding": ["fill=phase:nominal", "x=checkpoint:nominal"]},
        {"mark": "rule", "encoding": ["x=checkpoint:nominal", "y=p25:quantitative", "y2=p75:-"]},
        {"mark": "line", "encoding": ["x=checkpoint:nominal", "y=median:quantitative"]},
    ]}},
    "series-bias-decomposition": {"facet": {"facet": "panel"}, "spec": {"layer": [
        {"mark": "rect", "encoding": ["fill=phase:nominal", "x=checkpoint:nominal"]},
        {"mark": "line", "encoding": ["color=factor:nominal", "x=checkpoint:nominal", "y=value:quantitative"]},
    ]}},
}
GOLDEN.update({
    "plasticity-profile": {"facet": {"facet": "model"}, "spec": {"layer": [
        {"mark": "line", "encoding": ["detail=head:nominal", "x=x:quantitative", "y=ap:quantitative"]},
        {"mark": "line", "encoding": ["x=x:quantitative", "y=ap:quantitative"]}]}},
    "plasticity-heatmap": {"facet": {"facet": "model"}, "spec": {"layer": [
        {"mark": "rect", "encoding": ["color=ap:quantitative", "x=key_distance:ordinal", "y=query_distance:ordinal"]}]}},
    "plasticity-by-taxonomy": {"facet": {"facet": "family"}, "spec": {"layer": [
        {"mark": "boxplot", "encoding": ["color=category:nominal", "x=category:nominal", "y=ap:quantitative"]},
        {"mark": "tick", "encoding": ["color=category:nominal", "x=category:nominal", "y=ap:quantitative"]}]}},
    "recency-check": {"facet": {"facet": "panel"}, "spec": {"layer": [
        {"mark": "rule", "encoding": ["x=datum", "x2=datum", "y=datum", "y2=datum"]},
        {"mark": "circle", "encoding": ["color=family:nominal", "x=predicted:quantitative", "y=measured:quantitative"]}]}},
    "series-plasticity": {"facet": {"facet": "metric"}, "spec": {"layer": [
        {"mark": "rect", "encoding": ["fill=phase:nominal", "x=checkpoint:nominal"]},
        {"mark": "line", "encoding": ["x=checkpoint:nominal", "y=value:quantitative"]}]}},
    "frequency-usage": {"facet": {"facet": "model"}, "spec": {"layer": [
        {"mark": "rect", "encoding": ["color=mean_logit_share:quantitative", "x=j:ordinal", "y=layer:ordinal"]},
        {"mark": "rect", "encoding": ["x=j:ordinal", "y=layer:ordinal"]}]}},
})
GOLDEN["depth-heatmap-rk"] = GOLDEN["depth-heatmap-rq"]
# A point per model: exact matches filled circles, the others hollow diamonds, every point named.
GOLDEN["plasticity-vs-benchmark"] = {"layer": [
    {"mark": "circle", "encoding": ["color=family:nominal", "x=value:quantitative", "y=score:quantitative"]},
    {"mark": "point", "encoding": ["color=family:nominal", "x=value:quantitative", "y=score:quantitative"]},
    {"mark": "text", "encoding": ["text=model:nominal", "x=value:quantitative", "y=score:quantitative"]}]}
GOLDEN["plasticity-retention"] = {"layer": [
    {"mark": m, "encoding": [*enc, "x=ap_retention:quantitative", "y=score_retention:quantitative"]}
    for m, enc in (("circle", ["color=family:nominal"]), ("point", ["color=family:nominal"]), ("text", ["text=model:nominal"]))]}
GOLDEN["ab-plane-collage"] = GOLDEN["pca-collage"]
# A heatmap per model, the sink heads outlined; the sink rate and the weight on token 0 over the phases.
GOLDEN["sink-map"] = {"facet": {"facet": "model"}, "spec": {"layer": [
    {"mark": "rect", "encoding": ["color=mass_token0:quantitative", "x=head:ordinal", "y=layer:ordinal"]},
    {"mark": "rect", "encoding": ["x=head:ordinal", "y=layer:ordinal"]}]}}
GOLDEN["sink-series"] = {"layer": [
    {"mark": "rect", "encoding": ["fill=phase:nominal", "x=checkpoint:nominal"]},
    {"mark": "line", "encoding": ["color=what:nominal", "x=checkpoint:nominal", "y=value:quantitative"]},
    {"mark": "text", "encoding": ["text=phase:nominal", "x=checkpoint:nominal", "y=value"]}]}
GOLDEN["series-depth-heatmap-rq"] = GOLDEN["series-depth-heatmap-rk"]
# Rates by input kind per checkpoint (shape: estimator; ticks where a published rate matches), and per layer.
GOLDEN["sink-card"] = {"hconcat": [
    {"layer": [{"mark": "point", "encoding": ["color=input_kind:nominal", "shape=estimator:nominal", "x=rate:quantitative",
                                              "y=checkpoint:nominal", "yOffset=input_kind:nominal"]}]},
    {"mark": "line", "encoding": ["color=input_kind:nominal", "detail=checkpoint:nominal",
                                  "strokeDash=estimator:nominal", "x=layer:quantitative", "y=rate:quantitative"]}]}


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_golden_structure(name, specs):
    assert structure(specs[name]) == GOLDEN[name]


# --------------------------------------------------------------------------- faithful to the seeds


def test_q_blue_k_red(specs):
    for name in ("pc-roles", "drift-bars", "series-position-signal"):
        scales = [e["scale"] for e in encodings(specs[name], "color") if e.get("field") == "kind"]
        assert scales and all(s["domain"] == ["Q", "K"] and s["range"] == [style.Q_COLOR, style.K_COLOR] for s in scales)
    for name in ("pca-collage", "ab-plane-collage", "complement-collage"):
        q = [e["scale"]["scheme"]["name"] for e in encodings(specs[name], "color")]
        k = [e["scale"]["scheme"]["name"] for e in encodings(specs[name], "fill")]
        assert set(q) == {"blues"} and set(k) == {"reds"}
        # One field per kind: Vega-Lite merges two channels' legends when they share a field and domain.
        assert {e["field"] for e in encodings(specs[name], "color")} == {"q_position"}
        assert {e["field"] for e in encodings(specs[name], "fill")} == {"k_position"}


def test_collage_keeps_two_position_keys_when_q_and_k_positions_agree():
    """The bug: with equal Q and K position ranges the two keys merged into one blue bar."""
    from qkdb.charts.figures.collage import grid, panel

    data = [{"layer": 0, "head": 0, "kind": kind, "position": t, "example_id": 0, "x": t / 10 + (kind == "q"),
             "y": (kind == "q") * 5.0, "q_position": t if kind == "q" else None, "k_position": t if kind == "k" else None}
            for kind in ("q", "k") for t in range(0, 400, 4)]
    chart = style.configure(grid([panel(data, x_title="PC0", y_title="PC1", title="L0 H0", subtitle=[])]))
    svg = render.render(chart, "svg").decode()
    assert "Q position (token)" in svg and "K position (token)" in svg
    assert svg.count('class="mark-group role-legend"') == 2


def test_heatmaps_use_blues_and_reds_zero_to_one_with_annotations(specs):
    for name, scheme in (("depth-heatmap-rq", "blues"), ("depth-heatmap-rk", "reds"),
                         ("series-depth-heatmap-rq", "blues"), ("series-depth-heatmap-rk", "reds")):
        color = [e for e in encodings(specs[name], "color") if "field" in e][0]
        assert color["scale"]["scheme"] == scheme and color["scale"]["domain"] == [0.0, 1.0]
        assert encodings(specs[name], "text"), "cells are annotated"


def test_depth_heatmap_values_are_means_over_heads(con, specs):
    heads = base_heads(con)
    for name, col in (("depth-heatmap-rq", "r_q"), ("depth-heatmap-rk", "r_k")):
        rows = only_rows(specs[name])
        assert len(rows) == len(POOLED) * 10  # every cell is drawn, those without heads too
        got = {(d["model"], d["depth_bin"]): d["value"] for d in rows if d["n_heads"]}
        assert {m for m, _ in got} == set(POOLED)
        for (model, b), v in got.items():
            want = np.mean([h[col] for h in heads if h["model"] == model and h["depth_bin"] == b])
            assert v == pytest.approx(want, abs=1e-9)


def test_heatmap_cells_without_heads_say_why(con, specs):
    from qkdb.charts.figures.heatmap import complete

    # Five layers fall in depth bins 0, 2, 5, 7 and 9 (min(9, floor(10 · layer / 4))): the other bins
    # have no layer; a bin whose layers were not sampled is told apart.
    rows = [r for r in only_rows(specs["depth-heatmap-rq"]) if r["model"] == "sim-a-1b"]
    assert {r["depth_bin"] for r in rows if r["n_heads"]} == {0, 2, 5, 7, 9}
    assert {r["depth_bin"]: r["empty"] for r in rows if not r["n_heads"]} == {b: "no layer" for b in (1, 3, 4, 6, 8)}
    assert any("no layer at that depth" in t for t in title_texts(specs["depth-heatmap-rq"]))
    sampled = [r for r in rows if r["n_heads"] and r["depth_bin"] != 5]
    redone = {r["depth_bin"]: r["empty"] for r in complete(con, sampled, ["sim-a-1b"]) if not r["n_heads"]}
    assert redone[5] == "unsampled" and redone[4] == "no layer"


def test_rq_vs_rk_has_taxonomy_lines_and_family_colours(specs):
    spec = specs["rq-vs-rk"]
    calcs = [n["calculate"] for n in nodes(spec) if "calculate" in n]
    assert "[0.3, 0.7]" in calcs and "[-0.7, -0.3, 0.3, 0.7]" in calcs
    fam = [e for e in encodings(spec, "color") if e.get("field") == "family"][0]["scale"]
    assert fam["domain"] == ["FamA", "FamB", "SmolLM3"]
    assert fam["range"][2] == style.FAMILY_COLORS["SmolLM3"]
    assert len(only_rows(spec)) == len(POOLED) * LAYERS * 4


def test_bias_strength_is_scaled_by_1e3_per_family(con, specs):
    spec = specs["bias-strength"]
    rows = only_rows(spec)
    heads = base_heads(con, f"h.model in {tuple(POOLED)}")
    assert sum(r["count"] for r in rows) == len(heads)
    x = np.array([h["bias_strength"] for h in heads]) * 1e3
    lo, hi = min(r["x0"] for r in rows), max(r["x1"] for r in rows)
    assert lo <= 0 <= hi
    assert lo == pytest.approx(min(0, np.quantile(x, 0.005)), rel=1e-9)
    assert hi == pytest.approx(max(0, np.quantile(x, 0.995)), rel=1e-9)
    for fam in ("FamA", "FamB", "SmolLM3"):
        share = np.mean([h["bias_strength"] > 0 for h in heads if h["family"] == fam])
        panel = {r["panel"] for r in rows if r["family"] == fam}
        assert panel == {f"{fam} — {round(100 * share, 1)}% positive, n = {LAYERS * 4}"}
    assert encodings(spec, "x")[-1] == {"datum": 0}  # the zero line


def test_bias_vs_separation_titles_carry_within_family_r(con, specs):
    spec = specs["bias-vs-separation"]
    heads = base_heads(con, f"h.model in {tuple(POOLED)}")
    view = dict(con.execute("select family, r from bias_separation where scope = 'family'").fetchall())
    titles = [p["title"]["text"] for p in spec["concat"]]
    for fam in ("FamA", "FamB", "SmolLM3"):
        sub = [h for h in heads if h["family"] == fam]
        r = np.corrcoef([h["bias_strength"] for h in sub], [h["separation_strength"] for h in sub])[0, 1]
        assert r == pytest.approx(view[fam], abs=1e-9)  # the view agrees with numpy
        assert f"{fam}: r = {style.fmt_r(r)} (n = {len(sub)})" in titles
    overall = np.corrcoef([h["bias_strength"] for h in heads], [h["separation_strength"] for h in heads])[0, 1]
    assert titles[0] == f"all families, pooled: r = {style.fmt_r(overall)} (n = {len(heads)})"
    assert any(f"pooled r = {style.fmt_r(overall)}" in t for t in title_texts(spec))


def test_bias_vs_separation_shares_its_axes_and_draws_the_family_offsets(specs):
    spec = specs["bias-vs-separation"]
    # Every panel on the same explicit x and y ranges, so the families' offsets compare across panels.
    for channel in ("x", "y"):
        domains = {json.dumps(e["scale"]["domain"]) for e in encodings(spec, channel) if "scale" in e}
        assert len(domains) == 1
    rows = next(v for v in datasets(spec).values() if "layer" in v[0])  # the heads (the others: lines, means)
    lo, hi = json.loads(next(iter({json.dumps(e["scale"]["domain"]) for e in encodings(spec, "x") if "scale" in e})))
    assert lo <= min(r["x"] for r in rows) and max(r["x"] for r in rows) <= hi
    # The pooled panel's diamonds are the family means over every head.
    means = [n for n in nodes(spec["concat"][0]) if isinstance(n.get("mark"), dict) and n["mark"].get("shape") == "diamond"]
    assert len(means) == 1
    for fam in ("FamA", "FamB", "SmolLM3"):
        assert [r for r in rows if r["family"] == fam]
    assert not any("resolve" in n for n in nodes(spec))


def test_collages_show_the_seeds_random_42_heads(con, specs):
    heads = [tuple(r) for r in con.execute("select layer, head from heads where model = 'sim-a-1b'").fetchall()]
    want = random.Random(42).sample(sorted(heads), 4)
    for name in ("pca-collage", "ab-plane-collage"):
        spec = specs[name]
        shown = [parse_head(p["title"]["text"].replace("L", "").replace(" H", ".")) for p in spec["concat"]]
        assert shown == want
        assert "sim-a-1b" in spec["title"]["text"]
        rows = [r for rs in datasets(spec).values() for r in rs]
        assert len(rows) == 4 * 2 * VECTORS  # every stored point of the four heads (300 q + 300 k)
    # the collage heads are exactly the ones ingest stored complement scores for
    stored = {tuple(r) for r in con.execute(
        "select distinct layer, head from points where model = 'sim-a-1b' and c0 is not null").fetchall()}
    assert stored == set(want)


def test_collage_points_are_the_stored_projections(con, specs):
    rows = [r for rs in datasets(specs["ab-plane-collage"]).values() for r in rs]
    l, h = rows[0]["layer"], rows[0]["head"]
    stored = con.execute(
        "select kind, position, a, b from points where model = 'sim-a-1b' and layer = $l and head = $h", {"l": l, "h": h}
    ).fetchall()
    got = sorted((r["kind"], r["position"], r["x"], r["y"]) for r in rows if (r["layer"], r["head"]) == (l, h))
    assert got == sorted(stored)


def _strongest_ring_head(con, model: str) -> tuple[tuple[int, int], float, list[float]]:
    """Independently of the figure: the stored head whose best pair has the largest ρ² × ring, its strength, and every stored head's."""
    got = con.execute(
        "select layer, head, omega_r_squared, ring from complement where model = $m", {"m": model}).fetchall()
    stored = {tuple(r) for r in con.execute(
        "select distinct layer, head from points where model = $m and c0 is not null", {"m": model}).fetchall()}
    best: dict[tuple[int, int], float] = {}
    for layer, head, r2, ring in got:
        if (layer, head) in stored and r2 is not None and ring is not None:
            best[(layer, head)] = max(best.get((layer, head), -1.0), r2 * ring)
    head = max(best, key=best.get)
    return head, best[head], sorted(best.values(), reverse=True)


def test_complement_collage_defaults_to_the_stored_head_with_the_strongest_ring(con):
    # The seeds' random.Random(42) head of sim-a-1b is one of blobs; another stored head shows rings
    # (issue 32): the default is the strongest ring, and the caption says why that head.
    heads = [tuple(r) for r in con.execute("select layer, head from heads where model = 'sim-a-1b'").fetchall()]
    seeds_first = random.Random(42).sample(sorted(heads), 4)[0]
    for model in ("sim-a-1b", "sim-b-2b"):
        (layer, head), strength, all_best = _strongest_ring_head(con, model)
        built = chart("complement-collage", con, models=model)
        spec = built.to_dict()
        assert spec["title"]["text"].endswith(f"{model} L{layer} H{head}")
        caption = spec["usermeta"]["qkdb"]["caption"]
        assert caption.startswith(f"Head L{layer} H{head} of {model}, the strongest ring of the {len(all_best)} heads "
                                  "with stored complement scores (pair ")
        assert f"= {style.fmt_num(strength)}" in caption
        assert any("strongest ring" in t and "--head" in t for t in title_texts(spec))
        if model == "sim-a-1b":
            assert (layer, head) != seeds_first and all_best[0] > all_best[-1]
    # Asked for a head, it is drawn, and no choice is claimed.
    asked = chart("complement-collage", con, models="sim-a-1b", head=f"{seeds_first[0]}.{seeds_first[1]}").to_dict()
    assert asked["title"]["text"].endswith(f"L{seeds_first[0]} H{seeds_first[1]}")
    assert "strongest ring" not in asked["usermeta"]["qkdb"]["caption"]


def test_complement_collage_shows_the_test_strength_not_an_active_label(con, specs):
    spec = specs["complement-collage"]
    (layer, head), _, _ = _strongest_ring_head(con, "sim-a-1b")  # the default head
    assert spec["title"]["text"].endswith(f"sim-a-1b L{layer} H{head}")
    pairs = con.execute(
        "select pair, omega_r_squared, p_adjusted, active from complement where model = 'sim-a-1b' and layer = $l and head = $h "
        "order by pair", {"l": layer, "h": head}).fetchall()
    panels = spec["concat"]
    assert [p["title"]["text"] for p in panels] == [f"pair {pair}" for pair, *_ in pairs]
    for (pair, r2, p_adj, _), p in zip(pairs, panels):
        assert p["title"]["subtitle"][0] == f"ρ² {style.fmt_num(r2)} · {style.fmt_p(p_adj)}"
    # Titles darken with the effect size ρ², whatever the test says.
    order = sorted(zip(pairs, panels), key=lambda t: t[0][1])
    greys = [int(p["title"]["color"][1:3], 16) for _, p in order]
    assert greys == sorted(greys, reverse=True) and greys[0] > greys[-1]
    n_pass = sum(bool(a) for *_, a in pairs)
    assert n_pass, "the planted RoPE rings pass the test"
    assert f"{n_pass} of {len(pairs)} complement pairs pass the phase–position test" in spec["usermeta"]["qkdb"]["caption"]
    assert not any("active" in t for t in title_texts(spec))
    for p in panels:  # equal, symmetric axes: rings look round
        x, y = (p["layer"][0]["encoding"][c]["scale"]["domain"] for c in ("x", "y"))
        assert x == y and x[0] == -x[1] > -1e9


def test_slope_ratio_axis_fits_the_data_and_shows_the_equal_drift_line(con, specs):
    from qkdb.charts.figures.slope_ratio import _log_ticks

    spec = specs["slope-ratio"]
    rows = only_rows(spec)
    lo = min(min(r["q25_ratio"], r["median_ratio"]) for r in rows)
    hi = max(max(r["q75_ratio"], r["median_ratio"]) for r in rows)
    x = [e for e in encodings(spec, "x") if e.get("field") == "q25_ratio"][0]
    d0, d1 = x["scale"]["domain"]
    assert x["scale"]["type"] == "log" and x["scale"]["nice"] is False
    # Every bar, and ratio 1 (the dashed equal-drift line), inside the frame with a margin ...
    assert d0 < min(lo, 1.0) and d1 > max(hi, 1.0)
    # ... and no more than a margin: not a decade of empty axis (1-10 for data in 1.3-2.5).
    assert d0 >= min(lo, 1.0) / 1.3 and d1 <= max(hi, 1.0) * 1.3
    ticks = x["axis"]["values"]
    assert len(ticks) >= 3 and all(d0 <= t <= d1 for t in ticks) and 1 in ticks
    assert any("equal drift" in str(n.get("encoding", {}).get("text", {}).get("value", "")) for n in nodes(spec))
    # A narrow range gets ticks between 1 and 2, a wide one round decades.
    assert _log_ticks(1.2, 2.6) == [1.2, 1.5, 2, 2.5] and _log_ticks(0.05, 20) == [0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20]


def test_series_phase_colours_and_checkpoint_order(specs):
    for name in ("series-position-signal", "series-explained-variance", "series-trajectory", "series-bias-decomposition"):
        fill = [e for e in encodings(specs[name], "fill") if e.get("field") == "phase"][0]
        assert fill["scale"]["domain"] == ["stage1", "lc-4k-to-32k"]
        assert fill["scale"]["range"] == [style.PHASE_COLORS["stage1"], style.PHASE_COLORS["lc-4k-to-32k"]]
        x = [e for e in encodings(specs[name], "x") if e.get("field") == "checkpoint"][0]
        assert x["sort"] == ["stage1 40k", "stage1 2.4M", "lc-4k-to-32k 4k"]


def test_series_phase_portraits_draw_an_x_axis_per_panel_on_one_scale(specs):
    # A facet's shared x axes sit under every column of the last row, empty slots included; an axis
    # per panel does not. The scale stays shared, so the panels compare.
    spec = specs["series-phase-portraits"]
    assert spec["resolve"]["axis"]["x"] == "independent"
    assert "scale" not in spec["resolve"]


def test_series_trajectory_medians_and_iqr(con, specs):
    rows = only_rows(specs["series-trajectory"])
    for model, _ in SERIES:
        v = np.abs([h["r_k_a"] for h in base_heads(con, f"h.model = '{model}'")])
        got = next(r for r in rows if r["model"] == model and r["metric"].startswith("|r_k|"))
        assert got["median"] == pytest.approx(np.median(v), abs=1e-12)
        assert (got["p25"], got["p75"]) == pytest.approx((np.quantile(v, 0.25), np.quantile(v, 0.75)), abs=1e-12)


def test_series_bias_decomposition_reports_the_long_context_change(con, specs):
    spec = specs["series-bias-decomposition"]

    def mean_bias(model):
        return np.mean([h["bias_strength"] for h in base_heads(con, f"h.model = '{model}'")])

    base, last = mean_bias(SERIES[1][0]), mean_bias(SERIES[2][0])
    pct = 100 * (last - base) / abs(base)
    assert pct < -50  # planted: alpha_k collapses in long-context training
    panels = {r["panel"] for r in only_rows(spec)}
    assert f"bias strength ×10³ = product|{pct:+.0f}% vs stage1 2.4M".replace("-", "−") in panels


def test_sink_map_outlines_the_planted_sink_heads(sink_home, specs):
    last = SINK_SERIES[-1][0]
    planted = read_planted(sink_home.parent / last)["heads"]
    drawn = {(r["layer"], r["head"]): r for r in only_rows(specs["sink-map"]) if r["model"] == last}
    assert {k: bool(r["is_sink"]) for k, r in drawn.items()} == {
        (v["layer"], v["head"]): v["sink"] != "none" for v in planted.values()}
    assert {r["model"] for r in only_rows(specs["sink-map"])} == {last}  # the pooled checkpoint
    assert "Pooled sink rate (share of sink heads): toy-sinks-step-2000 75.0% of 12." in text_of(specs["sink-map"])


def test_sink_series_reads_the_planted_fractions_and_is_the_default_series_with_attention_mass(specs):
    rows = next(v for v in datasets(specs["sink-series"]).values() if "what" in v[0])
    rate = {r["model"]: r["value"] for r in rows if r["what"].startswith("sink rate")}
    # Gu et al.'s per-text rate: on 64-token texts a planted sink can fall below epsilon on a text, and
    # another head rise above it (tests/sql/test_sinks_planted.py checks it against the files)
    assert rate == {name: pytest.approx(fraction, abs=0.05) for name, fraction in SINK_SERIES}
    weight = {r["model"]: r["value"] for r in rows if r["what"].startswith("mean weight")}
    assert weight[SINK_SERIES[0][0]] < weight[SINK_SERIES[1][0]]


def test_sink_card_draws_the_views_rates_and_layers(sinks_con, specs):
    card = {r[0]: r[1:] for r in sinks_con.execute(
        "select model, sink_rate_per_text, sink_rate_pooled, layers, layer_rates from sink_card").fetchall()}
    rates, layers = (v for v in datasets(specs["sink-card"]).values())
    drawn = {(r["model"], r["estimator"]): r["rate"] for r in rates}
    assert drawn == {**{(m, "per text (Gu et al.)"): v[0] for m, v in card.items()},
                     **{(m, "pooled"): v[1] for m, v in card.items()}}
    assert {(r["model"], r["layer"]): r["rate"] for r in layers} == {
        (m, l): pytest.approx(r) for m, v in card.items() for l, r in zip(v[2], v[3])}
    text = text_of(specs["sink-card"])
    assert f"toy-sinks-step-2000 natural: {100 * card['toy-sinks-step-2000'][0]:.1f}% per text, 75.0% pooled" in text


def test_sink_figures_without_a_normaliser_say_what_to_capture(con):
    with pytest.raises(ChartError, match=r"no attention mass for sim-a-1b: .*qkdb sniff"):
        chart("sink-map", con, models="sim-a-1b")
    with pytest.raises(ChartError, match=r"no attention mass in this warehouse: .*qkdb sniff"):
        chart("sink-card", con)
    with pytest.raises(ChartError, match=r"no checkpoint of series 'smollm3-3b' has attention mass"):
        chart("sink-series", con, series="smollm3-3b")
    with pytest.raises(ChartError, match=r"no checkpoint of a training series has attention mass"):
        chart("sink-series", con)


def test_frequency_usage_draws_the_views_shares_and_outlines_each_layers_critical_plane(con, specs):
    spec = specs["frequency-usage"]
    cells = [r for rows in spec["datasets"].values() for r in rows if "mean_logit_share" in r]
    drawn = sorted({r["model"] for r in cells})
    assert drawn == sorted(POOLED_MODELS)  # (by default the pooled models, as every cross-model figure)
    want = con.execute("select model, layer, j, mean_logit_share, critical_plane from frequency_usage_by_layer "
                       "where list_contains(?, model) order by all", [drawn]).fetchall()
    assert sorted((r["model"], r["layer"], r["j"], r["mean_logit_share"], r["critical_plane"]) for r in cells) == want
    # The simulated models were "trained" over their 4,096 positions (θ = 10⁴, d = 32): critical plane 12
    assert {r["critical_plane"] for r in cells} == {12}
    outline = [layer for layer in spec["spec"]["layer"] if layer.get("transform")]
    assert outline[0]["transform"] == [{"filter": "datum.j == datum.critical_plane"}]
    assert "critical plane 12 of 16 at 4,096 tokens" in text_of(spec)
    # NoPE layers (layer 3 of the series checkpoints) have no rows
    assert not [r for r in cells if r["model"].startswith("smollm3") and r["layer"] == 3]


def test_models_option_restricts_and_facets(con):
    spec = chart("pc-roles", con, models=["sim-a-1b", "sim-b-2b"]).to_dict()
    assert spec["facet"]["field"] == "panel"
    assert {r["panel"] for r in only_rows(spec)} == {"sim-a-1b", "sim-b-2b"}
    heat = chart("depth-heatmap-rq", con, models="sim-b-2b").to_dict()
    assert {r["model"] for r in only_rows(heat)} == {"sim-b-2b"}


def test_head_option_picks_collage_heads(con):
    spec = chart("pca-collage", con, models="sim-b-2b", head=["2.1", "l04h03"]).to_dict()
    assert [p["title"]["text"] for p in spec["concat"]] == ["L2 H1", "L4 H3"]


# --------------------------------------------------------------------------- errors


def test_figures_the_data_cannot_support_say_what_to_ingest(bare_home, con):
    bare = qkdb.api.connect(bare_home)
    try:
        for name in (n for n, f in registry.FIGURES.items() if f.scope == "series"):
            with pytest.raises(ChartError, match=r"no training series is ingested; ingest the checkpoints"):
                chart(name, bare)
        assert chart("pc-roles", bare).to_dict()  # cross-model figures work with one model
    finally:
        bare.close()
    with pytest.raises(ChartError, match=r"series 'nope' is not ingested \(ingested series: smollm3-3b\)"):
        chart("series-trajectory", con, series="nope")
    without = next(f"{l}.{h}" for l, h in con.execute(
        "select distinct layer, head from points where model = 'sim-a-1b' and c0 is null order by 1, 2").fetchall())
    with pytest.raises(ChartError, match=r"has no stored complement scores .*--collage-heads l\d\dh\d\d --force"):
        chart("complement-collage", con, models="sim-a-1b", head=without)
    with pytest.raises(ChartError, match=r"model\(s\) not ingested: llama3.2-3b"):
        chart("rq-vs-rk", con, models="llama3.2-3b")
    with pytest.raises(ChartError, match=r"cannot read head 'twelve'"):
        chart("pca-collage", con, head="twelve")
    with pytest.raises(ChartError, match=r"head\(s\) 40.1 of model 'sim-a-1b' are not ingested"):
        chart("ab-plane-collage", con, models="sim-a-1b", head="40.1")
    with pytest.raises(ChartError, match="shows one model"):
        chart("pca-collage", con, models=["sim-a-1b", "sim-b-2b"])


def test_the_exit_code_of_an_unsupported_figure_is_the_one_docs_figures_md_states(runner, bare_home, chart_home, tmp_path):
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "figures.md").read_text()
    section = doc.split("## When the data cannot support a figure", 1)[1].split("\n## ", 1)[0]
    stated = int(re.search(r"exit code (\d+)", section).group(1))
    assert stated == EXIT_CODES["not_found"]
    con = qkdb.api.connect(chart_home, read_only=True)
    try:
        without = next(f"{l}.{h}" for l, h in con.execute(
            "select distinct layer, head from points where model = 'sim-a-1b' and c0 is null order by 1, 2").fetchall())
    finally:
        con.close()
    cases = [  # the page's cases, in its order
        ["chart", "rq-vs-rk", "--home", str(tmp_path / "empty")],  # no model ingested
        ["chart", "series-taxonomy", "--home", str(bare_home)],  # no training series
        ["chart", "complement-collage", "--model", "sim-a-1b", "--head", without, "--home", str(chart_home)],
        ["chart", "complement-collage", "--model", "sim-a-1b", "--head", "40.1", "--home", str(chart_home)],
        ["chart", "rq-vs-rk", "--model", "llama3.2-3b", "--home", str(chart_home)],
        ["chart", "series-trajectory", "--series", "nope", "--home", str(chart_home)],
    ]
    for args in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == stated, (args, result.output)
        assert result.stderr.startswith("error: ") and result.stdout == ""


def test_empty_warehouse(tmp_path):
    empty = qkdb.api.connect(tmp_path / "empty", read_only=False)  # (created by a writer: readers never do)
    try:
        for name in registry.FIGURES:
            with pytest.raises(ChartError, match="no model is ingested|no training series"):
                chart(name, empty)
    finally:
        empty.close()


# --------------------------------------------------------------------------- rendering


def test_every_figure_renders_to_png(con, specs, tmp_path):
    for name, spec in specs.items():
        data = render.render(spec, "png", scale=1)
        w, h = png_size(data)
        assert 250 <= w <= 4000 and 150 <= h <= 4000, (name, w, h)
        assert len(data) > 5000, name


def test_save_by_extension(con, tmp_path):
    fig = chart("bias-vs-separation", con)
    svg = render.save(fig, tmp_path / "f.svg").read_text()
    assert svg.startswith("<svg") and "font-family=\"DejaVu Sans" in svg and "r = " in svg
    assert render.save(fig, tmp_path / "f.pdf").read_bytes()[:5] == b"%PDF-"
    spec = json.loads(render.save(fig, tmp_path / "f.json").read_text())
    assert alt.ConcatChart.from_dict(spec).to_dict() == spec
    page = render.save(fig, tmp_path / "f.html").read_text()
    assert "vegaEmbed" in page and not re.search(r"<script[^>]+src=", page) and "<link" not in page
    with pytest.raises(ChartError, match=r"extension picks the format"):
        render.save(fig, tmp_path / "f.gif")
    with pytest.raises(ChartError, match=r"does not exist"):
        render.save(fig, tmp_path / "missing" / "f.png")


# --------------------------------------------------------------------------- CLI


def test_cli_list(runner):
    result = runner.invoke(app, ["chart", "--list"])
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == SPEC_NAMES


def test_cli_chart_writes_files_and_json(runner, chart_home, tmp_path):
    out = tmp_path / "heat.png"
    result = runner.invoke(app, ["chart", "depth-heatmap-rk", "-o", str(out), "--home", str(chart_home), "--scale", "1"])
    assert result.exit_code == 0, result.output
    assert png_size(out.read_bytes())[0] > 300
    result = runner.invoke(app, ["chart", "ab-plane-collage", "--model", "sim-b-2b", "--head", "1.0", "--home", str(chart_home)])
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)
    assert [p["title"]["text"] for p in spec["concat"]] == ["L1 H0"]
    result = runner.invoke(app, ["chart", "series-trajectory", "--series", "smollm3-3b", "-o", str(tmp_path / "t.svg"),
                                 "--home", str(chart_home)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.svg").read_text().startswith("<svg")


def test_cli_errors_are_one_line(runner, bare_home):
    result = runner.invoke(app, ["chart", "series-taxonomy", "--home", str(bare_home)])
    assert result.exit_code == EXIT_CODES["not_found"]
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and "no training series is ingested" in result.stderr
    result = runner.invoke(app, ["chart", "nope", "--home", str(bare_home)])
    assert result.exit_code == EXIT_CODES["not_found"] and "qkdb chart --list" in result.stderr


def test_slope_ratio_legend_lists_all_models_only_where_that_row_is_drawn(specs, bare_home):
    def legend(spec):
        (color,) = {json.dumps(e["scale"]["domain"]) for e in encodings(spec, "color") if e.get("field") == "family"}
        return json.loads(color)

    assert "all models" in legend(specs["slope-ratio"])  # several models: the pooled row is drawn
    con = qkdb.api.connect(bare_home, read_only=True)
    try:
        solo = chart("slope-ratio", con).to_dict(validate=True)
    finally:
        con.close()
    assert legend(solo) == ["Solo"]


# A line that ends on one of these broke a phrase in two (issue 47: "... bold: the" / "mean over every head").
DANGLING = {"the", "a", "an", "of", "and", "or", "to", "in", "on", "by", "with", "for", "its", "per", "from", "as", "at"}


def _subtitles(spec) -> list[str]:
    found = []
    if isinstance(spec, dict):
        title = spec.get("title")
        if isinstance(title, dict):
            sub = title.get("subtitle")
            found += [sub] if isinstance(sub, str) else list(sub or [])
        for v in spec.values():
            found += _subtitles(v)
    elif isinstance(spec, list):
        for v in spec:
            found += _subtitles(v)
    return found


def test_no_subtitle_line_breaks_a_phrase(specs):
    broken = [(name, line) for name, spec in specs.items() for line in _subtitles(spec)
              if line.rstrip(" ,;:(").split() and line.rstrip(" ,;:(").split()[-1].lower() in DANGLING]
    assert broken == []

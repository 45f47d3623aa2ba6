"""The figures' specs are the same with cheap_copies (qkdb.charts.altair_copy) as with Altair's own deep copies."""

from __future__ import annotations

import json

import pytest

from qkdb.charts import altair_copy, registry
from qkdb.charts.api import chart

from helpers.chart_warehouse import POOLED_MODELS, SINK_SERIES


def _variants(name: str) -> list[dict]:
    fig = registry.FIGURES[name]
    out = [{}]
    if fig.interactive:
        out.append({"interactive": True})
    if fig.scope == "models":
        out.append({"models": [m for m, _ in SINK_SERIES] if fig.group == "attention" else POOLED_MODELS[:2]})
    return out


def _spec(con, name: str, opts: dict) -> str:
    return json.dumps(chart(name, con, **opts).to_dict(validate=True))


@pytest.mark.parametrize("name", list(registry.FIGURES))
def test_every_figure_is_the_same_with_cheap_copies_as_with_altairs(con, sink_con, monkeypatch, name):
    con = sink_con if registry.FIGURES[name].group == "attention" else con
    cheap = [_spec(con, name, o) for o in _variants(name)]
    with monkeypatch.context() as m:
        m.setattr(altair_copy, "_schemapi", lambda: None)  # Altair's own copies, constructors and all
        theirs = [_spec(con, name, o) for o in _variants(name)]
    assert cheap == theirs


def test_cheap_copies_restores_altairs_copy_on_leaving_and_copies_deeply():
    import altair as alt
    from altair.utils import schemapi

    before = schemapi._deep_copy
    base = alt.Chart().mark_point().encode(x="a:Q", tooltip=[alt.Tooltip("a:Q")])
    with altair_copy.cheap_copies():
        assert schemapi._deep_copy is not before
        with altair_copy.cheap_copies():
            layered = alt.layer(base, base.mark_line()).properties(width=100)
        assert schemapi._deep_copy is not before  # nested: the outer use still holds it
        copied = layered.copy()
    assert schemapi._deep_copy is before
    # A deep copy shares no mutable part with its original.
    copied.layer[0].encoding.tooltip[0]["title"] = "changed"
    assert layered.layer[0].encoding.tooltip[0]._get("title") is alt.Undefined
    assert copied.to_dict() != layered.to_dict() and layered.to_dict()["width"] == 100

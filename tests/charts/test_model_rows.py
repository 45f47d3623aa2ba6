"""Figures with a row or panel per model draw at most MAX_MODEL_ROWS models by default; their numbers cover all.

The session's chart warehouse has three pooled models in three families (FamA, FamB, SmolLM3) and
three checkpoints of the SmolLM3 series. Each figure is built with the limit lowered below that and
compared with the same figure unlowered: the drawn rows are the first models of the families, the
subtitle says how many of how many, and the caption (ranges, extremes, counts) is the full figure's.
"""

from __future__ import annotations

import pytest

from qkdb.charts import data as chart_data
from qkdb.charts.api import chart
from qkdb.charts.caption import text_of
from qkdb.charts.data import drawn_models, ingested

from helpers.chart_warehouse import POOLED_MODELS
from helpers.specs import nodes

PER_MODEL = ("drift-bars", "slope-ratio", "variance-decomposition", "depth-heatmap-rq", "depth-heatmap-rk",
             "depth-heatmaps")


def _models_drawn(spec: dict) -> set[str]:
    return {r["model"] for v in spec.get("datasets", {}).values() for r in v if isinstance(r, dict) and "model" in r}


def _subtitle(spec: dict) -> str:
    t = spec.get("title", {})
    return " ".join(t.get("subtitle", [])) if isinstance(t, dict) else ""


def _sorts(spec: dict) -> list[list]:
    return [e["sort"] for n in nodes(spec) if isinstance(n.get("encoding"), dict)
            for ch, e in n["encoding"].items() if ch == "y" and isinstance(e, dict) and isinstance(e.get("sort"), list)]


@pytest.mark.parametrize("name", PER_MODEL)
def test_a_per_model_figure_draws_the_first_models_past_the_limit_and_keeps_its_caption(con, monkeypatch, name):
    full = chart(name, con).to_dict()
    assert set(POOLED_MODELS) <= _models_drawn(full) and "models drawn" not in _subtitle(full)
    monkeypatch.setattr(chart_data, "MAX_MODEL_ROWS", 2)
    spec = chart(name, con).to_dict()
    # Three families over a limit of two: the first model of the first two families, in display order.
    first_two = [i.model for i in ingested(con) if i.model in POOLED_MODELS][:2]
    assert _models_drawn(spec) - {"all models"} == set(first_two)
    assert "2 of 3 models drawn, the first of each of the first 2 families" in _subtitle(spec)
    assert all(s[:2] == first_two and POOLED_MODELS[2] not in s for s in _sorts(spec))
    assert text_of(spec) == text_of(full)
    # Models the user names are all drawn, whatever the limit.
    named = chart(name, con, models=POOLED_MODELS).to_dict()
    assert set(POOLED_MODELS) <= _models_drawn(named) and "models drawn" not in _subtitle(named)


def test_drawn_models_keeps_every_family_and_as_many_of_each_as_the_limit_allows(con, monkeypatch):
    everything = [i.model for i in ingested(con)]  # FamA, FamB and SmolLM3's three checkpoints
    assert drawn_models(con, everything).models == everything  # under the limit: all of them, no note
    assert drawn_models(con, everything).note == ""
    monkeypatch.setattr(chart_data, "MAX_MODEL_ROWS", 4)
    got = drawn_models(con, everything)
    family = {i.model: i.family for i in ingested(con)}
    smol = [m for m in everything if family[m] == "SmolLM3"]
    assert got.models == [m for m in everything if family[m] != "SmolLM3" or m in smol[:2]]
    assert got.note.startswith("4 of 5 models drawn, the first 2 of each family;")
    assert drawn_models(con, everything, given=everything).models == everything


def test_phase_portraits_draw_evenly_spaced_checkpoints_past_the_limit_with_exact_shares(con, monkeypatch):
    from helpers.chart_warehouse import SERIES
    from qkdb.charts.figures import series_phase_portraits as spp

    assert spp.evenly_spaced(list(range(10)), 4) == [0, 3, 6, 9]
    assert spp.evenly_spaced(list(range(3)), 5) == [0, 1, 2]
    full = chart("series-phase-portraits", con).to_dict()
    monkeypatch.setattr(spp, "MAX_PANELS", 2)
    spec = chart("series-phase-portraits", con).to_dict()
    first_last = {SERIES[0][0], SERIES[-1][0]}
    assert len(SERIES) == 3
    drawn = {r["model"] for v in spec["datasets"].values() for r in v if "share_pd" in r}
    assert drawn == first_last
    assert "3 checkpoints (" in _subtitle(spec) and "2 of them drawn, evenly spaced in training order" in _subtitle(spec)
    # Each drawn panel's share counts all of its checkpoint's heads, as in the full figure.
    def shares(s):
        return {r["model"]: r["share_pd"] for v in s["datasets"].values() for r in v if "share_pd" in r}
    assert shares(spec) == {m: v for m, v in shares(full).items() if m in first_last}
    assert len(spec["facet"]["sort"]) == 2 and len(full["facet"]["sort"]) == 3  # the panels

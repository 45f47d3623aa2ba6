"""The charts' session warehouses, built once and shared by the chart, report and browser tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import qkdb
from qkdb.ingest.capture.simulate import simulate

from helpers.chart_warehouse import build_chart_warehouse, build_sink_warehouse

_CACHE: dict[str, Path] = {}


@pytest.fixture(scope="session")
def chart_home(tmp_path_factory) -> Path:
    if "full" not in _CACHE:
        _CACHE["full"] = build_chart_warehouse(tmp_path_factory.mktemp("charts"))
    return _CACHE["full"]


@pytest.fixture(scope="module")
def con(chart_home):
    """The chart warehouse, read-only (a test module may define its own ``con``)."""
    c = qkdb.api.connect(chart_home, read_only=True)
    yield c
    c.close()


@pytest.fixture(scope="session")
def sink_home(tmp_path_factory) -> Path:
    """A toy series of short texts captured whole, with planted attention sinks (the sinks' figures)."""
    if "sinks" not in _CACHE:
        _CACHE["sinks"] = build_sink_warehouse(tmp_path_factory.mktemp("charts-sinks"))
    return _CACHE["sinks"]


@pytest.fixture(scope="module")
def sink_con(sink_home):
    c = qkdb.api.connect(sink_home, read_only=True)
    yield c
    c.close()


@pytest.fixture(scope="session")
def bare_home(tmp_path_factory) -> Path:
    """One standalone model and nothing else: no series."""
    if "bare" not in _CACHE:
        root = tmp_path_factory.mktemp("charts-bare")
        ds = simulate(root / "solo", layers=3, q_heads=2, kv_heads=1, head_dim=16, vectors=200, model="solo",
                      family="Solo", seed=5, workers=1)
        qkdb.api.ingest(ds, "solo", family="Solo", gqa_ratio=2, n_layers=3, workers=1, home=root / "home")
        _CACHE["bare"] = root / "home"
    return _CACHE["bare"]


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory) -> Path:
    """The bundled real sample, ingested as ``qkdb demo`` ingests it."""
    if "demo" not in _CACHE:
        from qkdb.ingest import SAMPLE_MODEL, sample_path

        home = tmp_path_factory.mktemp("charts-demo") / "home"
        with sample_path() as sample:
            qkdb.api.ingest(path=sample, model=SAMPLE_MODEL, home=home, workers=1, source="sample")
        _CACHE["demo"] = home
    return _CACHE["demo"]

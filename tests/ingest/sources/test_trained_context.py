"""A model's trained context L_train (SPEC §4.8): where it comes from, in order, and the frequencies trained over it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import qkdb
from qkdb.ingest.capture.simulate import simulate
from qkdb.ingest.engine.plane_layout import layer_layout, trained_frequencies
from qkdb.ingest.metrics.frequency_usage import critical_plane
from qkdb.ingest.metrics.rope_planes import rope_frequencies
from qkdb.ingest.sources import registry, trained_context
from qkdb.ingest.sources.layout import read_metadata, write_metadata
from qkdb.ingest.sources.registry import ModelSpec


def test_the_option_wins_over_everything():
    spec = trained_context.resolve(registry.lookup("qwen3-4b"), option=1234)
    assert (spec.trained_context, spec.trained_context_source) == (1234, "option")


@pytest.mark.parametrize("name,want", [("qwen3-4b", 32768), ("llama3.2-1b", 8192), ("llama3.1-8b", 8192),
                                       ("ministral3-8b", 16384)])
def test_scaled_rope_gives_its_original_length(name, want):
    spec = trained_context.resolve(registry.lookup(name))
    assert (spec.trained_context, spec.trained_context_source) == (want, "rope_scaling")


def test_registry_models_without_a_scaling_use_the_registry_with_its_reason():
    spec = trained_context.resolve(registry.lookup("mistral-v0.2-7b"))
    assert spec.trained_context == 32768 and "benchmarks/README.md" in spec.trained_context_source
    stages = {s.phase: trained_context.resolve(s).trained_context for s in registry.series_models("smollm3-3b")}
    assert stages == {"stage1": 4096, "stage2": 4096, "stage3": 4096, "lc-4k-to-32k": 32768, "lc-32k-to-64k": 65536}


def test_an_unknown_model_has_none_and_a_note_saying_how_to_give_it():
    spec = trained_context.resolve(ModelSpec(model="mine", rope_theta=1e4))
    assert spec.trained_context is None and spec.trained_context_source is None
    (note,) = trained_context.note(spec)
    assert "--trained-context" in note and "mine" in note
    assert trained_context.note(replace(spec, rope="none")) == []


def test_a_capture_records_its_configs_length_and_the_original_under_scaled_rope():
    assert trained_context.record(8192, None) == {
        "trained_context": 8192, "trained_context_source": "config: max_position_embeddings"}
    scaled = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    assert trained_context.record(131072, scaled)["trained_context"] == 8192
    assert trained_context.record(None, None) == {} and trained_context.record(True, None) == {}


def test_llama_3_1_trains_its_base_frequencies_over_the_original_length():
    """The applied (llama3-scaled) frequencies are the extension's: the critical plane is Liu et al.'s from the
    base ones over 8,192 tokens (35 of 64), where the scaled ones would put it earlier."""
    spec = trained_context.resolve(registry.lookup("llama3.1-8b"))
    applied = np.asarray(layer_layout(spec, 0, 128).omega)
    trained = np.asarray(trained_frequencies(spec, 0, 128))
    np.testing.assert_allclose(trained, rope_frequencies(128, 500000.0), rtol=1e-15)
    assert not np.allclose(applied, trained)
    turns = trained * 8192 / (2 * np.pi)
    assert critical_plane(turns, trained) == 35
    assert critical_plane(applied * 8192 / (2 * np.pi), applied) < 35
    # Without a scaling (or with the trained context not the original length) the applied ones are trained
    assert trained_frequencies(trained_context.resolve(registry.lookup("mistral-v0.2-7b")), 0, 128) is None
    assert trained_frequencies(replace(spec, trained_context=131072), 0, 128) is None


def test_an_ingest_records_it_and_a_dataset_of_a_registry_name_fills_it(tmp_path):
    ds = simulate(tmp_path / "sim", layers=1, q_heads=2, kv_heads=1, head_dim=16, vectors=200, max_position=1000,
                  model="mistral-v0.2-7b", seed=1, workers=1)
    assert read_metadata(ds)["trained_context"] == 1000
    home = tmp_path / "home"
    qkdb.api.ingest(ds, "mistral-v0.2-7b", gqa_ratio=2, n_layers=1, workers=1, home=home)
    with qkdb.connect(home) as con:
        row = con.execute("select trained_context, trained_context_source from models").fetchone()
        crit = con.execute("select distinct critical_plane from frequency_usage").fetchall()
    # (the dataset describes its vectors: its length wins over the registry's 32,768)
    assert row == (1000, "simulate: max_position")
    omega = rope_frequencies(16, 10000.0)
    assert crit == [(critical_plane(omega * 1000 / (2 * np.pi), omega),)]
    # An option wins over the dataset, and changes the ingest's fingerprint (a re-ingest is not skipped)
    qkdb.api.ingest(ds, "mistral-v0.2-7b", gqa_ratio=2, n_layers=1, workers=1, home=home, trained_context=64)
    with qkdb.connect(home) as con:
        assert con.execute("select trained_context, trained_context_source from models").fetchone() == (64, "option")
        assert con.execute("select distinct critical_plane from frequency_usage").fetchall() == [(3,)]  # ω₃ < 2π/64


def test_a_dataset_without_it_gets_shares_a_note_and_no_critical_plane(tmp_path):
    ds = simulate(tmp_path / "sim", layers=1, q_heads=2, kv_heads=1, head_dim=16, vectors=200, seed=1, workers=1)
    meta = read_metadata(ds)
    del meta["trained_context"], meta["trained_context_source"]
    write_metadata(ds, meta)
    home = tmp_path / "home"
    result = qkdb.api.ingest(ds, "nameless", family="X", gqa_ratio=2, n_layers=1, workers=1, home=home)
    assert any("trained context is not known" in n for n in result.notes)
    with qkdb.connect(home) as con:
        assert con.execute("select count(*), count(critical_plane), count(logit_share) from frequency_usage").fetchone() == (16, 0, 16)

"""RoPE layouts: which dims rotate, how they pair, at which frequencies — against planted truth.

Partial rotary (GPT-NeoX/Pythia, Phi, StableLM turn the first r dims), an MLA-style slice at the end
of the head, interleaved pairing, recorded frequencies (a capture's ``inv_freq``), the registry's
scaling, and frequencies that depend on the text's length (fitted, never derived).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import qkdb
from qkdb.errors import InputError
from qkdb.ingest.engine.plane_layout import (
    RopeLayout, check_rope, layer_layout, model_layouts, reconcile_options, same_layouts,
)
from qkdb.ingest.metrics.rope_planes import rope_frequencies, rope_planes
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.sources import registry
from qkdb.ingest.sources.layout import write_head, write_metadata
from qkdb.ingest.sources.registry import ModelSpec

from helpers.rope import apply_rope

THETA = 10000.0


def _spec(**kw) -> ModelSpec:
    return ModelSpec(model="m", n_layers=3, **{"rope_theta": THETA, **kw})


# ------------------------------------------------------------------ resolution


def test_full_rotary_derives_frequencies_over_every_dim():
    lay = layer_layout(_spec(), 0, 16)
    assert (lay.pairing, lay.offset, lay.dims, lay.source) == ("half", 0, 16, "derived")
    np.testing.assert_allclose(lay.omega, THETA ** (-np.arange(0, 16, 2) / 16), rtol=1e-15)


def test_partial_rotary_uses_the_rotated_dims_own_frequency_grid():
    # transformers: inv_freq = theta^(-2j/r) over the r = int(d * factor) rotated dims, not over d
    for spec in (_spec(rotary_dims=4), _spec(rope_scaling=json.dumps({"partial_rotary_factor": 0.25}))):
        lay = layer_layout(spec, 1, 16)
        assert (lay.dims, lay.offset) == (4, 0)
        np.testing.assert_allclose(lay.omega, [1.0, THETA ** -0.5], rtol=1e-15)


def test_recorded_frequencies_win_and_per_layer_ones_apply_to_their_layer():
    glob, local = (0.5, 0.05), (0.9, 0.3)
    spec = _spec(rotary_dims=4, rotary_offset=12, rope_inv_freq=glob, layer_rope_inv_freq=(local, None, glob))
    assert layer_layout(spec, 0, 16) == RopeLayout("half", 12, 4, local, "recorded")
    assert layer_layout(spec, 1, 16) == RopeLayout("half", 12, 4, glob, "recorded")  # a NoPE layer: the control
    with pytest.raises(InputError, match="2 recorded RoPE frequencies for 6 rotated dims"):
        layer_layout(_spec(rotary_dims=6, rope_inv_freq=glob), 0, 16)
    with pytest.raises(InputError, match=r"dims \[12, 20\)"):
        layer_layout(_spec(rotary_dims=8, rotary_offset=12), 0, 16)


@pytest.mark.parametrize("scaling", [{"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
                                     {"rope_type": "dynamic", "factor": 2.0}])
def test_length_dependent_scaling_or_no_theta_is_fitted(scaling):
    spec = _spec(rope_scaling=json.dumps(scaling))
    assert layer_layout(spec, 0, 8) == RopeLayout("half", 0, 8, None, "fitted")
    assert layer_layout(ModelSpec(model="m"), 0, 8).source == "fitted"
    notes = check_rope(spec, IngestOptions())
    assert len(notes) == 1 and scaling["rope_type"] in notes[0] and "fits each plane" in notes[0]


def test_frequencies_fitted_for_want_of_a_theta_are_said_once_with_their_accuracy():
    # an older capture without rope_theta (and Ministral3 in the registry): fitted, and said so
    notes = check_rope(ModelSpec(model="old", n_layers=3), IngestOptions())
    assert notes == [
        "old: no rope_theta is known and no capture recorded its frequencies: rope_planes fits each plane's frequency "
        "(omega_source 'fitted'), within ~2% for planes that turn at least once over the captured positions but "
        "13–51% off for slower ones (docs/rotation-planes.md); give --rope-theta if you know it"]
    assert check_rope(_spec(), IngestOptions()) == []  # derived: nothing to say
    assert check_rope(ModelSpec(model="old", rope_inv_freq=(1.0, 0.1)), IngestOptions()) == []  # recorded
    assert "no rope_theta is known" in check_rope(registry.lookup("ministral3-3b"), IngestOptions())[0]


def test_no_rope_unknown_pairing_and_odd_width_have_no_layout():
    assert layer_layout(_spec(rope="none"), 0, 8) is None
    assert layer_layout(_spec(rope_pairing=None), 0, 8) is None
    assert "could not establish" in check_rope(_spec(rope_pairing=None), IngestOptions())[0]
    assert layer_layout(_spec(), 0, 9) is None
    assert layer_layout(_spec(rotary_dims=4), 0, 9).dims == 4  # a recorded slice of an odd head is fine


def test_the_registry_models_use_their_rope_scaling():
    # llama3.2-3b ships llama3 scaling (factor 32): unscaled frequencies would turn 26-28 of its 64
    # planes by more than a quarter-turn too much or too little at position 131,072.
    spec = registry.lookup("llama3.2-3b")
    lay = layer_layout(spec, 0, 128)
    assert lay.source == "derived"
    llama3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    np.testing.assert_allclose(lay.omega, rope_frequencies(128, 500000.0, llama3), rtol=1e-15)
    plain = rope_frequencies(128, 500000.0)
    off = np.abs(np.asarray(lay.omega) - plain) * 131072 / (2 * np.pi) > 0.25
    assert 26 <= off.sum() <= 28
    qwen = layer_layout(registry.lookup("qwen3-8b"), 0, 128)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    np.testing.assert_allclose(qwen.omega, rope_frequencies(128, 1e6, yarn), rtol=1e-15)
    # every registry model with a theta now derives its planes from its recorded scaling (9 of them scaled)
    scaled = [s.model for s in registry.load_registry() if s.rope_scaling and s.rope_theta]
    assert len(scaled) == 9 and all(s.rope_scaling_source for s in registry.load_registry())


# ------------------------------------------------------------------ options against a capture


def test_options_that_would_change_recorded_frequencies_are_refused():
    recorded = tuple(rope_frequencies(8, THETA, {"rope_type": "linear", "factor": 4.0}))
    spec = _spec(rope_inv_freq=recorded, rope_scaling=json.dumps({"rope_type": "linear", "factor": 4.0}))
    meta = {"rope_pairing": "half", "rope_inv_freq": list(recorded)}
    # the same frequencies: accepted (and the recorded ones are what is used)
    assert reconcile_options(spec, IngestOptions(rope_theta=THETA), meta) is spec
    # --rope-scaling null: plain frequencies the model never used
    with pytest.raises(InputError, match="plane 1: .* instead of the recorded"):
        reconcile_options(_spec(rope_inv_freq=recorded), IngestOptions(rope_scaling="{}"), meta)
    longrope = _spec(rope_inv_freq=recorded, rope_scaling=json.dumps({"rope_type": "longrope"}))
    with pytest.raises(InputError, match="'longrope'"):
        reconcile_options(longrope, IngestOptions(rope_theta=THETA), meta)
    with pytest.raises(InputError, match="established rope_pairing 'half'"):
        reconcile_options(spec, IngestOptions(rope_pairing="interleaved"), meta)
    # an older capture recorded no frequencies: options replace its per-layer RoPE
    old = _spec(layer_rope_theta=(100.0, THETA, THETA), layer_rope_scaling=(None, None, None))
    assert reconcile_options(old, IngestOptions(rope_theta=THETA), {"rope_pairing": "half"}).layer_rope_theta is None


def test_same_layouts_compares_slices_and_frequencies():
    a = model_layouts(_spec(rotary_dims=4), 16)
    assert same_layouts(a, model_layouts(_spec(rotary_dims=4), 16))
    assert not same_layouts(a, model_layouts(_spec(), 16))
    assert not same_layouts(a, model_layouts(_spec(rotary_dims=4, rope_theta=THETA * 1.001), 16))
    assert not same_layouts(a, model_layouts(_spec(rotary_dims=4, rope_pairing="interleaved"), 16))


# ------------------------------------------------------------------ planted truth


def _ringed(rng, n, d, omega, offset, dims, pairing, t_max=4000):
    """Vectors whose rotated slice holds a steady pre-RoPE direction (rings after RoPE); the other dims do not turn."""
    t = np.sort(rng.integers(0, t_max, n)).astype(np.float64)
    X = rng.normal(scale=0.3, size=(n, d))
    X[:, offset:offset + dims] += 3.0
    X[:, :offset] += np.linspace(1, 2, offset) if offset else 0.0
    rotated = apply_rope(X[:, offset:offset + dims], t, np.asarray(omega), pairing)
    X[:, offset:offset + dims] = rotated
    return X, t


@pytest.mark.parametrize("offset,dims,pairing", [(0, 4, "half"), (0, 6, "interleaved"), (10, 6, "half")])
def test_rope_planes_find_every_planted_plane_of_a_partial_slice(offset, dims, pairing):
    rng = np.random.default_rng(5)
    d = 16
    omega = rope_frequencies(dims, THETA)
    Q, tq = _ringed(rng, 1500, d, omega, offset, dims, pairing)
    K, tk = _ringed(rng, 1500, d, omega, offset, dims, pairing)
    lay = layer_layout(_spec(rotary_dims=dims, rotary_offset=offset, rope_pairing=pairing), 0, d)
    out = rope_planes(Q, tq, K, tk, **lay.planes_kwargs(), rng=np.random.default_rng(0))
    assert list(out["j"]) == list(range(dims // 2))
    np.testing.assert_allclose(out["omega"], omega, rtol=1e-15)
    turning = omega * 4000 / (2 * np.pi) >= 1
    assert out["rotating"][turning].all()
    assert (out["coherence_q"][turning] > 0.9).all() and (out["coherence_k"][turning] > 0.9).all()
    # the same vectors read as a full-width rotate-half model: none of the true planes is found
    wrong = rope_planes(Q, tq, K, tk, rope_theta=THETA, rng=np.random.default_rng(0))
    assert len(wrong["j"]) == d // 2 and not (np.asarray(wrong["coherence_q"]) > 0.9).any()


def _write_dataset(root, metadata, *, dims=4, offset=0, pairing="half", d=16, layers=2):
    rng = np.random.default_rng(1)
    omega = rope_frequencies(dims, THETA)
    for layer in range(layers):
        for kind in ("q", "k"):
            X, t = _ringed(rng, 600, d, omega, offset, dims, pairing)
            write_head(root, layer, 0, kind, X, t.astype(np.int64), example_id=np.zeros(len(t), np.int32))
    write_metadata(root, {"model": "partial", "family": "Toy", "n_layers": layers, "n_q_heads": 1, "n_kv_heads": 1,
                          "gqa_ratio": 1, "head_dim": d, "rope": "rotary", "rope_theta": THETA, **metadata})
    return root


@pytest.mark.parametrize("metadata", [
    {"rope_pairing": "half", "rotary_dims": 4, "rotary_offset": 0, "rope_inv_freq": list(rope_frequencies(4, THETA))},
    # an older qkdb sniff capture kept partial rotary only as partial_rotary_factor inside rope_scaling
    {"rope_pairing": "half", "rope_scaling": {"partial_rotary_factor": 0.25}},
], ids=["recorded", "legacy"])
def test_a_partial_rotary_capture_gets_one_row_per_real_plane(tmp_path, home, metadata):
    data = _write_dataset(tmp_path / "ds", metadata)
    qkdb.ingest(data, workers=1)
    con = qkdb.connect()
    try:
        rows = con.execute("select layer, j, omega, rotating from rope_planes order by layer, j").fetchall()
        assert [(l, j) for l, j, _, _ in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        np.testing.assert_allclose([w for _, _, w, _ in rows], np.tile(rope_frequencies(4, THETA), 2), rtol=1e-12)
        assert all(r for *_, r in rows)
        model = con.execute("select rotary_dims, rotary_offset, rope_source, rope_inv_freq from models").fetchall()[0]
        assert model[:3] == (4, 0, "recorded" if "rope_inv_freq" in metadata else "derived")
        omega, = con.execute("select omega from rotation limit 1").fetchall()[0]
        assert omega in set(rope_frequencies(4, THETA))
    finally:
        con.close()


def test_unestablished_pairing_gives_no_planes_and_says_so(tmp_path, home):
    data = _write_dataset(tmp_path / "ds", {"rope_pairing": None, "rotary_dims": 4, "rotary_offset": 0,
                                            "rope_inv_freq": list(rope_frequencies(4, THETA))})
    res = qkdb.ingest(data, workers=1)
    assert any("could not establish" in n for n in res.notes)
    con = qkdb.connect()
    try:
        assert con.execute("select count(*) from rope_planes").fetchall() == [(0,)]
        assert con.execute("select count(*) from complement").fetchall()[0][0] > 0  # the seeds' view stays
    finally:
        con.close()
    res = qkdb.ingest(data, workers=1, rope_pairing="half")  # the user knows it
    con = qkdb.connect()
    try:
        assert con.execute("select count(*) from rope_planes").fetchall() == [(4,)]
    finally:
        con.close()


def test_rope_scaling_option_cannot_replace_recorded_frequencies(tmp_path, home):
    recorded = rope_frequencies(4, THETA, {"rope_type": "linear", "factor": 4.0})
    data = _write_dataset(tmp_path / "ds", {"rope_pairing": "half", "rotary_dims": 4, "rotary_offset": 0,
                                            "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                                            "rope_inv_freq": list(recorded)})
    with pytest.raises(qkdb.QkdbError, match="recorded the frequencies"):
        qkdb.ingest(data, workers=1, rope_scaling="null")
    assert not qkdb.warehouse.store.is_ingested(qkdb.warehouse.resolve_home(None), "partial")

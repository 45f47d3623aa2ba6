"""A model whose RoPE facts changed since its ingest is reported as stale, and its re-ingest recomputes it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qkdb
from qkdb.ingest.metrics.rope_planes import rope_frequencies
from qkdb.warehouse import store

from helpers.datasets import make_dataset

LLAMA3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def _as_ingested_by_an_older_qkdb(home, model, omega):
    """Rewrite a model's files as qkdb did before it recorded RoPE layouts and knew the registry's scaling."""
    f = store.current_file(home, model, "models")
    t = pq.read_table(f)
    old = [c for c in ("rotary_dims", "rotary_offset", "rope_source", "rope_inv_freq", "layer_rope_inv_freq",
                       "attention_scale") if c in t.column_names]
    pq.write_table(t.drop_columns(old), f)
    f = store.current_file(home, model, "rope_planes")
    t = pq.read_table(f)
    j = t.column("j").to_numpy()
    t = t.set_column(t.column_names.index("omega"), "omega", pa.array(np.asarray(omega)[j]))
    pq.write_table(t, f)


def test_a_registry_model_ingested_without_its_scaling_is_stale_until_re_ingested(tmp_path, home):
    data = make_dataset(tmp_path / "ds", layers=2, q_heads=4, kv_heads=2, d=16)
    qkdb.ingest(data, "llama3.2-1b", workers=1)
    con = qkdb.connect()
    try:
        got = con.execute("select rope_source, rope_inv_freq from models").fetchall()[0]
        assert got[0] == "derived"
        np.testing.assert_allclose(got[1], rope_frequencies(16, 500000.0, LLAMA3), rtol=1e-12)
        assert qkdb.api.stale_models(con=con) == []
    finally:
        con.close()
    _as_ingested_by_an_older_qkdb(home, "llama3.2-1b", rope_frequencies(16, 500000.0))
    stale = qkdb.api.stale_models()
    assert [s.model for s in stale] == ["llama3.2-1b"]
    assert "frequencies differ by up to 32×" in stale[0].change
    assert stale[0].command == f"qkdb ingest --path {data} --model llama3.2-1b --home {home}"
    info = qkdb.api.info()
    assert list(info["stale"]) == ["llama3.2-1b"] and "recomputes it" in info["stale"]["llama3.2-1b"]
    # Same data, same parameters: the ingest still recomputes, because the layout is not the same.
    res = qkdb.ingest(data, "llama3.2-1b", workers=1)
    assert not res.unchanged and res.heads_done == 8
    assert qkdb.api.stale_models() == []
    assert qkdb.ingest(data, "llama3.2-1b", workers=1).unchanged  # and then it is unchanged


def test_an_older_capture_whose_partial_rotary_was_ignored_is_stale(tmp_path, home):
    data = make_dataset(tmp_path / "ds", layers=1, q_heads=2, kv_heads=1, d=16)
    meta = {"model": "neox", "family": "Toy", "n_layers": 1, "n_q_heads": 2, "n_kv_heads": 1, "rope": "rotary",
            "rope_theta": 10000.0, "rope_pairing": "half", "rope_scaling": {"partial_rotary_factor": 0.25}}
    (data / "qkdb_dataset.json").write_text(json.dumps(meta))
    qkdb.ingest(data, workers=1)
    # what an older qkdb published: 8 full-width planes at theta^(-2j/16)
    f = store.current_file(home, "neox", "rope_planes")
    t = pq.read_table(f)
    rows = t.slice(0, 0)
    for head in sorted(set(t.column("head").to_pylist())):
        one = t.filter(pa.compute.equal(t.column("head"), head)).slice(0, 1)
        for j in range(8):
            rows = pa.concat_tables([rows, one.set_column(t.column_names.index("j"), "j", pa.array([j], pa.int32()))])
    pq.write_table(rows, f)
    _as_ingested_by_an_older_qkdb(home, "neox", rope_frequencies(16, 10000.0))
    stale = qkdb.api.stale_models()
    assert [(s.model, s.change) for s in stale] == [("neox", "rotated dims 16 → 4")]
    assert qkdb.ingest(data, workers=1).heads_done == 2
    con = qkdb.connect()
    try:
        assert con.execute("select count(distinct j) from rope_planes").fetchall() == [(2,)]
    finally:
        con.close()


def test_findings_cli_says_which_models_are_stale(tmp_path, home, runner):
    from qkdb.cli import app

    data = make_dataset(tmp_path / "ds", layers=2, q_heads=4, kv_heads=2, d=16)
    qkdb.ingest(data, "llama3.2-1b", workers=1)
    out = runner.invoke(app, ["findings"])
    assert out.exit_code == 0 and "stale" not in out.stderr
    _as_ingested_by_an_older_qkdb(home, "llama3.2-1b", rope_frequencies(16, 500000.0))
    out = runner.invoke(app, ["findings"])
    assert out.exit_code == 0, out.stderr
    assert "llama3.2-1b: its RoPE facts changed since it was ingested" in out.stderr
    assert "`qkdb ingest --path" in out.stderr


@pytest.fixture
def runner():
    from typer.testing import CliRunner

    return CliRunner()


def test_a_pre_rope_capture_read_as_post_rope_by_an_older_qkdb_is_stale_until_re_ingested(tmp_path, home):
    data = make_dataset(tmp_path / "ds", layers=1, q_heads=2, kv_heads=1, d=16)
    meta = {"model": "pre", "source": "sniff", "n_layers": 1, "n_q_heads": 2, "n_kv_heads": 1, "rope": "rotary",
            "rope_pairing": "half", "rotary_dims": 16, "rotary_offset": 0,
            "rope_inv_freq": rope_frequencies(16, 10000.0).tolist(), "rope_attention_factor": 1.0,
            "capture": {"pre_rope": True}}
    (data / "qkdb_dataset.json").write_text(json.dumps(meta))
    qkdb.ingest(data, workers=1)
    assert qkdb.api.stale_models() == []
    f = store.current_file(home, "pre", "models")  # as an older qkdb published it: no pre_rope column
    pq.write_table(pq.read_table(f).drop_columns(["pre_rope"]), f)
    stale = qkdb.api.stale_models()
    assert [(s.model, s.change) for s in stale] == [("pre", "a capture stored before RoPE was read as post-RoPE")]
    res = qkdb.ingest(data, workers=1)
    assert not res.unchanged and qkdb.api.stale_models() == []


def test_a_changed_trained_context_makes_frequency_usage_stale_and_an_option_is_remembered(tmp_path, home):
    data = make_dataset(tmp_path / "ds", layers=2, q_heads=4, kv_heads=2, d=16)
    qkdb.ingest(data, "mistral-v0.2-7b", workers=1, trained_context=2048)
    assert qkdb.api.stale_models() == []  # (the option is part of what the run recorded)
    qkdb.ingest(data, "mistral-v0.2-7b", workers=1)  # the registry's 32,768
    assert qkdb.api.stale_models() == []
    meta = {"trained_context": 4096, "trained_context_source": "config: max_position_embeddings"}
    (data / "qkdb_dataset.json").write_text(json.dumps(meta))  # (as a capture of its config records it)
    (stale,) = qkdb.api.stale_models()
    assert stale.change == "trained context 32,768 tokens → 4,096 tokens"
    assert "frequency_usage (critical plane, low band) and rope.low_band are stale" in stale.message()
    qkdb.ingest(data, "mistral-v0.2-7b", workers=1)
    assert qkdb.api.stale_models() == []
    with qkdb.connect() as con:
        assert con.execute("select trained_context from models").fetchall() == [(4096,)]


def test_a_hub_captures_recorded_trained_context_is_not_taken_for_a_change():
    from qkdb.ingest import registry
    from qkdb.staleness import trained_context_changed

    spec = registry.lookup("smollm3-3b-stage1-step-40000")  # (its registry length is unknown until resolved)
    row = {"model": spec.model, "source": "hub", "head_dim": 128, "trained_context": 65536,
           "trained_context_source": "config: max_position_embeddings"}
    assert trained_context_changed(spec, row) is None  # (the pushed capture's record is not read again here)
    assert trained_context_changed(spec, {**row, "source": "path"}) == "trained context 65,536 tokens → unknown"

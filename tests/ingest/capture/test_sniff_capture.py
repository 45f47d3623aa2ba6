"""``qkdb sniff`` captures from a tiny random Llama built here, against an independent recomputation.

Needs the ``sniff`` extra (torch, transformers): marked ``sniff``, which the default run deselects
and ``.ci/run`` runs. The model is a randomly initialised Llama-architecture network with
grouped-query attention, saved to a temporary folder with a BPE tokenizer trained in the test:
nothing is downloaded. Captured vectors are checked against an independent recomputation:
``q_proj``/``k_proj`` applied to each layer's attention input (caught by a forward pre-hook), then
RoPE in float64 numpy.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from qkdb.errors import EXIT_CODES, SniffError
from qkdb.ingest.capture import sampling, texts
from qkdb.ingest.sources.layout import discover, read_head, read_metadata

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

N_LAYERS, N_Q, N_KV, HEAD_DIM, THETA = 3, 4, 2, 8, 5000.0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in texts.pydoc_documents()[40:46]))
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, corpus):
    from helpers import tiny_models

    tokenizer = tiny_models.train_tokenizer(tmp_path_factory.mktemp("tokenizer"))
    return tiny_models.build(tmp_path_factory.mktemp("tiny-llama"), "llama", *tokenizer), corpus


def _sniff(tiny_model, out, **kw):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    folder, corpus = tiny_model
    opts = dict(
        out=out, model_path=folder, text=str(corpus), n_texts=3, max_length=96, q_heads=5,
        vectors_per_head=60, min_bucket_size=16, seed=11, model_name="tiny", family="Tiny",
    )
    opts.update(kw)
    return sniff(SniffOptions(**opts))


@pytest.fixture(scope="module")
def captured(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("cap") / "sniffed"
    return _sniff(tiny_model, out), out


def test_sniffed_vectors_are_q_and_k_projections_with_rope(tiny_model, captured):
    from helpers import tiny_models

    folder, corpus = tiny_model
    _, out = captured
    windows = tiny_models.windows(folder, corpus, 3, 96)
    assert [w[0] for w in windows] == [1, 1, 1]  # the tokenizer adds BOS: every window starts with it
    ref = tiny_models.reference(folder, windows)
    found = discover(out)
    assert len(found.queries) == 5
    for table, kind in ((found.queries, "q"), (found.keys, "k")):
        for (layer, head), hf in table.items():
            data = read_head(hf.path)
            assert data.vectors.shape == (60, HEAD_DIM) and data.n_dropped == 0
            for ex in range(3):
                rows = data.example_id == ex
                want = ref[ex][layer][kind][head][data.positions[rows].astype(int)]
                np.testing.assert_allclose(data.vectors[rows], want, rtol=1e-4, atol=1e-5)


def test_heads_and_positions_follow_the_seed(captured):
    result, out = captured
    found = discover(out)
    expect_q = sampling.sample_query_heads(N_LAYERS, N_Q, 5, seed=11)
    assert sorted(found.queries) == expect_q == result.query_heads
    assert sorted(found.keys) == sorted({(l, h // (N_Q // N_KV)) for l, h in expect_q})
    per_text = sampling.split_evenly(60, 3)
    for table, kind in ((found.queries, "q"), (found.keys, "k")):
        for (layer, head), hf in table.items():
            t = pq.read_table(hf.path).to_pydict()
            ex, pos, bucket = map(np.asarray, (t["example_id"], t["position"], t["bucket"]))
            for e in range(3):
                # positions 0-3 of every text (--keep-first 4), then the seeded draws over positions 4-95
                s = sampling.sample_positions(
                    96 - 4, per_text[e] - 4, sampling.position_rng(11, e, layer, head, kind), "log-uniform", 16
                )
                want = np.concatenate([np.arange(4), s.positions + 4])
                np.testing.assert_array_equal(pos[ex == e], want)
                np.testing.assert_array_equal(bucket[ex == e], sampling.log2_bucket(want, 16))
            assert t["sliding_window"] == [None] * len(ex)


def test_metadata_records_the_model_and_capture(captured):
    _, out = captured
    meta = read_metadata(out)
    assert {k: meta[k] for k in ("model", "family", "n_layers", "n_q_heads", "n_kv_heads", "head_dim")} == {
        "model": "tiny", "family": "Tiny", "n_layers": N_LAYERS, "n_q_heads": N_Q, "n_kv_heads": N_KV,
        "head_dim": HEAD_DIM,
    }
    assert meta["rope"] == "rotary" and meta["rope_theta"] == THETA and meta["rope_pairing"] == "half"
    assert meta["rope_scaling"] is None and meta["layer_rope_theta"] is None and meta["position_scaling"] is None
    assert meta["nope_layers"] == [] and meta["source"] == "sniff"
    cap = meta["capture"]
    assert cap["seed"] == 11 and cap["max_length"] == 96 and cap["pre_rope"] is False
    assert cap["positions"] == {"policy": "log-uniform", "min_bucket_size": 16, "keep_first": 4, "vectors_per_head": 60,
                                "kept_per_head": 60}
    assert cap["check"]["checked_layers"] == sorted({l for l, _ in sampling.sample_query_heads(N_LAYERS, N_Q, 5, 11)})
    assert cap["texts"]["n_texts"] == 3 and cap["q_heads"] == 5 and cap["qkdb_version"]


def test_the_first_text_is_checked_with_the_differences_its_search_computed(tiny_model, tmp_path):
    """The text that establishes each layer's RoPE is checked with the differences the layout search
    computed on its rows, not computed twice: the same text again, every row checked afresh, finds
    exactly the same largest difference, and it is a float32 capture's rounding, not zero."""
    folder, _ = tiny_model
    doc = json.dumps({"text": texts.pydoc_documents()[41]}) + "\n"
    corpus = tmp_path / "twice.jsonl"
    corpus.write_text(doc + doc)
    every = dict(pack=False, max_length=64, check_rows=None, min_bucket_size=8)
    once = _sniff((folder, corpus), tmp_path / "once", n_texts=1, vectors_per_head=64, **every)
    twice = _sniff((folder, corpus), tmp_path / "twice", n_texts=2, vectors_per_head=128, **every)
    check_once, check_twice = (read_metadata(r.out)["capture"]["check"] for r in (once, twice))
    assert check_twice["rows_checked"] == 2 * check_once["rows_checked"] > 0
    assert 0 < check_once["max_relative_difference"] == check_twice["max_relative_difference"] < 1e-5


def test_same_seed_same_files_and_float16_storage(tiny_model, captured, tmp_path):
    _, out = captured
    again = _sniff(tiny_model, tmp_path / "again", dtype="float16")
    found_a, found_b = discover(out), discover(again.out)
    assert found_a.queries.keys() == found_b.queries.keys()
    for key, hf in found_a.queries.items():
        a, b = pq.read_table(hf.path), pq.read_table(found_b.queries[key].path)
        assert a.column("position").equals(b.column("position"))
        assert str(b.schema.field("vector").type.value_type) == "halffloat"
        np.testing.assert_allclose(read_head(found_b.queries[key].path).vectors, read_head(hf.path).vectors, rtol=2e-3, atol=2e-3)


def test_refuses_to_overwrite_and_force_replaces(tiny_model, tmp_path):
    out = tmp_path / "o"
    _sniff(tiny_model, out, q_heads=2, n_texts=1, vectors_per_head=20)
    with pytest.raises(SniffError, match="not empty"):
        _sniff(tiny_model, out, q_heads=2, n_texts=1, vectors_per_head=20)
    _sniff(tiny_model, out, q_heads=1, n_texts=1, vectors_per_head=20, force=True)
    assert len(discover(out).queries) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_sniffed_folder_ingests_without_flags(captured, home):
    import qkdb

    _, out = captured
    result = qkdb.ingest(path=out, home=home, workers=1)
    assert result.model == "tiny" and result.heads_done == 5
    con = qkdb.connect(home)
    row = con.sql("select family, n_layers, n_q_heads, n_kv_heads, rope_theta from models where model = 'tiny'").fetchall()
    assert row == [("Tiny", N_LAYERS, N_Q, N_KV, THETA)]
    assert con.sql("select count(*) from heads where model = 'tiny'").fetchall() == [(5,)]


def test_cli_sniff_writes_the_dataset(tiny_model, runner, tmp_path):
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401  (registers the command if the app does not yet)

    folder, corpus = tiny_model
    out = tmp_path / "cli"
    args = ["sniff", "--model-path", str(folder), "--out", str(out), "--text", str(corpus), "--texts", "2",
            "--max-length", "64", "--q-heads", "3", "--vectors-per-head", "40", "--seed", "5", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(discover(out).queries) == 3
    meta = read_metadata(out)
    assert meta["model"] == folder.name.lower() and meta["hf_model"] == folder.name
    assert meta["family"] == "llama"  # the config's type: Llama 3.1/3.2/SmolLM2 ... share it
    again = runner.invoke(app, args)
    assert again.exit_code == EXIT_CODES["input"] and "not empty" in again.output
    bad = runner.invoke(app, ["sniff", "--out", str(tmp_path / "x")])
    assert bad.exit_code == EXIT_CODES["usage"] and "exactly one of --model-path" in bad.output
    # bad inputs: one line naming the problem, before anything loads
    for extra, message, kind in ((["--model-path", str(tmp_path)], "no model here", "input"),
                                 (["--model-path", str(folder), "--text", str(tmp_path / "gone.txt")], "no such text file", "not_found")):
        r = runner.invoke(app, ["sniff", "--out", str(tmp_path / "y"), *extra])
        assert r.exit_code == EXIT_CODES[kind] and message in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1
    # a capture that keeps fewer vectors than asked says so
    short = runner.invoke(app, [*args[:4], str(tmp_path / "short"), *args[5:], "--texts", "1", "--max-length", "30"])
    assert short.exit_code == 0, short.output
    assert "note: each of the" in short.output and "keeps 30 of the 40 vectors asked for" in short.output

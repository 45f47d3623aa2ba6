"""``qkdb sniff``: the sampling policy (plain numpy) and captures from a tiny random Llama built here.

The capture tests need the ``sniff`` extra (torch, transformers) and skip cleanly without it.
The model is a randomly initialised Llama-architecture network with grouped-query attention,
saved to a temporary folder with a BPE tokenizer trained in the test: nothing is downloaded.
Captured vectors are checked against an independent recomputation: ``q_proj``/``k_proj`` applied
to each layer's attention input (caught by a forward pre-hook), then RoPE in float64 numpy.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from qkdb.errors import SniffError
from qkdb.ingest.capture import sampling
from qkdb.ingest.capture import texts
from qkdb.ingest.sources.layout import discover, read_head, read_metadata

# --------------------------------------------------------------------------- sampling policy (no torch)


def test_query_heads_follow_the_seed_and_cover_all_when_few():
    got = sampling.sample_query_heads(5, 6, 7, seed=3)
    flat = np.sort(np.random.default_rng(3).choice(30, size=7, replace=False))
    assert got == [(int(i // 6), int(i % 6)) for i in flat]
    assert got == sorted(set(got))
    assert sampling.sample_query_heads(5, 6, 7, seed=4) != got
    assert sampling.sample_query_heads(2, 3, 300, seed=0) == [(l, h) for l in range(2) for h in range(3)]
    assert sampling.sample_query_heads(2, 3, None, seed=0) == [(l, h) for l in range(2) for h in range(3)]


def test_key_heads_are_the_gqa_groups_of_the_query_heads():
    q = [(0, 0), (0, 5), (0, 6), (2, 11), (2, 3)]
    assert sampling.key_heads_for(q, 12, 3) == [(0, 0), (0, 1), (2, 0), (2, 2)]
    assert sampling.key_heads_for(q, 12, 12) == sorted(q)
    with pytest.raises(ValueError):
        sampling.key_heads_for(q, 12, 5)


def test_log2_bucket_matches_a_loop_over_the_definition():
    m = 16
    pos = np.arange(0, 3000)
    expect = np.array([0 if p < m else next(i for i in range(1, 40) if m * 2 ** (i - 1) <= p < m * 2**i) for p in pos])
    np.testing.assert_array_equal(sampling.log2_bucket(pos, m), expect)
    np.testing.assert_array_equal(sampling.log2_bucket_edges(100, 16), [0, 16, 32, 64, 100])
    np.testing.assert_array_equal(sampling.log2_bucket_edges(128, 16), [0, 16, 32, 64, 128])


def test_log_uniform_positions_give_each_doubling_bucket_the_same_count():
    rng = np.random.default_rng(0)
    s = sampling.sample_positions(2048, 500, rng, "log-uniform", 128)
    assert len(s.positions) == 500 and len(np.unique(s.positions)) == 500
    assert s.positions.min() >= 0 and s.positions.max() < 2048
    assert np.all(np.diff(s.positions) > 0)
    counts = np.bincount(s.buckets)
    assert len(counts) == 5 and counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(s.buckets, sampling.log2_bucket(s.positions, 128))
    # a short first bucket hands its surplus to the wider ones; all positions when asked for more
    small = sampling.sample_positions(300, 200, np.random.default_rng(1), "log-uniform", 32)
    sizes = np.diff(sampling.log2_bucket_edges(300, 32))
    assert len(small.positions) == 200 and np.all(np.bincount(small.buckets, minlength=len(sizes)) <= sizes)
    every = sampling.sample_positions(50, 80, np.random.default_rng(1), "log-uniform", 8)
    np.testing.assert_array_equal(every.positions, np.arange(50))


def test_uniform_positions_and_same_seed_same_draw():
    a = sampling.sample_positions(1000, 100, sampling.position_rng(7, 2, 3, 4, "q"), "uniform", 128)
    b = sampling.sample_positions(1000, 100, sampling.position_rng(7, 2, 3, 4, "q"), "uniform", 128)
    c = sampling.sample_positions(1000, 100, sampling.position_rng(7, 2, 3, 4, "k"), "uniform", 128)
    np.testing.assert_array_equal(a.positions, b.positions)
    assert not np.array_equal(a.positions, c.positions)
    np.testing.assert_array_equal(a.buckets, a.positions // 128)
    with pytest.raises(ValueError):
        sampling.sample_positions(10, 1, np.random.default_rng(0), "sqrt")


def test_split_evenly():
    np.testing.assert_array_equal(sampling.split_evenly(10, 4), [3, 3, 2, 2])
    assert sampling.split_evenly(7, 3).sum() == 7


def _encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_packed_windows_are_full_and_keep_every_token_in_order():
    docs = ["abcdefg", "hij", "klmnopqrstu", "vw"]
    w = texts.token_windows(docs, _encode, 5, pack=True, eos_id=0)
    stream = [t for d in docs for t in [*_encode(d), 0]]
    assert all(len(x) == 5 for x in w)
    assert np.concatenate(w).tolist() == stream[: 5 * len(w)]
    assert len(w) == len(stream) // 5
    with_bos = texts.token_windows(docs, _encode, 5, pack=True, bos_id=1, eos_id=0, limit=2)
    assert len(with_bos) == 2 and all(x[0] == 1 and len(x) == 5 for x in with_bos)
    assert np.concatenate([x[1:] for x in with_bos]).tolist() == stream[:8]
    unpacked = texts.token_windows(docs, _encode, 4, pack=False)
    assert [x.tolist() for x in unpacked] == [_encode(d)[:4] for d in docs]
    # a corpus shorter than one window still gives one text
    assert texts.token_windows(["ab"], _encode, 50, eos_id=0)[0].tolist() == [97, 98, 0]


def test_text_sources(tmp_path):
    docs = list(texts.iter_documents("pydoc"))
    assert len(docs) > 50 and sum(map(len, docs)) > 100_000
    (tmp_path / "a.txt").write_text("first")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text('{"text": "second"}\n\n"third"\n')
    (tmp_path / "skip.bin").write_bytes(b"\0")
    assert list(texts.iter_documents(tmp_path)) == ["first", "second", "third"]
    (tmp_path / "bad.jsonl").write_text('{"body": 1}\n')
    with pytest.raises(SniffError, match=r"bad.jsonl:1"):
        list(texts.iter_documents(tmp_path / "bad.jsonl"))
    with pytest.raises(SniffError, match="no such text file"):
        list(texts.iter_documents(tmp_path / "missing"))


def test_missing_extra_is_one_clear_error(tmp_path, monkeypatch):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(SniffError, match=r"pip install 'qkdb\[sniff\]'"):
        sniff(SniffOptions(out=tmp_path / "out", model_path=tmp_path / "m"))


def test_options_and_inputs_are_checked_before_loading(tmp_path):
    from qkdb.ingest.capture.sniff import SniffOptions

    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(SniffError, match="exactly one"):
        SniffOptions(out=tmp_path / "o").check()
    with pytest.raises(SniffError, match="no such model folder"):
        SniffOptions(out=tmp_path / "o", model_path=tmp_path / "nope").check()
    # a folder without a model: one line saying so (not transformers' tokenizer message)
    (model / "weights.gguf").write_bytes(b"GGUF\0\0")
    with pytest.raises(SniffError, match=r"model: no model here .*use --gguf .*weights.gguf"):
        SniffOptions(out=tmp_path / "o", model_path=model).check()
    (tmp_path / "fake.gguf").write_bytes(b"PK\3\4 not a gguf")
    with pytest.raises(SniffError, match="fake.gguf: not a GGUF file"):
        SniffOptions(out=tmp_path / "o", gguf=tmp_path / "fake.gguf").check()
    (model / "config.json").write_text("{}")
    # texts: missing, empty, whitespace only — before any model loads
    with pytest.raises(SniffError, match="missing.txt: no such text file"):
        SniffOptions(out=tmp_path / "o", model_path=model, text=str(tmp_path / "missing.txt")).check()
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(SniffError, match="empty.txt: no text in it"):
        SniffOptions(out=tmp_path / "o", model_path=model, text=str(tmp_path / "empty.txt")).check()
    (tmp_path / "blank.jsonl").write_text('{"text": "  \\n "}\n""\n')
    with pytest.raises(SniffError, match="blank.jsonl: no text in it"):
        SniffOptions(out=tmp_path / "o", model_path=model, text=str(tmp_path / "blank.jsonl")).check()
    with pytest.raises(SniffError, match="--keep-position-scaling cannot apply"):
        SniffOptions(out=tmp_path / "o", model_path=model, pre_rope=True, keep_position_scaling=True).check()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine")
    with pytest.raises(SniffError, match="not empty"):
        SniffOptions(out=tmp_path / "o", model_path=model).check()
    with pytest.raises(SniffError, match="not a capture"):
        SniffOptions(out=tmp_path / "o", model_path=model, force=True).check()


def test_empty_documents_are_skipped_not_packed_as_separators():
    w = texts.token_windows(["", "ab", "   ", "cd"], _encode, 3, pack=True, eos_id=0)
    assert [x.tolist() for x in w] == [[97, 98, 0], [99, 100, 0]]
    assert [x.tolist() for x in texts.token_windows(["", "ab"], _encode, 5, pack=False)] == [[97, 98]]
    with pytest.raises(SniffError, match="no tokens"):
        texts.token_windows(["", " "], _encode, 5, pack=True, eos_id=0)


# --------------------------------------------------------------------------- captures from a tiny Llama
# (every architecture family against an independent recomputation: tests/test_sniff_families.py)

N_LAYERS, N_Q, N_KV, HEAD_DIM, THETA = 3, 4, 2, 8, 5000.0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in texts.pydoc_documents()[40:46]))
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, corpus):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
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
                s = sampling.sample_positions(
                    96, per_text[e], sampling.position_rng(11, e, layer, head, kind), "log-uniform", 16
                )
                np.testing.assert_array_equal(pos[ex == e], s.positions)
                np.testing.assert_array_equal(bucket[ex == e], s.buckets)
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
    assert cap["positions"] == {"policy": "log-uniform", "min_bucket_size": 16, "vectors_per_head": 60,
                                "kept_per_head": 60}
    assert cap["check"]["checked_layers"] == sorted({l for l, _ in sampling.sample_query_heads(N_LAYERS, N_Q, 5, 11)})
    assert cap["texts"]["n_texts"] == 3 and cap["q_heads"] == 5 and cap["qkdb_version"]


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
    assert again.exit_code == 6 and "not empty" in again.output
    bad = runner.invoke(app, ["sniff", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 6 and "exactly one of --model-path" in bad.output
    # bad inputs: one line naming the problem, before anything loads
    for extra, message in ((["--model-path", str(tmp_path)], "no model here"),
                           (["--model-path", str(folder), "--text", str(tmp_path / "gone.txt")], "no such text file")):
        r = runner.invoke(app, ["sniff", "--out", str(tmp_path / "y"), *extra])
        assert r.exit_code == 6 and message in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1
    # a capture that keeps fewer vectors than asked says so
    short = runner.invoke(app, [*args[:4], str(tmp_path / "short"), *args[5:], "--texts", "1", "--max-length", "30"])
    assert short.exit_code == 0, short.output
    assert "note: each of the" in short.output and "keeps 30 of the 40 vectors asked for" in short.output

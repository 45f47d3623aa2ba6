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
from qkdb.ingest import sampling, texts
from qkdb.ingest.layout import discover, read_head, read_metadata

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
    from qkdb.ingest.sniff import SniffOptions, sniff

    (tmp_path / "m").mkdir()
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(SniffError, match=r"pip install 'qkdb\[sniff\]'"):
        sniff(SniffOptions(out=tmp_path / "out", model_path=tmp_path / "m"))


def test_options_are_checked_before_loading(tmp_path):
    from qkdb.ingest.sniff import SniffOptions

    with pytest.raises(SniffError, match="exactly one"):
        SniffOptions(out=tmp_path / "o").check()
    with pytest.raises(SniffError, match="no such model folder"):
        SniffOptions(out=tmp_path / "o", model_path=tmp_path / "nope").check()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine")
    with pytest.raises(SniffError, match="not empty"):
        SniffOptions(out=tmp_path / "o", model_path=tmp_path).check()
    with pytest.raises(SniffError, match="not a capture"):
        SniffOptions(out=tmp_path / "o", model_path=tmp_path, force=True).check()


# --------------------------------------------------------------------------- captures from a tiny Llama

N_LAYERS, N_Q, N_KV, HEAD_DIM, THETA = 3, 4, 2, 8, 5000.0


def _build_tiny(folder, arch: str = "llama", **extra):
    """A random GQA model (3 layers, 4 query / 2 KV heads, d = 8) with a BPE tokenizer that adds BOS."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts.pydoc_documents()[:40], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(folder)
    Config, Model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[arch]
    config = Config(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=N_LAYERS,
        num_attention_heads=N_Q, num_key_value_heads=N_KV, head_dim=HEAD_DIM, max_position_embeddings=1024,
        rope_parameters={"rope_type": "default", "rope_theta": THETA}, bos_token_id=1, eos_token_id=2, **extra,
    )
    torch.manual_seed(0)
    model = Model(config)
    with torch.no_grad():  # random biases where the architecture has them (they start at zero)
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                if proj.bias is not None:
                    proj.bias.normal_()
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in texts.pydoc_documents()[40:46]))
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, corpus):
    # biases make a wrong projection easier to spot
    return _build_tiny(tmp_path_factory.mktemp("tiny-llama"), "llama", attention_bias=True), corpus


def _sniff(tiny_model, out, **kw):
    from qkdb.ingest.sniff import SniffOptions, sniff

    folder, corpus = tiny_model
    opts = dict(
        out=out, model_path=folder, text=str(corpus), n_texts=3, max_length=96, q_heads=5,
        vectors_per_head=60, min_bucket_size=16, seed=11, model_name="tiny", family="Tiny",
    )
    opts.update(kw)
    return sniff(SniffOptions(**opts))


def _rope_half(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
    """Rotate-half RoPE in float64: plane j = (x_j, x_{j+d/2}) turned by pos · theta^(-2j/d)."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2) / d)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x[:, : d // 2], x[:, d // 2 :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=1)


def _linear(h: np.ndarray, layer) -> np.ndarray:
    out = h @ layer.weight.detach().double().numpy().T
    return out if layer.bias is None else out + layer.bias.detach().double().numpy()


def _reference_projections(tiny_model, windows):
    """Per text and layer: (q, k) projections (heads, seq, d) in float64, from the attention inputs."""
    import torch
    import transformers

    folder, _ = tiny_model
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    inputs: dict[int, np.ndarray] = {}

    def hook(layer):
        def grab(module, args, kwargs):
            inputs[layer] = kwargs["hidden_states"][0].double().numpy()
        return grab

    handles = [m.self_attn.register_forward_pre_hook(hook(i), with_kwargs=True) for i, m in enumerate(model.model.layers)]
    out = []
    for ids in windows:
        with torch.no_grad():
            model(input_ids=torch.as_tensor(ids)[None])
        per_layer = {}
        for i, m in enumerate(model.model.layers):
            a = m.self_attn
            h = inputs[i]
            q, k = _linear(h, a.q_proj), _linear(h, a.k_proj)
            per_layer[i] = (q.reshape(len(h), N_Q, HEAD_DIM).transpose(1, 0, 2), k.reshape(len(h), N_KV, HEAD_DIM).transpose(1, 0, 2))
        out.append(per_layer)
    for hd in handles:
        hd.remove()
    return out


def _windows(tiny_model, n=3, max_length=96):
    import transformers

    folder, corpus = tiny_model
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return texts.token_windows(
        texts.iter_documents(corpus), lambda s: tok(s, add_special_tokens=False)["input_ids"], max_length,
        bos_id=tok.bos_token_id, eos_id=tok.eos_token_id, limit=n,
    )


@pytest.fixture(scope="module")
def captured(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("cap") / "sniffed"
    return _sniff(tiny_model, out), out


def _assert_matches_reference(tiny_model, out, n_texts, per_file, pre_rope=False) -> int:
    """Every stored row equals the recomputed projection (with RoPE unless pre_rope) at its position."""
    ref = _reference_projections(tiny_model, _windows(tiny_model, n=n_texts))
    found = discover(out)
    checked = 0
    for table, kind in ((found.queries, "q"), (found.keys, "k")):
        for (layer, head), hf in table.items():
            data = read_head(hf.path)
            assert data.vectors.shape == (per_file, HEAD_DIM) and data.n_dropped == 0
            for ex in range(n_texts):
                rows = data.example_id == ex
                pos = data.positions[rows].astype(int)
                proj = ref[ex][layer][0 if kind == "q" else 1][head][pos]
                expect = proj if pre_rope else _rope_half(proj, pos.astype(np.float64), THETA)
                np.testing.assert_allclose(data.vectors[rows], expect, rtol=1e-4, atol=1e-4)
                checked += rows.sum()
    assert checked == per_file * (len(found.queries) + len(found.keys))
    return checked


def test_sniffed_vectors_are_q_and_k_projections_with_rope(tiny_model, captured):
    _, out = captured
    assert [w[0] for w in _windows(tiny_model)] == [1, 1, 1]  # the tokenizer adds BOS: every window starts with it
    assert len(discover(out).queries) == 5
    _assert_matches_reference(tiny_model, out, n_texts=3, per_file=60)


def test_sliding_window_layers_are_masked_and_recorded(tmp_path_factory, corpus, tmp_path):
    # a window much shorter than the text: later layers' inputs differ unless the capture masks like the model
    model = _build_tiny(tmp_path_factory.mktemp("tiny-mistral"), "mistral", sliding_window=12), corpus
    out = tmp_path / "mistral"
    _sniff(model, out, q_heads=None, vectors_per_head=40, n_texts=2)
    _assert_matches_reference(model, out, n_texts=2, per_file=40)
    for hf in discover(out).queries.values():
        assert set(pq.read_table(hf.path).column("sliding_window").to_pylist()) == {12}


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
    assert meta["rope_theta"] == THETA and meta["rope_pairing"] == "half" and meta["rope_scaling"] is None
    assert meta["nope_layers"] == [] and meta["source"] == "sniff"
    cap = meta["capture"]
    assert cap["seed"] == 11 and cap["max_length"] == 96 and cap["pre_rope"] is False
    assert cap["positions"] == {"policy": "log-uniform", "min_bucket_size": 16, "vectors_per_head": 60}
    assert cap["texts"]["n_texts"] == 3 and cap["q_heads"] == 5 and cap["qkdb_version"]


def test_pre_rope_capture_is_the_plain_projection(tiny_model, tmp_path):
    _sniff(tiny_model, tmp_path / "pre", pre_rope=True, q_heads=2, n_texts=2, vectors_per_head=30)
    _assert_matches_reference(tiny_model, tmp_path / "pre", n_texts=2, per_file=30, pre_rope=True)
    assert read_metadata(tmp_path / "pre")["capture"]["pre_rope"] is True


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
    assert read_metadata(out)["model"] == folder.name.lower()
    again = runner.invoke(app, args)
    assert again.exit_code == 6 and "not empty" in again.output
    bad = runner.invoke(app, ["sniff", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 6 and "exactly one of --model-path" in bad.output

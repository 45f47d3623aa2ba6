"""``qkdb sniff`` on a tiny random model of every architecture family, against an independent recomputation.

For each family (Llama, Llama 3 frequency scaling, Qwen3's q/k norms, Mistral's and Ministral's
sliding windows, Ministral3's YaRN and llama-4 query scale, SmolLM3's NoPE layers, Gemma3's local
and global RoPE, GPT-2 without RoPE) every stored row must equal the recomputation of
``tests/tiny_models.py`` (float64 numpy from the eager model's attention inputs), and the metadata
must say what was captured. A real architecture whose queries carry a position factor qkdb does not
know (Llama 4's temperature tuning) must be refused. Models are built at test time: no downloads.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

from qkdb.errors import SniffError  # noqa: E402
from qkdb.ingest.capture import texts  # noqa: E402
from qkdb.ingest.sources.layout import discover, read_head, read_metadata  # noqa: E402

N_TEXTS, MAX_LENGTH, PER_FILE = 2, 64, 40


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tm.train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in texts.pydoc_documents()[40:46]))
    return path


@pytest.fixture(scope="module")
def model_of(tmp_path_factory, tokenizer):
    built = {}

    def get(family: str):
        if family not in built:
            built[family] = tm.build(tmp_path_factory.mktemp(f"tiny-{family}"), family, *tokenizer)
        return built[family]

    return get


@pytest.fixture(scope="module")
def references(model_of, corpus):
    cache = {}

    def get(family: str):
        if family not in cache:
            folder = model_of(family)
            cache[family] = tm.reference(folder, tm.windows(folder, corpus, N_TEXTS, MAX_LENGTH), family)
        return cache[family]

    return get


def _sniff(folder, corpus, out, **kw):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    opts = dict(out=out, model_path=folder, text=str(corpus), n_texts=N_TEXTS, max_length=MAX_LENGTH, q_heads=None,
                vectors_per_head=PER_FILE, min_bucket_size=16, seed=3)
    opts.update(kw)
    return sniff(SniffOptions(**opts))


def _compare(out, ref, expected) -> int:
    """Every stored row equals ``expected(ref_layer, kind, head, positions)``; returns rows compared."""
    found = discover(out)
    compared = 0
    for table, kind in ((found.queries, "q"), (found.keys, "k")):
        for (layer, head), hf in table.items():
            data = read_head(hf.path)
            assert data.vectors.shape == (PER_FILE, tm.HEAD_DIM)
            for ex in range(N_TEXTS):
                rows = data.example_id == ex
                pos = data.positions[rows].astype(int)
                want = expected(ref[ex][layer], kind, head, pos)
                np.testing.assert_allclose(data.vectors[rows], want, rtol=1e-4, atol=1e-5,
                                           err_msg=f"l{layer:02d}h{head:02d}{kind} text {ex}")
                compared += int(rows.sum())
    assert compared == PER_FILE * (len(found.queries) + len(found.keys)) > 0
    return compared


def _post_rope(r, kind, head, pos):
    """What attention receives, without any non-RoPE position factor (the default capture)."""
    return r[kind][head][pos]


def _pre_rope(r, kind, head, pos):
    return r[f"pre_{kind}"][head][pos]


def _as_attention_sees(r, kind, head, pos):
    v = r[kind][head][pos]
    return v * r["scale"][pos][:, None] if kind == "q" else v


# family -> facts its qkdb_dataset.json must record
EXPECT = {
    "llama": dict(family="llama", rope="rotary", nope_layers=[], windows=[None, None, None]),
    "llama3": dict(family="llama", rope="rotary", nope_layers=[], windows=[None, None, None], scaling="llama3"),
    "qwen3": dict(family="Qwen3", rope="rotary", nope_layers=[], windows=[None, None, None]),
    "mistral": dict(family="Mistral", rope="rotary", nope_layers=[], windows=[12, 12, 12]),
    "ministral": dict(family="ministral", rope="rotary", nope_layers=[], windows=[12, None, 12]),
    "ministral3": dict(family="Ministral3", rope="rotary", nope_layers=[], windows=[None, None, None], scaling="yarn"),
    "smollm3": dict(family="SmolLM3", rope="rotary", nope_layers=[1], windows=[None, None, None]),
    "gemma3": dict(family="gemma3_text", rope="rotary", nope_layers=[], windows=[12, 12, None], scaling="linear",
                   layer_rope_theta=[100.0, 100.0, tm.THETA],
                   layer_rope_scaling=[None, None, {"rope_type": "linear", "factor": 2.0}]),
    "gpt2": dict(family="gpt2", rope="none", nope_layers=[0, 1, 2], windows=[None, None, None]),
}


@pytest.mark.parametrize("family", tm.FAMILIES)
def test_capture_equals_the_independent_recomputation(family, model_of, references, corpus, tmp_path):
    folder = model_of(family)
    result = _sniff(folder, corpus, tmp_path / "out")
    _compare(result.out, references(family), _post_rope)

    meta = read_metadata(result.out)
    want = EXPECT[family]
    assert meta["family"] == want["family"] and meta["rope"] == want["rope"]
    assert meta["nope_layers"] == want["nope_layers"]
    assert meta["layer_rope_theta"] == want.get("layer_rope_theta")
    assert meta["layer_rope_scaling"] == want.get("layer_rope_scaling")
    scaling = meta["rope_scaling"]
    assert (scaling or {}).get("rope_type") == want.get("scaling")
    if family == "gpt2":
        assert meta["rope_theta"] is None and meta["rope_pairing"] is None
    else:
        assert meta["rope_theta"] == tm.THETA and meta["rope_pairing"] == "half"
    windows = {}
    for hf in discover(result.out).queries.values():
        windows.setdefault(hf.layer, set()).update(pq.read_table(hf.path).column("sliding_window").to_pylist())
    assert [windows[layer] for layer in range(tm.N_LAYERS)] == [{w} for w in want["windows"]]
    check = meta["capture"]["check"]
    assert check["checked_layers"] == [0, 1, 2] and "unchecked" not in check
    assert check["max_relative_difference"] < 1e-5
    # a stable record: the folder's name, not a path of this machine
    assert meta["hf_model"] == folder.name
    assert meta["capture"]["transformers_version"]


def test_ministral3_query_scale_is_divided_out_and_recorded(model_of, references, corpus, tmp_path):
    ref = references("ministral3")
    # the scale matters at these positions: from position 16 on, up to ×1.14 at 63
    assert ref[0][0]["scale"][15] == 1.0 and ref[0][0]["scale"][63] == pytest.approx(1 + 0.1 * np.log(4))
    result = _sniff(model_of("ministral3"), corpus, tmp_path / "out")
    meta = read_metadata(result.out)
    (entry,) = meta["position_scaling"]
    assert entry == {
        "kind": "q", "type": "llama4", "beta": 0.1, "original_max_position_embeddings": 16,
        "formula": "1 + beta * ln(1 + floor(position / original_max_position_embeddings))",
        "layers": [0, 1, 2], "removed": True, "max_factor_in_capture": pytest.approx(1 + 0.1 * np.log(4)),
    }
    assert any("position-dependent factor that is not RoPE" in n and "divided out" in n for n in result.notes)
    # what is stored is not what attention saw: the difference is the scale, so this could fail
    with pytest.raises(AssertionError):
        _compare(result.out, ref, _as_attention_sees)


def test_ministral3_scale_can_be_kept_and_is_then_recorded_as_kept(model_of, references, corpus, tmp_path):
    result = _sniff(model_of("ministral3"), corpus, tmp_path / "out", keep_position_scaling=True)
    _compare(result.out, references("ministral3"), _as_attention_sees)
    (entry,) = read_metadata(result.out)["position_scaling"]
    assert entry["removed"] is False
    assert any("kept in the stored vectors" in n for n in result.notes)


@pytest.mark.parametrize("family", ["ministral3", "gemma3", "smollm3", "qwen3", "gpt2"])
def test_pre_rope_recovers_each_layers_pre_rotation_vectors(family, model_of, references, corpus, tmp_path):
    # Ministral3: without its query scale; Gemma3: local and global layers each by their own RoPE;
    # SmolLM3: NoPE layer as is; Qwen3: after the q/k norms; GPT-2: no RoPE to undo
    result = _sniff(model_of(family), corpus, tmp_path / "out", pre_rope=True)
    _compare(result.out, references(family), _pre_rope)
    assert read_metadata(result.out)["capture"]["pre_rope"] is True


def test_an_unknown_position_factor_is_refused(tmp_path, tokenizer, corpus):
    # Llama 4 multiplies the queries of its NoPE layers by 1 + 0.1·ln(1 + floor((t + 1) / 8)):
    # a real architecture whose factor qkdb does not know. Its capture must not pass silently.
    folder = _build_llama4(tmp_path / "llama4", tokenizer)
    with pytest.raises(SniffError, match=r"layer 0 queries \(head \d\): attention receives the q_proj output times "
                                         r"a factor that varies from 1 \(position \d+\) to 1\.\d+ .*not RoPE"):
        _sniff(folder, corpus, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # --unchecked captures it anyway, and says so in the metadata
    result = _sniff(folder, corpus, tmp_path / "out", unchecked=True)
    assert read_metadata(result.out)["capture"]["check"]["method"].startswith("none")
    assert any("--unchecked" in n for n in result.notes)


def _build_llama4(folder, tokenizer):
    import shutil

    import torch
    import transformers

    tok_folder, vocab = tokenizer
    shutil.copytree(tok_folder, folder)
    config = transformers.Llama4TextConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=1024,
        num_local_experts=2, interleave_moe_layer_step=1, moe_layers=[], use_qk_norm=False,
        attn_temperature_tuning=True, floor_scale=8, attn_scale=0.1, no_rope_layers=[0, 1],
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0}, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def test_short_texts_are_reported_per_head_and_too_few_refused_before_loading(model_of, corpus, tmp_path):
    import shutil

    folder = model_of("llama")
    result = _sniff(folder, corpus, tmp_path / "short", n_texts=1, max_length=30, vectors_per_head=40)
    assert read_head(next(iter(discover(result.out).queries.values())).path).vectors.shape[0] == 30
    (line,) = [n for n in result.notes if "vectors asked" in n]
    assert "each of the 18 head files keeps 30 of the 40 vectors asked for (l00h00q" in line
    assert read_metadata(result.out)["capture"]["positions"]["kept_per_head"] == 30
    # fewer than an ingest's minimum: refused before the model loads (here it could not: no weights)
    broken = tmp_path / "no-weights"
    shutil.copytree(folder, broken)
    for f in broken.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(SniffError, match=r"only 10 vectors .*fewer than the 16 an ingest needs"):
        _sniff(broken, corpus, tmp_path / "few", n_texts=1, max_length=10)
    with pytest.raises(SniffError, match="cannot load it as a causal LM"):
        _sniff(broken, corpus, tmp_path / "few", n_texts=1, max_length=30)


def test_a_model_without_rope_ingests_without_rope_planes(model_of, corpus, tmp_path, home):
    import qkdb

    out = _sniff(model_of("gpt2"), corpus, tmp_path / "gpt2", model_name="tiny-gpt2", max_length=64,
                 vectors_per_head=60).out
    result = qkdb.ingest(path=out, home=home, workers=1)
    assert sum("no rotary position embedding (rope: none)" in n for n in result.notes) == 1
    con = qkdb.connect(home)
    assert con.sql("select rope, rope_theta, rope_pairing, nope_layers from models").fetchall() == [
        ("none", None, None, [0, 1, 2])]
    assert con.sql("select count(*) from rope_planes").fetchall() == [(0,)]
    assert con.sql("select bool_and(is_nope), count(*) from heads").fetchall() == [(True, 12)]
    assert con.sql("select count(*) from complement").fetchall()[0][0] > 0  # the seeds' own view stays
    summary = con.sql("select layers, n_heads, n_heads_rope_planes, mean_n_rotating from rotation_planes_summary "
                      "where scope = 'model'").fetchall()
    assert summary == [("nope", 12, 0, None)]
    status = dict(con.sql("select id, status from findings where id like '002.F4.active%'").fetchall())
    assert set(status.values()) == {"no data"}


def test_per_layer_rope_and_position_scaling_reach_the_warehouse(model_of, corpus, tmp_path, home):
    import qkdb

    gemma = _sniff(model_of("gemma3"), corpus, tmp_path / "gemma", model_name="tiny-gemma", vectors_per_head=60).out
    qkdb.ingest(path=gemma, home=home, workers=1)
    mini = _sniff(model_of("ministral3"), corpus, tmp_path / "mini", model_name="tiny-mini", vectors_per_head=60,
                  keep_position_scaling=True).out
    kept = qkdb.ingest(path=mini, home=home, workers=1)
    assert sum("position-dependent factor that is not RoPE" in n for n in kept.notes) == 1
    con = qkdb.connect(home)
    assert con.sql("select layer_rope_theta from models where model = 'tiny-gemma'").fetchall() == [
        ([100.0, 100.0, tm.THETA],)]
    # each layer's RoPE planes use that layer's frequencies: plane 1 turns at theta^(-2/8)
    omega = dict(con.sql("select layer, any_value(omega) from rope_planes where model = 'tiny-gemma' and j = 1 "
                         "group by layer").fetchall())
    assert omega[0] == pytest.approx(100.0 ** -0.25) and omega[2] == pytest.approx(tm.THETA ** -0.25 / 2.0)
    ((scaling,),) = con.sql("select position_scaling from models where model = 'tiny-mini'").fetchall()
    assert json.loads(scaling)[0]["removed"] is False and json.loads(scaling)[0]["layers"] == [0, 1, 2]


def test_registry_ministral3_records_the_hub_captures_query_scale():
    from qkdb.ingest import spec_notes
    from qkdb.ingest.sources.registry import find

    spec = find("ministral3-3b")
    (entry,) = json.loads(spec.position_scaling)
    assert entry["type"] == "llama4" and entry["removed"] is False
    assert find("llama3.2-1b").position_scaling is None
    (note,) = spec_notes(spec)
    assert "queries carry a position-dependent factor that is not RoPE" in note

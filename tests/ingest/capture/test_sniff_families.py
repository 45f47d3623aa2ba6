"""``qkdb sniff`` on a tiny random model of every architecture family, against an independent recomputation.

For each family of :data:`helpers.tiny_models.FAMILY_SPECS` — Llama, Llama 3 frequency scaling,
Qwen2 with YaRN, Qwen3's and OLMo-2's q/k norms, Mistral's and Ministral's sliding windows, Mixtral,
Ministral3's YaRN and llama-4 query scale, SmolLM3's NoPE layers, Gemma-2's softcapping and
query_pre_attn_scalar, Gemma-3's local and global RoPE, GPT-2 without RoPE, the partial rotary of
GPT-NeoX/Pythia, Persimmon, Phi and StableLM, Phi-3's longrope, the interleaved RoPE of GPT-J,
Cohere (with and without q/k norm) and GLM, DeepSeek-V2/V3's multi-head latent attention — every
stored row must equal the recomputation of ``tests/helpers/tiny_models.py`` (float64 numpy from
the eager model's attention inputs, with the layout a reader of the family's modeling code knows),
and the recorded pairing, rotated dims, offset, frequencies, amplitude and attention scale must be
the model's own (its rotary module's ``inv_freq`` to 1e-6). Falcon, Bloom and MPT are refused in
one line. A real architecture whose queries carry a position factor qkdb does not know (Llama 4's
temperature tuning) must be refused. Models are built at test time: no downloads.
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

from qkdb.errors import EXIT_CODES, SniffError  # noqa: E402
from qkdb.ingest.capture import texts  # noqa: E402
from qkdb.ingest.sources.layout import discover, read_head, read_metadata  # noqa: E402

N_TEXTS, MAX_LENGTH, PER_FILE = 2, 64, 40


@pytest.fixture(scope="module")
def corpus(family_corpus):
    return family_corpus


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
    return tm.sniff_family(folder, corpus, out, **{"n_texts": N_TEXTS, "max_length": MAX_LENGTH, "vectors_per_head": PER_FILE, **kw})


def _compare(out, ref, expected) -> int:
    """Every stored row equals ``expected(ref_layer, kind, head, positions)``; returns rows compared."""
    found = discover(out)
    compared = 0
    for table, kind in ((found.queries, "q"), (found.keys, "k")):
        for (layer, head), hf in table.items():
            data = read_head(hf.path)
            assert data.vectors.shape == (PER_FILE, ref[0][layer]["q"].shape[-1])
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


# family -> facts its qkdb_dataset.json must record besides the RoPE layout (FAMILY_SPECS)
EXPECT = {
    "llama": dict(family="llama"),
    "llama3": dict(family="llama", scaling="llama3"),
    "qwen3": dict(family="Qwen3"),
    "mistral": dict(family="Mistral", windows=[12, 12, 12]),
    "ministral": dict(family="ministral", windows=[12, None, 12]),
    "ministral3": dict(family="Ministral3", scaling="yarn"),
    "smollm3": dict(family="SmolLM3", nope_layers=[1]),
    "gemma3": dict(family="gemma3_text", windows=[12, 12, None], scaling="linear",
                   layer_rope_theta=[100.0, 100.0, tm.THETA],
                   layer_rope_scaling=[None, None, {"rope_type": "linear", "factor": 2.0}]),
    "gpt2": dict(family="gpt2", rope="none", nope_layers=[0, 1, 2], theta=None),
    "qwen2": dict(family="qwen2", scaling="yarn"),
    "mixtral": dict(family="mixtral"),
    "olmo2": dict(family="olmo2"),
    "gemma2": dict(family="gemma2", windows=[12, None, 12]),
    "gpt_neox": dict(family="gpt_neox"),
    "persimmon": dict(family="persimmon"),
    "phi": dict(family="phi"),
    "phi3": dict(family="phi3", scaling="longrope"),
    "stablelm": dict(family="stablelm"),
    "gptj": dict(family="gptj", theta=None),
    "cohere": dict(family="cohere"),
    "cohere_qk_norm": dict(family="cohere"),
    "glm": dict(family="glm"),
    "deepseek_v2": dict(family="deepseek_v2", scaling="yarn"),
    "deepseek_v3": dict(family="deepseek_v3", scaling="yarn"),
    "olmo_clip": dict(family="olmo"),
    "gpt_oss": dict(family="gpt_oss", windows=[12, None, 12]),
}
CAPTURED = [f for f, spec in tm.FAMILY_SPECS.items() if spec.refused is None]
REFUSED = [f for f, spec in tm.FAMILY_SPECS.items() if spec.refused is not None]


@pytest.mark.parametrize("family", CAPTURED)
def test_capture_equals_the_independent_recomputation(family, model_of, references, corpus, tmp_path):
    folder = model_of(family)
    result = _sniff(folder, corpus, tmp_path / "out")
    _compare(result.out, references(family), _post_rope)

    meta = read_metadata(result.out)
    want, spec = EXPECT[family], tm.FAMILY_SPECS[family]
    assert meta["family"] == want["family"] and meta["rope"] == want.get("rope", "rotary")
    assert meta["nope_layers"] == want.get("nope_layers", [])
    assert meta["layer_rope_theta"] == want.get("layer_rope_theta")
    assert meta["layer_rope_scaling"] == want.get("layer_rope_scaling")
    assert (meta["rope_scaling"] or {}).get("rope_type") == want.get("scaling")
    assert "partial_rotary_factor" not in (meta["rope_scaling"] or {})  # rotary_dims says it
    assert meta["rope_theta"] == want.get("theta", tm.THETA)
    windows = {}
    for hf in discover(result.out).queries.values():
        windows.setdefault(hf.layer, set()).update(pq.read_table(hf.path).column("sliding_window").to_pylist())
    assert [windows[layer] for layer in range(tm.N_LAYERS)] == [{w} for w in want.get("windows", [None] * 3)]
    check = meta["capture"]["check"]
    assert check["checked_layers"] == [0, 1, 2] and "unchecked" not in check
    assert check["max_relative_difference"] < 1e-5
    # a stable record: the folder's name, not a path of this machine
    assert meta["hf_model"] == folder.name
    assert meta["capture"]["transformers_version"]
    # a local folder's weights are hashed here, file by file (issue 40)
    import hashlib

    weights = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.safetensors"))}
    assert weights and meta["capture"]["weight_files"] == {n: {"sha256": h, "from": "hashed"} for n, h in weights.items()}
    _assert_rope_is_the_models(meta, spec, folder, corpus, family)


def _assert_rope_is_the_models(meta, spec, folder, corpus, family):
    """The recorded layout is the family's, the frequencies and scales are the model's own modules'."""
    assert (meta["rope_pairing"], meta["rotary_dims"], meta["rotary_offset"]) == (
        (spec.pairing, spec.r, spec.offset) if spec.pairing else (None, None, None))
    truth = tm.rope_truth(folder, tm.windows(folder, corpus, 1, MAX_LENGTH)[0], family)
    rope_layers = [l for l, t in enumerate(truth) if t["inv_freq"] is not None]
    if not rope_layers:
        assert meta["rope_inv_freq"] is None and meta["rope_attention_factor"] is None
    else:
        full = [l for l in rope_layers if (EXPECT[family].get("windows") or [None] * 3)[l] is None] or rope_layers
        np.testing.assert_allclose(meta["rope_inv_freq"], truth[full[0]]["inv_freq"], rtol=1e-6, atol=0)
        assert meta["rope_attention_factor"] == pytest.approx(truth[full[0]]["attention_factor"], rel=1e-6)
        differ = any(not np.allclose(truth[l]["inv_freq"], truth[full[0]]["inv_freq"], rtol=1e-6) for l in rope_layers)
        if differ:  # Gemma-3's local layers: each layer's own frequencies
            for layer, t in enumerate(truth):
                got = meta["layer_rope_inv_freq"][layer]
                assert got is None if t["inv_freq"] is None else np.allclose(got, t["inv_freq"], rtol=1e-6, atol=0)
        else:
            assert meta["layer_rope_inv_freq"] is None
    scale = truth[0]["scaling"]
    if scale is not None:  # the scaling each layer's attention module passes to attention
        assert meta["attention_scale"] == pytest.approx(scale, rel=1e-12)
        assert meta["layer_attention_scale"] is None


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


@pytest.mark.parametrize("family", ["ministral3", "gemma3", "smollm3", "qwen3", "gpt2", "gpt_neox", "phi3", "gptj",
                                    "cohere_qk_norm", "glm", "deepseek_v2", "deepseek_v3"])
def test_pre_rope_recovers_each_layers_pre_rotation_vectors(family, model_of, references, corpus, tmp_path):
    # Ministral3: without its query scale; Gemma3: local and global layers each by their own RoPE;
    # SmolLM3: NoPE layer as is; Qwen3: after the q/k norms; GPT-2: no RoPE to undo; partial,
    # interleaved and MLA layouts on their own slices (DeepSeek-V3's in the [evens | odds] order
    # its rotation works in, as the post-RoPE vectors are)
    result = _sniff(model_of(family), corpus, tmp_path / "out", pre_rope=True)
    spec = tm.FAMILY_SPECS[family]

    def pre(r, kind, head, pos):
        x = r[f"pre_{kind}"][head][pos]
        if spec.deinterleave:
            part = x[:, spec.offset:spec.offset + spec.r]
            x = np.concatenate([x[:, :spec.offset], part[:, 0::2], part[:, 1::2], x[:, spec.offset + spec.r:]], axis=1)
        return x

    _compare(result.out, references(family), pre)
    assert read_metadata(result.out)["capture"]["pre_rope"] is True


@pytest.mark.parametrize("family", REFUSED)
def test_refused_families_are_refused_in_one_line_naming_the_reason(family, model_of, corpus, tmp_path):
    # Falcon, Bloom and MPT compute attention in their own code (Bloom, MPT and Falcon-ALiBi add ALiBi
    # biases): refused from the config, before the weights load (here there are none); OLMo clamping
    # q/k before RoPE: refused on the first text, no layout reproducing its rows
    spec = tm.FAMILY_SPECS[family]
    folder = _without_weights(model_of(family), tmp_path / "no-weights") if not family.startswith("olmo") \
        else model_of(family)
    with pytest.raises(SniffError, match=spec.refused) as err:
        _sniff(folder, corpus, tmp_path / "out")
    message = str(err.value)
    assert "\n" not in message and "Error" not in message and "NoneType" not in message
    assert not (tmp_path / "out").exists()


def _without_weights(folder, to):
    import shutil

    shutil.copytree(folder, to)
    for f in to.glob("*.safetensors"):
        f.unlink()
    return to


def test_cli_refusal_is_one_line_with_the_input_exit_code(model_of, corpus, runner, tmp_path):
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    r = runner.invoke(app, ["sniff", "--model-path", str(model_of("mpt")), "--out", str(tmp_path / "o"),
                            "--text", str(corpus), "--texts", "1", "--max-length", "32", "-q"])
    assert r.exit_code == EXIT_CODES["input"]
    (line,) = [x for x in r.output.strip().splitlines() if x.startswith("error:")]
    assert "ALiBi" in line and "AttentionInterface" in line and "Traceback" not in r.output


def test_unchecked_records_a_layout_only_when_the_rows_establish_it(model_of, tokenizer, corpus, tmp_path,
                                                                    monkeypatch):
    # Cohere, following --unchecked: the first text's rows still establish interleaved pairs
    meta = read_metadata(_sniff(model_of("cohere"), corpus, tmp_path / "cohere", unchecked=True).out)
    assert (meta["rope_pairing"], meta["rotary_dims"], meta["rotary_offset"]) == ("interleaved", 16, 0)
    assert meta["capture"]["check"]["method"].startswith("none")
    # Llama 4: its RoPE layer's rows establish interleaved pairs (its complex cos/sin); the NoPE layer
    # whose queries carry the unknown factor matches nothing and stays the config's NoPE layer
    meta = read_metadata(_sniff(_build_llama4(tmp_path / "llama4", tokenizer), corpus, tmp_path / "l4",
                                unchecked=True).out)
    assert (meta["rope_pairing"], meta["rotary_dims"], meta["nope_layers"]) == ("interleaved", 8, [0])
    # a step the check does not know (a constant added to the queries after RoPE): no layout reproduces
    # the rows; nothing guessed, and said so
    tm.unknown_transform(monkeypatch)
    result = _sniff(model_of("llama"), corpus, tmp_path / "shifted", unchecked=True)
    meta = read_metadata(result.out)
    assert meta["rope"] == "rotary" and meta["rope_pairing"] is None and meta["rotary_dims"] == tm.HEAD_DIM
    assert meta["rotary_offset"] == 0  # the whole head turns: the offset is known
    assert meta["rope_inv_freq"] is not None and meta["capture"]["rope"]["layout_from"] is None
    assert any("could not be established" in n and "no RoPE planes" in n for n in result.notes)


def test_olmo_clip_qkv_is_reproduced_and_named(model_of, references, corpus, tmp_path):
    # OLMo clamps every query and key to ±clip_qkv between the projection and RoPE: the check applies the
    # config's clamp (most of these tiny model's values reach it, so a missing clamp could not pass)
    ref = references("olmo_clip")
    assert np.mean(np.abs(ref[0][0]["pre_q"]) == 0.05) > 0.1
    result = _sniff(model_of("olmo_clip"), corpus, tmp_path / "out")
    _compare(result.out, ref, _post_rope)
    projection = read_metadata(result.out)["capture"]["rope"]["layout"]["projection"]
    assert projection == {"q": "q_proj → clamped to ±0.05 (the config's clip_qkv)",
                          "k": "k_proj → clamped to ±0.05 (the config's clip_qkv)"}


def test_gemma2_softcapping_is_handed_on_and_recorded(model_of, tokenizer, references, corpus, tmp_path):
    # the softcap changes what later layers receive: a capture that dropped it could not match
    plain = tm.build(tmp_path / "no-softcap", "gemma2", *tokenizer, attn_logit_softcapping=None)
    ref_plain = tm.reference(plain, tm.windows(plain, corpus, 1, MAX_LENGTH), "gemma2")
    assert relative(ref_plain[0][2]["q"], references("gemma2")[0][2]["q"]) > 1e-2
    assert relative(ref_plain[0][0]["q"], references("gemma2")[0][0]["q"]) < 1e-6  # same weights
    meta = read_metadata(_sniff(model_of("gemma2"), corpus, tmp_path / "out").out)
    assert meta["capture"]["attention"] == {
        "implementation": "eager (modeling_gemma2)", "softcap": tm.GEMMA2_SOFTCAP, "asked": "auto",
        "why": f"attn_logit_softcapping {tm.GEMMA2_SOFTCAP:g}: sdpa does not support softcapping"}
    assert meta["attention_scale"] == pytest.approx(tm.GEMMA2_QUERY_PRE_ATTN_SCALAR ** -0.5, rel=1e-12)
    assert meta["capture"]["attention"] != read_metadata(
        _sniff(plain, corpus, tmp_path / "plain").out)["capture"]["attention"]


def relative(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_mla_records_the_rope_slice_and_the_shared_rotary_key(model_of, corpus, tmp_path):
    meta = read_metadata(_sniff(model_of("deepseek_v3"), corpus, tmp_path / "out").out)
    rope = meta["capture"]["rope"]
    assert rope["shared_rotary_key"]["layers"] == [0, 1, 2]
    assert rope["layout"]["projection"]["k"].startswith("kv_b_proj")
    assert "de-interleaved" in rope["layout"]["input_order"]
    # the stored keys of every head carry the same rotated slice at a shared position
    found = discover(tmp_path / "out")
    (l, h0), (_, h1) = sorted(found.keys)[:2]
    a, b = read_head(found.keys[(l, h0)].path), read_head(found.keys[(l, h1)].path)
    common = sorted(set(zip(a.example_id, a.positions)) & set(zip(b.example_id, b.positions)))
    assert common
    ia = [list(zip(a.example_id, a.positions)).index(c) for c in common]
    ib = [list(zip(b.example_id, b.positions)).index(c) for c in common]
    np.testing.assert_array_equal(a.vectors[ia, 16:], b.vectors[ib, 16:])
    assert not np.allclose(a.vectors[ia, :16], b.vectors[ib, :16])


def test_longrope_texts_on_both_sides_of_the_switch_are_refused_before_loading(model_of, tmp_path):
    # one short text (<= 32 tokens: short factors) and long ones (long factors)
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"text": "A short one."}) + "\n" + json.dumps({"text": texts.pydoc_documents()[41]}) + "\n")
    broken = _without_weights(model_of("phi3"), tmp_path / "phi3-no-weights")  # refused before loading weights
    with pytest.raises(SniffError, match=r"longrope uses its short factors for texts of up to 32 tokens .*\(1 short, "
                                         r"1 long\)"):
        _sniff(broken, docs, tmp_path / "out", pack=False, vectors_per_head=16)
    # all short: captured with the short factor set, and the record says which
    result = _sniff(model_of("phi3"), docs, tmp_path / "short", pack=False, max_length=32, vectors_per_head=16)
    meta = read_metadata(result.out)
    assert meta["capture"]["rope"]["longrope"]["factor_set"] == "short_factor"
    truth = tm.rope_truth(model_of("phi3"), list(range(1, 20)), "phi3")
    np.testing.assert_allclose(meta["rope_inv_freq"], truth[0]["inv_freq"], rtol=1e-6, atol=0)


def test_frequencies_that_change_between_texts_are_refused(tokenizer, tmp_path):
    # dynamic NTK rescales above max_position_embeddings: a long text and a short one turn differently
    folder = tm.build(tmp_path / "dynamic", "llama", *tokenizer,
                      rope_parameters={"rope_type": "dynamic", "rope_theta": tm.THETA, "factor": 4.0},
                      max_position_embeddings=24)
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"text": texts.pydoc_documents()[41]}) + "\n" + json.dumps({"text": "Short text."}) + "\n")
    with pytest.raises(SniffError, match=r"layer \d: the RoPE frequencies .* of text 1 .* differ from those of the "
                                         r"first text"):
        _sniff(folder, docs, tmp_path / "out", pack=False, vectors_per_head=16)
    assert not (tmp_path / "out").exists()


def test_a_failing_forward_pass_is_one_line_without_the_libraries_message(tokenizer, corpus, tmp_path):
    # GPT-2 with 16 learned positions cannot read a 64-token text: an error inside transformers
    folder = tm.build(tmp_path / "short-gpt2", "gpt2", *tokenizer, n_positions=16)
    with pytest.raises(SniffError) as err:
        _sniff(folder, corpus, tmp_path / "out")
    message = str(err.value)
    assert "forward pass failed on text 0 in transformers' " in message and "--debug" in message
    assert "modeling_gpt2.py" in message and "index" not in message.lower()  # not torch's "index out of range"
    assert err.value.__cause__ is not None  # --debug shows it


def test_rings_models_draw_circles_in_the_true_planes_only(tokenizer, corpus, tmp_path):
    # build(rings=True): layer 0's keys at every position are one vector turned by RoPE
    folder = tm.build(tmp_path / "rings", "gpt_neox", *tokenizer, rings=True)
    meta = read_metadata(_sniff(folder, corpus, tmp_path / "out", vectors_per_head=60).out)
    found = discover(tmp_path / "out")
    keys = read_head(found.keys[min(k for k in found.keys if k[0] == 0)].path).vectors.astype(np.float64)
    r = meta["rotary_dims"]
    radius = np.hypot(keys[:, :r // 2], keys[:, r // 2:r])
    assert np.all(radius.std(axis=0) < 0.02 * radius.mean(axis=0))  # circles in each true plane
    fixed = keys[:, r:]
    assert np.all(fixed.std(axis=0) < 0.02 * np.abs(fixed).mean())  # the unrotated dims stay put
    # but in any other pairing the radius wanders
    wrong = np.hypot(keys[:, 0:r:2], keys[:, 1:r:2])
    assert np.any(wrong.std(axis=0) > 0.1 * wrong.mean(axis=0))


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


def test_a_layer_given_cos_sin_that_does_not_rotate_is_recorded_as_nope_in_one_grammatical_note(tmp_path, tokenizer,
                                                                                               corpus):
    # Cohere2: its global layer (1) is handed cos/sin like the others but applies no RoPE
    import shutil

    import torch
    import transformers

    folder = tmp_path / "cohere2"
    tok_folder, vocab = tokenizer
    shutil.copytree(tok_folder, folder)
    config = transformers.Cohere2Config(
        vocab_size=vocab, hidden_size=4 * tm.WIDE, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=tm.WIDE, max_position_embeddings=1024, sliding_window=12,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0}, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    result = _sniff(folder, corpus, tmp_path / "out")
    assert read_metadata(result.out)["nope_layers"] == [1]
    assert "layer 1 is given cos/sin but does not rotate its queries and keys: recorded as NoPE layers " \
           "(nope_layers)" in result.notes


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


@pytest.mark.parametrize("family", ["phi", "glm", "gptj", "llama3", "deepseek_v2"])
def test_frequency_usage_uses_the_captures_own_planes(family, model_of, corpus, tmp_path, home):
    """Partial rotary (phi: 6 of 16 dims), interleaved (glm, gptj), scaled (llama3) and MLA's last dims
    (deepseek_v2): every pair's plane parts, recomputed from the stored vectors with the layout the capture
    recorded, are frequency_usage's, and the frequencies are the recorded ones (SPEC §4.8)."""
    import qkdb
    from qkdb.ingest.metrics.frequency_usage import causal_pairs
    from qkdb.ingest.metrics.rope_planes import plane_coordinates

    out = _sniff(model_of(family), corpus, tmp_path / family, model_name=f"tiny-{family}", vectors_per_head=60).out
    meta = read_metadata(out)
    qkdb.ingest(path=out, home=home, workers=1, frequency_pairs=None)
    con = qkdb.connect(home)
    r, off, pairing = meta["rotary_dims"], meta["rotary_offset"], meta["rope_pairing"]
    stored = tm.stored_vectors(out)
    ratio = meta["n_q_heads"] // meta["n_kv_heads"]
    rows = con.sql("select layer, head, j, omega, logit_share, nonrotating_dims, nonrotating_share, trained_context "
                   "from frequency_usage order by layer, head, j").fetchall()
    assert rows and {row[5] for row in rows} == {meta["head_dim"] - r}
    re, im = plane_coordinates(r, pairing)
    re, im = re + off, im + off
    rest = np.setdiff1d(np.arange(meta["head_dim"]), np.arange(off, off + r))
    by_head = {}
    for layer, head, j, omega, share, _, rest_share, trained in rows:
        by_head.setdefault((layer, head), []).append((j, omega, share, rest_share, trained))
    # (the first positions a sampled capture keeps for attention mass are outside its position policy: every
    # metric but attention mass leaves them out, this one too)
    first = meta["capture"]["positions"].get("keep_first", 0)
    for (layer, head), planes in by_head.items():
        q, k = stored[(layer, head, "q")], stored[(layer, head // ratio, "k")]
        kq, kk = q.positions >= first, k.positions >= first
        qi, ki, _ = causal_pairs(q.positions[kq], q.example_id[kq], k.positions[kk], k.example_id[kk], None,
                                 np.random.default_rng(0))
        Q, K = q.vectors[kq].astype(np.float64)[qi], k.vectors[kk].astype(np.float64)[ki]
        parts = np.abs(np.concatenate([Q[:, re] * K[:, re] + Q[:, im] * K[:, im],
                                       (Q[:, rest] * K[:, rest]).sum(axis=1, keepdims=True)], axis=1)).mean(axis=0)
        np.testing.assert_allclose([p[2] for p in planes], parts[:-1] / parts.sum(), rtol=1e-9, atol=1e-12)
        assert planes[0][3] == pytest.approx(parts[-1] / parts.sum(), abs=1e-12)
        freqs = (meta.get("layer_rope_inv_freq") or [None] * (layer + 1))[layer] or meta["rope_inv_freq"]
        np.testing.assert_allclose([p[1] for p in planes], freqs, rtol=1e-12)
    if family == "llama3":  # the scaled RoPE's original length, recorded by the capture from its config
        assert {p[4] for ps in by_head.values() for p in ps} == {64}
        ((base, applied),) = con.sql("select omega_trained, omega from frequency_usage where j = (select max(j) "
                                     "from frequency_usage) limit 1").fetchall()
        assert base == pytest.approx(tm.THETA ** (-(r - 2) / r)) and applied < base

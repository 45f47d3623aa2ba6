"""A family whose attention adds a learned sink logit per head (gpt-oss) runs on a kernel that honours it.

sdpa and flash attention drop gpt-oss's ``sinks``: from layer 1 on every hidden state, so every stored
query and key, would differ from the model's own, and the normaliser would miss the sink's share. At
default settings the capture must pick the model's eager attention, and refuse ``--attn sdpa``; every
stored weight ``exp(logit - lse)`` must then be the model's own eager probability.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

from qkdb.errors import SniffError  # noqa: E402
from qkdb.ingest.sources.layout import discover, read_head, read_metadata  # noqa: E402

N_TEXTS, T = 2, 24


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory, tokenizer):
    return tm.build(tmp_path_factory.mktemp("tiny-gpt-oss"), "gpt_oss", *tokenizer)


def test_the_default_runs_eager_attention_and_every_weight_is_the_models(gpt_oss, family_corpus, tmp_path):
    out = tmp_path / "out"
    tm.sniff_family(gpt_oss, family_corpus, out, n_texts=N_TEXTS, max_length=T, dense=True,
                    vectors_per_head=N_TEXTS * T, min_bucket_size=8)
    meta = read_metadata(out)
    assert "eager" in meta["capture"]["attention"]["implementation"]
    normaliser = meta["capture"]["normaliser"]
    assert all(e["sinks"] for e in normaliser["layers"])
    layers = {e["layer"]: e for e in normaliser["layers"]}
    model = transformers.AutoModelForCausalLM.from_pretrained(gpt_oss, dtype=torch.float32, attn_implementation="eager")
    probs = []
    with torch.inference_mode():
        for ids in tm.windows(gpt_oss, family_corpus, N_TEXTS, T):
            res = model(input_ids=torch.as_tensor(ids)[None], use_cache=False, output_attentions=True)
            probs.append([a[0].double().numpy() for a in res.attentions])
    found = discover(out)
    keys = {lh: read_head(hf.path) for lh, hf in found.keys.items()}
    group = meta["n_q_heads"] // meta["n_kv_heads"]
    compared = 0
    for (layer, head), hf in found.queries.items():
        q, k = read_head(hf.path), keys[(layer, head // group)]
        lse = pq.read_table(hf.path, columns=["lse"]).column("lse").to_numpy()
        for ex in range(N_TEXTS):
            qr, kr = q.example_id == ex, k.example_id == ex
            t, s = q.positions[qr].astype(int), k.positions[kr].astype(int)
            logits = layers[layer]["scaling"] * (q.vectors[qr].astype(np.float64) @ k.vectors[kr].astype(np.float64).T)
            weights = np.exp(logits - lse[qr][:, None])
            seen = s[None, :] <= t[:, None]
            if q.sliding_window:
                seen &= (t[:, None] - s[None, :]) < q.sliding_window
            want = probs[ex][layer][head][np.ix_(t, s)]
            np.testing.assert_allclose(weights[seen], want[seen], rtol=0, atol=1e-5, err_msg=f"l{layer}h{head}")
            compared += int(seen.sum())
            # the sink takes a share: the keys' weights sum below 1
            assert (want.sum(axis=1) < 1 - 1e-6).all()
    assert compared > 500


def test_sdpa_is_refused_for_sink_logits(gpt_oss, family_corpus, tmp_path):
    with pytest.raises(SniffError, match=r"--attn sdpa: the model's attention adds a learned sink logit per head"):
        tm.sniff_family(gpt_oss, family_corpus, tmp_path / "out", n_texts=1, max_length=T, dense=True,
                        vectors_per_head=T, min_bucket_size=8, attn="sdpa")

"""Every captured query's softmax normaliser makes every captured (query, key) weight the model's own.

For a tiny random model of every family the capture covers (the coverage matrix of docs/sniff.md:
sliding windows, Gemma-2's softcapping, multi-head latent attention, NoPE layers, partial rotary,
llama-4 query scaling ...), every position of two short texts is captured; then for every captured
query row t and every key row s of the same text and KV head, ``exp(logit(t, s) − lse_t)`` —
``logit`` from the stored vectors, the recorded scaling and softcap — must equal the probability
the model's own eager attention gives (``output_attentions``) within 1e-5, and the pairs the layer
masks must be the pairs eager attention gives no weight.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

from qkdb.ingest.sources.layout import discover, read_head, read_metadata  # noqa: E402

N_TEXTS, MAX_LENGTH = 2, 40
CAPTURED = [f for f, spec in tm.FAMILY_SPECS.items() if spec.refused is None]


def _eager_probabilities(folder, windows) -> list[list[np.ndarray]]:
    """Per text, per layer: the model's eager attention probabilities (n_q, T, T), float64."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    out = []
    with torch.inference_mode():
        for ids in windows:
            res = model(input_ids=torch.as_tensor(ids)[None], use_cache=False, output_attentions=True)
            out.append([a[0].double().numpy() for a in res.attentions])
    return out


def _query_factor(meta: dict, layer: int, positions: np.ndarray) -> np.ndarray:
    """What the capture divided out of layer's stored queries (position_scaling with removed = true)."""
    factor = np.ones(len(positions))
    for s in meta.get("position_scaling") or []:
        if s["kind"] == "q" and s["removed"] and layer in s["layers"]:
            factor *= tm.llama4_scale(positions, s["beta"], s["original_max_position_embeddings"])
    return factor


@pytest.mark.parametrize("family", CAPTURED)
def test_captured_weights_are_the_models_eager_attention(family, model_of, family_corpus, tmp_path):
    folder = model_of(family)
    out = tmp_path / "out"
    tm.sniff_family(folder, family_corpus, out, n_texts=N_TEXTS, max_length=MAX_LENGTH,
                    vectors_per_head=N_TEXTS * MAX_LENGTH, min_bucket_size=8)
    meta = read_metadata(out)
    normaliser = meta["capture"]["normaliser"]
    layers = {e["layer"]: e for e in normaliser["layers"]}
    probs = _eager_probabilities(folder, tm.windows(folder, family_corpus, N_TEXTS, MAX_LENGTH))
    group = meta["n_q_heads"] // meta["n_kv_heads"]
    found = discover(out)
    keys = {lh: read_head(hf.path) for lh, hf in found.keys.items()}
    compared = masked = 0
    for (layer, head), hf in found.queries.items():
        q = read_head(hf.path)
        lse = pq.read_table(hf.path, columns=["lse"]).column("lse").to_numpy()
        assert lse is not None and np.isfinite(lse).all(), (layer, head)
        k = keys.get((layer, head // group))
        if k is None:
            continue
        scale, cap = layers[layer]["scaling"], layers[layer]["softcap"]
        for ex in range(N_TEXTS):
            qr, kr = q.example_id == ex, k.example_id == ex
            t, s = q.positions[qr].astype(int), k.positions[kr].astype(int)
            qv = q.vectors[qr].astype(np.float64) * _query_factor(meta, layer, t)[:, None]
            logits = scale * (qv @ k.vectors[kr].astype(np.float64).T)
            if cap:
                logits = cap * np.tanh(logits / cap)
            weights = np.exp(logits - lse[qr][:, None])
            model = probs[ex][layer][head][np.ix_(t, s)]
            seen = s[None, :] <= t[:, None]
            if q.sliding_window:  # (the layer's window, as the capture stored it)
                seen &= (t[:, None] - s[None, :]) < q.sliding_window
            np.testing.assert_allclose(weights[seen], model[seen], rtol=0, atol=1e-5,
                                       err_msg=f"{family} l{layer}h{head} text {ex}")
            assert np.all(model[~seen] == 0), f"{family} l{layer}h{head}: the model attends where the mask says not"
            compared += int(seen.sum())
            masked += int((~seen).sum())
    assert compared > 1000 and masked > 0
    # every layer says where its normaliser came from: the kernel's own, or recomputed and why
    for entry in normaliser["layers"]:
        assert entry["lse_source"] in ("kernel", "recomputed"), entry
        assert (entry["lse_source"] == "recomputed") == bool(entry.get("recomputed_because")), entry
    # (a query scale divided out of the stored queries must be turned back, unless it is 1 wherever captured)
    assert normaliser["logits_from_stored_vectors"] == (not any(
        s["removed"] and s["kind"] == "q" and s["max_factor_in_capture"] != 1 for s in meta.get("position_scaling") or []))


def test_a_query_scale_that_is_1_wherever_captured_leaves_the_logits_to_the_stored_vectors(model_of, family_corpus,
                                                                                          tmp_path):
    """Ministral3's llama-4 query scale starts at position 16 in the tiny model: a capture of 16 tokens
    divides out a factor of 1, so its attention mass is measured — and is the model's."""
    from qkdb import api

    folder = model_of("ministral3")
    out = tmp_path / "out"
    tm.sniff_family(folder, family_corpus, out, n_texts=N_TEXTS, max_length=16, vectors_per_head=N_TEXTS * 16,
                    min_bucket_size=8)
    meta = read_metadata(out)
    assert [s["max_factor_in_capture"] for s in meta["position_scaling"]] == [1.0]
    assert meta["capture"]["normaliser"]["logits_from_stored_vectors"] is True
    api.ingest(out, home=tmp_path / "home", workers=1, plasticity=False)
    probs = _eager_probabilities(folder, tm.windows(folder, family_corpus, N_TEXTS, 16))
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        rows = con.execute("select layer, head, q_lo, q_hi, mass_token0 from attention_mass").fetchall()
    finally:
        con.close()
    assert len(rows) == meta["n_layers"] * meta["n_q_heads"] * 2  # bins [0,4) and [4,16)
    for layer, head, lo, hi, m0 in rows:
        eager = np.concatenate([p[layer][head][lo:hi] for p in probs])
        assert m0 == pytest.approx(eager[:, 0].mean(), abs=1e-5), (layer, head, lo)


@pytest.mark.parametrize("family", ["llama", "gemma2", "mistral"])
def test_the_ingested_attention_mass_is_the_models(family, model_of, family_corpus, tmp_path):
    """From capture to warehouse: attention_mass's weight on token 0 and on the last 64 tokens, per bin,
    is the mean of the model's own eager probabilities over the bin's queries (every position captured)."""
    from qkdb import api

    folder = model_of(family)
    out = tmp_path / "out"
    tm.sniff_family(folder, family_corpus, out, n_texts=N_TEXTS, max_length=MAX_LENGTH,
                    vectors_per_head=N_TEXTS * MAX_LENGTH, min_bucket_size=8)
    api.ingest(out, home=tmp_path / "home", workers=1, plasticity=False)
    probs = _eager_probabilities(folder, tm.windows(folder, family_corpus, N_TEXTS, MAX_LENGTH))
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        rows = con.execute("select layer, head, q_lo, q_hi, mass_token0, mass_recent_64, captured_share "
                           "from attention_mass").fetchall()
        status = con.execute("select status, n_heads from sink_rate").fetchall()
    finally:
        con.close()
    meta = read_metadata(out)
    assert len(rows) == meta["n_layers"] * meta["n_q_heads"] * 3  # bins [0,4) [4,16) [16,64) of the 40 positions
    for layer, head, lo, hi, m0, r64, cap in rows:
        t = np.arange(lo, min(hi, MAX_LENGTH))
        eager = np.concatenate([p[layer][head][t] for p in probs])  # (queries, keys)
        assert m0 == pytest.approx(eager[:, 0].mean(), abs=1e-5), (layer, head, lo)
        assert r64 == pytest.approx(1.0, abs=1e-5) and cap == pytest.approx(1.0, abs=1e-5)
    assert status == [("measured", meta["n_layers"] * meta["n_q_heads"])]


@pytest.mark.parametrize("family", ["llama", "phi"])
def test_a_pre_rope_capture_turned_back_gives_the_models_attention_mass(family, model_of, family_corpus, tmp_path):
    """--pre-rope stores the vectors before RoPE; the ingest rotates them with the RoPE the capture
    recorded, so their logits are attention's again: every bin's weight on token 0 is the model's own
    eager attention (1e-5). Phi rotates only part of each head (partial rotary)."""
    from qkdb import api

    folder = model_of(family)
    out = tmp_path / "out"
    tm.sniff_family(folder, family_corpus, out, n_texts=N_TEXTS, max_length=MAX_LENGTH, pre_rope=True,
                    vectors_per_head=N_TEXTS * MAX_LENGTH, min_bucket_size=8)
    meta = read_metadata(out)
    assert meta["capture"]["pre_rope"] is True and meta["capture"]["normaliser"]["logits_from_stored_vectors"] is False
    api.ingest(out, home=tmp_path / "home", workers=1, plasticity=False)
    probs = _eager_probabilities(folder, tm.windows(folder, family_corpus, N_TEXTS, MAX_LENGTH))
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        rows = con.execute("select layer, head, q_lo, q_hi, mass_token0, captured_share from attention_mass").fetchall()
    finally:
        con.close()
    assert len(rows) == meta["n_layers"] * meta["n_q_heads"] * 3
    for layer, head, lo, hi, m0, cap in rows:
        eager = np.concatenate([p[layer][head][lo:min(hi, MAX_LENGTH)] for p in probs])
        assert m0 == pytest.approx(eager[:, 0].mean(), abs=1e-5), (layer, head, lo)
        assert cap == pytest.approx(1.0, abs=1e-5)


def test_no_lse_leaves_the_normaliser_out(model_of, family_corpus, tmp_path, runner):
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    out = tmp_path / "out"
    res = runner.invoke(app, ["sniff", "--model-path", str(model_of("llama")), "--text", str(family_corpus),
                              "--texts", "1", "--max-length", "32", "--vectors-per-head", "16", "--min-bucket-size", "8",
                              "--no-lse", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert "normaliser" not in read_metadata(out)["capture"]
    assert all("lse" not in pq.read_schema(hf.path).names for hf in discover(out).queries.values())


def test_a_sampled_capture_keeps_tokens_0_to_3_so_every_querys_sink_weight_is_the_models(model_of, family_corpus,
                                                                                         tmp_path):
    """Not every position: 12 rows per head file and text, the first 4 always kept (--keep-first 4), so each
    sampled query's weight on token 0 is measured — and is the model's own."""
    from qkdb import api

    folder = model_of("llama")
    out = tmp_path / "out"
    tm.sniff_family(folder, family_corpus, out, n_texts=N_TEXTS, max_length=MAX_LENGTH, vectors_per_head=24,
                    min_bucket_size=8)
    found = discover(out)
    for hf in [*found.queries.values(), *found.keys.values()]:
        data = read_head(hf.path)
        for e in range(N_TEXTS):
            pos = data.positions[data.example_id == e]
            assert len(pos) == 12 and set(range(4)) <= set(pos.tolist())
    api.ingest(out, home=tmp_path / "home", workers=1, plasticity=False)
    probs = _eager_probabilities(folder, tm.windows(folder, family_corpus, N_TEXTS, MAX_LENGTH))
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        rows = con.execute("select layer, head, q_lo, n_queries, n_token0, mass_token0, captured_share "
                           "from attention_mass").fetchall()
    finally:
        con.close()
    for layer, head, lo, n, n0, m0, cap in rows:
        q = read_head(found.queries[(layer, head)].path)
        sel = (q.positions >= lo) & (q.positions < {0: 4, 4: 16, 16: 64}[lo])
        eager = [probs[int(e)][layer][head][int(t), 0] for e, t in zip(q.example_id[sel], q.positions[sel])]
        assert n == n0 == len(eager)  # every query saw token 0's key
        assert m0 == pytest.approx(np.mean(eager), abs=1e-5), (layer, head, lo)
        assert cap <= 1 + 1e-5  # (float32 vectors)


def test_dense_keeps_every_position_of_every_text(model_of, family_corpus, tmp_path, runner):
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    out = tmp_path / "out"
    res = runner.invoke(app, ["sniff", "--model-path", str(model_of("llama")), "--text", str(family_corpus),
                              "--texts", "2", "--max-length", "24", "--dense", "--q-heads", "2", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    positions = read_metadata(out)["capture"]["positions"]
    assert positions["policy"] == "dense" and positions["kept_per_head"] == 2 * 24
    for hf in [*discover(out).queries.values(), *discover(out).keys.values()]:
        data = read_head(hf.path)
        assert sorted(zip(data.example_id.tolist(), data.positions.tolist())) == [(e, t) for e in range(2) for t in range(24)]


@pytest.mark.parametrize("family, expected", [("llama", {"kernel"}), ("gemma2", {"recomputed"}),
                                              ("mistral", None), ("gpt_oss", {"recomputed"})])
def test_the_normaliser_comes_from_the_kernel_exactly_where_sdpa_runs_it_plainly(family, expected, model_of,
                                                                                   family_corpus, tmp_path):
    # llama: causal sdpa on the CPU, so the kernel's log-sum-exp (checked against eager above); gemma2
    # softcaps (eager), gpt-oss adds sinks (eager): recomputed. mistral: its layers slide when the
    # config sets a window, and then are recomputed; plain causal ones take the kernel's.
    if family not in CAPTURED:
        pytest.skip(f"{family} is not in this transformers' coverage matrix")
    out = tmp_path / "out"
    tm.sniff_family(model_of(family), family_corpus, out, n_texts=N_TEXTS, max_length=MAX_LENGTH,
                    vectors_per_head=N_TEXTS * MAX_LENGTH, min_bucket_size=8)
    layers = read_metadata(out)["capture"]["normaliser"]["layers"]
    got = {e["layer"]: e for e in layers}
    assert got
    if expected is not None:
        assert {e["lse_source"] for e in layers} == expected, layers
    for e in layers:
        if e["lse_source"] == "recomputed":
            assert e["recomputed_because"]
        else:
            assert e["mask"] == "causal" and not e["softcap"] and not e["sinks"], e

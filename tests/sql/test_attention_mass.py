"""Attention mass from a captured softmax normaliser, against planted sinks (docs/attention.md).

The planted truth: a dataset written here with every position of short texts captured, each query's
``lse`` computed over all its keys by brute force, and one head per layer given a strong key at
position 0 that every query aligns with (a sink), the other not. The ingest's ``attention_mass`` must
be the brute-force masses, and ``sink_rate`` must count exactly the sink heads.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkdb import api
from qkdb.ingest.metrics.attention_mass import BIN_EDGES, query_masses
from qkdb.ingest.sources.layout import write_head, write_metadata

D, T, TEXTS, SCALE = 8, 64, 3, 8 ** -0.5


def _brute(Q, tq, qx, K, tk, kx, scale, softcap=None, window=None):
    """Per query: the full softmax over its text's keys at s <= t (and within the window), by loops."""
    out = {"token0": [], "tokens0_3": [], "recent_64": [], "captured": [], "sink_margin": [], "advantage": []}
    typical = np.mean([K[j] for j in range(len(K)) if tk[j] != 0], axis=0)
    for i in range(len(Q)):
        keys = [j for j in range(len(K)) if kx[j] == qx[i] and tk[j] <= tq[i] and (not window or tq[i] - tk[j] < window)]
        in_text = {tk[j] for j in range(len(K)) if kx[j] == qx[i] and tk[j] <= tq[i]}  # captured, seen or not
        logits = np.array([scale * float(Q[i] @ K[j]) for j in keys])
        if softcap:
            logits = softcap * np.tanh(logits / softcap)
        w = np.exp(logits - np.logaddexp.reduce(logits))
        pos = [tk[j] for j in keys]
        # a captured token 0 the window hides has weight 0
        out["token0"].append(w[pos.index(0)] if 0 in pos else (0.0 if 0 in in_text else np.nan))
        complete = all(p in in_text for p in range(min(3, tq[i]) + 1))
        out["tokens0_3"].append(sum(w[n] for n, p in enumerate(pos) if p < 4) if complete else np.nan)
        out["recent_64"].append(sum(w[n] for n, p in enumerate(pos) if tq[i] - p < 64))
        out["captured"].append(w.sum())
        others = [logits[n] for n, p in enumerate(pos) if p != 0]
        out["sink_margin"].append(logits[pos.index(0)] - max(others) if 0 in pos and others else np.nan)
        zero = [j for j in range(len(K)) if kx[j] == qx[i] and tk[j] == 0]
        out["advantage"].append(scale * float(Q[i] @ (K[zero[0]] - typical)) if zero else np.nan)
    return {k: np.array(v) for k, v in out.items()}


def _lse(Q, tq, qx, K, tk, kx, scale, softcap=None, window=None):
    lse = np.empty(len(Q))
    for i in range(len(Q)):
        seen = (kx == qx[i]) & (tk <= tq[i]) & ((tq[i] - tk < window) if window else True)
        logits = scale * (K[seen] @ Q[i])
        if softcap:
            logits = softcap * np.tanh(logits / softcap)
        lse[i] = np.logaddexp.reduce(logits)
    return lse


@pytest.mark.parametrize("softcap, window", [(None, None), (3.0, 10)])
def test_per_query_masses_are_the_full_softmaxs(softcap, window):
    rng = np.random.default_rng(0)
    tq, qx = np.tile(np.arange(20), 2), np.repeat([0, 1], 20)
    tk, kx = tq.copy(), qx.copy()
    Q, K = rng.normal(size=(40, D)) * 2, rng.normal(size=(40, D)) * 2
    lse = _lse(Q, tq, qx, K, tk, kx, SCALE, softcap, window)
    got = query_masses(Q, tq, qx, lse, K, tk, kx, scaling=SCALE, softcap=softcap, window=window)
    want = _brute(Q, tq, qx, K, tk, kx, SCALE, softcap, window)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=name)
    assert np.allclose(got["captured"], 1.0)  # every key captured: the captured keys explain it all


def test_without_token_0_or_with_a_gap_it_is_not_made_up():
    rng = np.random.default_rng(1)
    tq = np.array([5, 9])
    tk = np.array([1, 2, 3, 4, 5, 9])  # no key at position 0
    Q, K = rng.normal(size=(2, D)), rng.normal(size=(6, D))
    lse = np.array([3.0, 3.0])  # (the uncaptured keys took the rest)
    got = query_masses(Q, tq, np.zeros(2), lse, K, tk, np.zeros(6), scaling=SCALE)
    assert np.isnan(got["token0"]).all() and np.isnan(got["tokens0_3"]).all() and np.isnan(got["sink_margin"]).all()
    assert (got["captured"] < 1).all()


def _planted(root, *, sink_heads, lse=True, half=()):
    """Two layers, two query heads sharing one key head per layer; in each layer one head has a sink.

    A head in ``half`` has its sink on the first texts only (the rest turn away from token 0): its
    per-text alpha0 straddles epsilon, so Gu et al.'s per-text rate and the pooled one differ."""
    rng = np.random.default_rng(7)
    tq = np.tile(np.arange(T), TEXTS)
    ex = np.repeat(np.arange(TEXTS), T)
    truth = {}
    for layer in range(2):
        K = rng.normal(size=(T * TEXTS, D))
        sink = rng.normal(size=D)
        sink /= np.linalg.norm(sink)
        K[tq == 0] = 6.0 * sink  # a strong key at position 0 of every text
        write_head(root, layer, 0, "k", K, tq, example_id=ex, dtype="float64")  # (the truth is float64)
        for head in range(2):
            Q = rng.normal(size=(T * TEXTS, D))
            if (layer, head) in half:
                Q += np.where(ex[:, None] < TEXTS // 2 + 1, 4.0, -4.0) * sink  # a sink on 2 of the 3 texts
            elif (layer, head) in sink_heads:
                Q += 4.0 * sink  # every query aligned with the sink key
            else:
                Q -= 4.0 * sink  # every query turned away from it
            lse_q = _lse(Q, tq, ex, K, tq, ex, SCALE)
            write_head(root, layer, head, "q", Q, tq, example_id=ex, lse=lse_q if lse else None, dtype="float64")
            truth[(layer, head)] = _brute(Q, tq, ex, K, tq, ex, SCALE)
    meta = {"model": root.name, "family": "Planted", "n_layers": 2, "n_q_heads": 2, "n_kv_heads": 1, "head_dim": D,
            "rope": "none", "nope_layers": [0, 1], "source": "sniff",
            "capture": {"max_length": T, **({"normaliser": {"column": "lse", "logits_from_stored_vectors": True,
                        "layers": [{"layer": l, "scaling": SCALE, "softcap": None} for l in range(2)]}} if lse else {})}}
    write_metadata(root, meta)
    return truth


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    base = tmp_path_factory.mktemp("sinks")
    home = base / "home"
    truth = _planted(base / "planted-sinks", sink_heads={(0, 0), (1, 0)})
    _planted(base / "planted-no-lse", sink_heads={(0, 0)}, lse=False)
    for name in ("planted-sinks", "planted-no-lse"):
        api.ingest(base / name, home=home, workers=1, plasticity=False)
    return home, truth


def test_the_table_is_the_brute_force_masses_per_bin(planted):
    home, truth = planted
    con = api.connect(home, read_only=True)
    try:
        rows = con.execute("select layer, head, q_lo, q_hi, n_queries, n_token0, mass_token0, mass_tokens0_3, "
                           "mass_recent_64, captured_share, sink_margin, token0_advantage, token0_advantage_sq "
                           "from attention_mass "
                           "where model = 'planted-sinks' order by all").fetchall()
        other = con.execute("select count(*) from attention_mass where model = 'planted-no-lse'").fetchone()[0]
    finally:
        con.close()
    assert other == 0
    tq = np.tile(np.arange(T), TEXTS)
    assert {(r[0], r[1]) for r in rows} == set(truth) and len(rows) == 4 * 3  # bins [0,4) [4,16) [16,64) of each head
    for layer, head, lo, hi, n, n0, m0, m03, r64, cap, margin, adv, adv_sq in rows:
        assert (lo, hi) in set(zip(BIN_EDGES[:-1], BIN_EDGES[1:]))
        sel = (tq >= lo) & (tq < hi)
        want = truth[(layer, head)]
        assert n == n0 == sel.sum()
        assert m0 == pytest.approx(want["token0"][sel].mean(), abs=1e-12)
        assert m03 == pytest.approx(want["tokens0_3"][sel].mean(), abs=1e-12)
        assert r64 == pytest.approx(want["recent_64"][sel].mean(), abs=1e-12)
        assert cap == pytest.approx(1.0, abs=1e-12)
        assert margin == pytest.approx(np.nanmean(want["sink_margin"][sel]), abs=1e-9)  # (t = 0: no other key)
        assert adv == pytest.approx(want["advantage"][sel].mean(), abs=1e-9)
        assert adv_sq == pytest.approx((want["advantage"][sel] ** 2).mean(), rel=1e-12)


def test_the_sink_rate_counts_the_planted_sinks(planted):
    home, truth = planted
    con = api.connect(home, read_only=True)
    try:
        rate = {r[0]: r[1:] for r in con.execute(
            "select model, status, n_heads, n_sink_heads, sink_rate_per_text, epsilon, context from sink_rate").fetchall()}
        # epsilon and the context are parameters
        strict = con.execute("create temp view params as select * replace (0.999 as sink_epsilon) from qk.main.params; "
                             "select n_sink_heads from sink_rate where model = 'planted-sinks'").fetchone()[0]
    finally:
        con.close()
    means = {h: truth[h]["token0"][np.tile(np.arange(T), TEXTS) < 64].mean() for h in truth}
    assert {h for h, m in means.items() if m > 0.3} == {(0, 0), (1, 0)}  # (the plant took)
    assert rate["planted-sinks"] == ("measured", 4, 2, 0.5, 0.3, 64)  # every head a sink on all texts or none
    assert rate["planted-no-lse"][0] == "no normaliser captured" and rate["planted-no-lse"][3] is None
    assert strict == sum(m > 0.999 for m in means.values())


def test_each_texts_alpha0_is_gu_et_als_alpha1_and_the_two_rates_differ_where_a_head_straddles(tmp_path):
    """attention_mass_text per (text, bin) and sink_texts per text are the brute-force means; with every
    position of 64-token texts captured, a text's alpha0 is (1/T) sum_t A_t0 (query 0 included). A head
    with a sink on 2 of 3 texts counts 2/3 per text, and 1 or 0 pooled."""
    truth = _planted(tmp_path / "straddle", sink_heads={(0, 0)}, half={(1, 0)})
    api.ingest(tmp_path / "straddle", home=tmp_path / "home", workers=1, plasticity=False)
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        bins = con.execute("select layer, head, example_id, q_lo, q_hi, n_queries, alpha0, input_kind "
                           "from attention_mass_text order by all").fetchall()
        texts = con.execute("select layer, head, example_id, n_queries, alpha0, is_sink from sink_texts").fetchall()
        heads = {(r[0], r[1]): r[2:] for r in con.execute(
            "select layer, head, n_texts, sink_text_share, mass_token0, is_sink from sink_heads").fetchall()}
        (per_text, pooled, n_texts, n_heads), = con.execute(
            "select sink_rate_per_text, sink_rate_pooled, n_texts, n_heads from sink_rate").fetchall()
    finally:
        con.close()
    tq, ex = np.tile(np.arange(T), TEXTS), np.repeat(np.arange(TEXTS), T)
    assert len(bins) == 4 * TEXTS * 3 and {b[-1] for b in bins} == {"natural"}
    for layer, head, e, lo, hi, n, a0, _ in bins:
        sel = (ex == e) & (tq >= lo) & (tq < hi)
        assert n == sel.sum() and a0 == pytest.approx(truth[(layer, head)]["token0"][sel].mean(), abs=1e-12)
    alpha = {}
    for layer, head, e, n, a0, is_sink in texts:
        gu = truth[(layer, head)]["token0"][ex == e].sum() / T  # Gu et al.'s alpha_1, by its definition
        assert n == T and a0 == pytest.approx(gu, abs=1e-12) and is_sink == (gu > 0.3)
        alpha[(layer, head, e)] = gu
    assert [alpha[(1, 0, e)] > 0.3 for e in range(TEXTS)] == [True, True, False]  # (the plant took)
    want = np.mean([a > 0.3 for a in alpha.values()])
    assert per_text == pytest.approx(want) and per_text == pytest.approx((3 + 2) / 12)
    pooled_heads = {h: np.mean([alpha[(*h, e)] for e in range(TEXTS)]) for h in truth}
    assert pooled == pytest.approx(np.mean([m > 0.3 for m in pooled_heads.values()])) and pooled != per_text
    assert (n_texts, n_heads) == (TEXTS, 4)
    for h, (n, share, m0, is_sink) in heads.items():
        assert n == TEXTS and share == pytest.approx(np.mean([alpha[(*h, e)] > 0.3 for e in range(TEXTS)]))
        assert m0 == pytest.approx(pooled_heads[h], abs=1e-12) and is_sink == (pooled_heads[h] > 0.3)


def test_a_sampled_capture_estimates_what_the_dense_one_measures(tmp_path):
    """A sampled capture keeps positions 0-3 of every text (their weight on token 0 is near 1) and few
    later ones: each position bin must weigh what its positions do, so that the sampled rates and
    means agree with the dense capture's within sampling error, where a per-query mean would not."""
    import shutil

    from qkdb.ingest.sources.layout import discover, read_head, read_metadata

    dense = tmp_path / "dense"
    truth = _planted(dense, sink_heads={(0, 0)}, half={(1, 0)})
    sampled = tmp_path / "sampled"
    rng = np.random.default_rng(11)
    tq = np.tile(np.arange(T), TEXTS)
    keep = (tq < 4) | (rng.random(len(tq)) < 0.25)  # what --keep-first 4 and a quarter of the rest give
    found = discover(dense)
    for (layer, head), hf in found.queries.items():
        h = read_head(hf.path)
        write_head(sampled, layer, head, "q", h.vectors[keep], h.positions[keep], example_id=h.example_id[keep],
                   lse=h.lse[keep], dtype="float64")
    for (layer, head), hf in found.keys.items():
        h = read_head(hf.path)
        write_head(sampled, layer, head, "k", h.vectors, h.positions, example_id=h.example_id, dtype="float64")
    write_metadata(sampled, {**read_metadata(dense), "model": "sampled"})
    for root in (dense, sampled):
        api.ingest(root, home=tmp_path / "home", workers=1, plasticity=False)
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        got = {r[0]: r[1:] for r in con.execute(
            "select model, sink_rate_per_text, sink_rate_pooled, mean_mass_token0 from sink_rate").fetchall()}
        heads = con.execute("select layer, head, d.mass_token0, s.mass_token0, s.n_queries from sink_heads d "
                            "join sink_heads s using (layer, head) where d.model = 'dense' and s.model = 'sampled'").fetchall()
        per_query = con.execute("select sum(mass_token0 * n_token0) / sum(n_token0) from attention_mass "
                                "where model = 'sampled' and layer = 0 and head = 1").fetchone()[0]
        dense_01 = con.execute("select mass_token0 from sink_heads where model = 'dense' and layer = 0 "
                               "and head = 1").fetchone()[0]
    finally:
        con.close()
    # the pooled rate is the dense one; the per-text rate needs every position of a text (none here)
    assert got["sampled"][1] == got["dense"][1] and got["sampled"][0] is None and got["dense"][0] is not None
    for layer, head, d, s, n in heads:
        # within 4 standard errors of the sampled positions past 0-3 (the first four are all kept)
        sd = truth[(layer, head)]["token0"][tq >= 4].std()
        assert n < T * TEXTS and abs(s - d) <= 4 * sd / np.sqrt(n - 4 * TEXTS) + 1e-12, (layer, head, d, s)
    # counted per query, the kept positions 0-3 would more than double the weight on token 0 of a
    # head without a sink: the bins' widths undo that
    sampled_01 = next(s for layer, head, _, s, _ in heads if (layer, head) == (0, 1))
    assert per_query > 2 * dense_01 and abs(sampled_01 - dense_01) < (per_query - dense_01) / 4


def test_masses_are_unchanged_by_an_orthogonal_map_of_q_and_k():
    # Attention depends on q.k only: one rotation of both leaves every weight where it was.
    rng = np.random.default_rng(4)
    tq, qx = np.tile(np.arange(30), 2), np.repeat([0, 1], 30)
    Q, K = rng.normal(size=(60, D)) * 2, rng.normal(size=(60, D)) * 2
    R, _ = np.linalg.qr(rng.normal(size=(D, D)))
    lse = _lse(Q, tq, qx, K, tq, qx, SCALE)
    a = query_masses(Q, tq, qx, lse, K, tq, qx, scaling=SCALE, window=12)
    b = query_masses(Q @ R, tq, qx, lse, K @ R, tq, qx, scaling=SCALE, window=12)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-9, atol=1e-12, err_msg=name)


def test_the_sink_candidates_of_a_sampled_capture_reach_attention_mass_only(tmp_path):
    """``--keep-first 4`` keeps positions 0-3 of every text outside the position policy's draw: every
    metric but attention mass must read the policy's sample alone, exactly as if those rows were not
    in the files; attention mass reads them (its bin [0, 4))."""
    from qkdb.ingest.sources.layout import discover, read_head, read_metadata

    dense = tmp_path / "dense"
    _planted(dense, sink_heads={(0, 0)})
    rng = np.random.default_rng(5)
    tq = np.tile(np.arange(T), TEXTS)
    drawn = (tq >= 4) & (rng.random(len(tq)) < 0.5)
    found = discover(dense)
    for name, keep in (("kept", drawn | (tq < 4)), ("drawn", drawn)):
        for files, kind in ((found.queries, "q"), (found.keys, "k")):
            for (layer, head), hf in files.items():
                h = read_head(hf.path)
                write_head(tmp_path / name, layer, head, kind, h.vectors[keep], h.positions[keep],
                           example_id=h.example_id[keep], lse=None if h.lse is None else h.lse[keep], dtype="float64")
        meta = read_metadata(dense)
        meta["capture"]["positions"] = {"policy": "log-uniform", "keep_first": 4 if name == "kept" else 0}
        write_metadata(tmp_path / name, {**meta, "model": name})
        api.ingest(tmp_path / name, home=tmp_path / "home", workers=1, plasticity=True)
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        def table(sql):
            return {m: con.execute(sql + f" where model = '{m}' order by all").fetchall() for m in ("kept", "drawn")}

        heads = table("select layer, head, n_q, n_k, pos_var_q, pos_var_k, position_min from heads")
        pca = table("select layer, head, pc, explained_variance, r_q, r_k from pca")
        rec = table("select layer, head, logit_slope, n_queries from recency")
        plas = table("select layer, head, estimator, ap_overall from plasticity")
        bins = table("select distinct q_lo from attention_mass")
    finally:
        con.close()
    assert heads["kept"] == heads["drawn"] and min(r[-1] for r in heads["kept"]) >= 4
    assert pca["kept"] == pca["drawn"] and rec["kept"] == rec["drawn"] and plas["kept"] == plas["drawn"]
    assert bins["kept"] == [(0,), (4,), (16,)] and bins["drawn"] == [(4,), (16,)]


def test_the_sink_card_sets_a_published_rate_beside_the_same_checkpoint_only(tmp_path):
    """sink_card: both rates and the per-layer profile per model; Gu et al.'s Table 1 rate where the
    Hugging Face id, input kind, epsilon and T all match (here LLaMA3-8B's 99.02%), none otherwise."""
    from qkdb.ingest.sources.layout import read_metadata

    root = tmp_path / "llama"
    _planted(root, sink_heads={(0, 0)}, half={(1, 0)})
    write_metadata(root, {**read_metadata(root), "hf_model": "meta-llama/Meta-Llama-3-8B"})
    api.ingest(root, home=tmp_path / "home", workers=1, plasticity=False)
    con = api.connect(tmp_path / "home", read_only=True)
    try:
        (kind, per_text, pooled, layers, rates, anchor, rate, match), = con.execute(
            "select input_kind, sink_rate_per_text, sink_rate_pooled, layers, layer_rates, anchor_model, "
            "anchor_rate, match_kind from sink_card").fetchall()
        texts = con.execute("select layer, avg(is_sink::int) from sink_texts group by layer order by layer").fetchall()
        other_t = con.execute("create temp view params as select * replace (16 as sink_context) from qk.main.params; "
                              "select anchor_rate from sink_card").fetchall()
    finally:
        con.close()
    assert kind == "natural" and (anchor, rate, match) == ("LLaMA3-8B", pytest.approx(0.9902), "exact")
    assert layers == [0, 1] and rates == pytest.approx([r for _, r in texts])
    assert per_text == pytest.approx((3 + 2) / 12) and pooled is not None
    assert other_t == [(None,)]  # T = 16 is not the published T = 64

"""``qkdb sniff --pre-rope`` at its default settings, and what the ingest makes of a pre-RoPE capture.

Issue 37: the pre-RoPE check read cos/sin at the kept rows' positions but indexed them by the check
rows' (refused at default settings whenever a head kept more than ``check_rows`` rows of a text),
and the ingest read pre-RoPE vectors as post-RoPE (``coherence_q`` and ``raw_coherence_q`` traded
places, no plane rotated). Here, on tiny models of the layouts that matter (rotate-half, per-layer
frequencies and local layers, a NoPE layer, YaRN's amplitude, interleaved pairs without a
frequency buffer, MLA's offset slice in [evens | odds] order):

* a pre-RoPE capture with the default check sample (64 rows per head file and text, 192-token
  texts: most rows unchecked) succeeds, and every stored row is the independent recomputation's
  pre-rotation vector;
* ingested, it gives the same tables as the post-RoPE capture of the same texts (to float32
  rounding), with ``models.pre_rope`` true.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

from qkdb import api  # noqa: E402
from qkdb.ingest.capture.sniff import DEFAULT_CHECK_ROWS  # noqa: E402
from qkdb.ingest.sources.layout import discover, read_head, read_metadata  # noqa: E402

N_TEXTS, MAX_LENGTH, PER_FILE = 3, 192, 400
FAMILIES = ["llama", "gemma3", "smollm3", "qwen2", "gptj", "deepseek_v3"]


@pytest.fixture(scope="module")
def corpus(family_corpus):
    return family_corpus


def _sniff(folder, corpus, out, **kw):
    return tm.sniff_family(folder, corpus, out, n_texts=N_TEXTS, max_length=MAX_LENGTH, vectors_per_head=PER_FILE, **kw)


def _pre(spec, x):
    """A reference pre-RoPE row in the order the capture stores it (DeepSeek-V3: the slice as [evens | odds])."""
    if spec.deinterleave:
        part = x[:, spec.offset:spec.offset + spec.r]
        x = np.concatenate([x[:, :spec.offset], part[:, 0::2], part[:, 1::2], x[:, spec.offset + spec.r:]], axis=1)
    return x


@pytest.mark.parametrize("family", FAMILIES)
def test_a_pre_rope_capture_at_default_settings_stores_the_pre_rotation_rows(family, model_of, corpus, tmp_path):
    folder = model_of(family)
    result = _sniff(folder, corpus, tmp_path / "pre", pre_rope=True)
    meta = read_metadata(result.out)
    check = meta["capture"]["check"]
    assert meta["capture"]["pre_rope"] is True and check["rows_per_head_and_text"] == DEFAULT_CHECK_ROWS
    # the sampled check ran on texts after the first: more rows kept than checked (the case that was refused)
    found = discover(result.out)
    kept = sum(len(read_head(hf.path).positions) for t in (found.queries, found.keys) for hf in t.values())
    assert check["rows_checked"] < kept
    ref = tm.reference(folder, tm.windows(folder, corpus, N_TEXTS, MAX_LENGTH), family)
    spec = tm.FAMILY_SPECS[family]
    for table, kind in ((found.queries, "q"), (found.keys, "k")):
        for (layer, head), hf in table.items():
            data = read_head(hf.path)
            for ex in range(N_TEXTS):
                rows = data.example_id == ex
                pos = data.positions[rows].astype(int)
                want = _pre(spec, ref[ex][layer][f"pre_{kind}"][head][pos])
                np.testing.assert_allclose(data.vectors[rows], want, rtol=1e-4, atol=1e-5,
                                           err_msg=f"{family} l{layer:02d}h{head:02d}{kind} text {ex}")


# columns compared between the two captures' tables: every metric that moves when RoPE is missing
COMPARED = {
    "rope_planes": ("layer, head, j", ["coherence_q", "coherence_k", "raw_coherence_q", "raw_coherence_k",
                                       "radius_q", "radius_k", "var_frac", "omega", "turns"]),
    "rotation": ("layer, head", ["r_q_a", "r_k_a", "alpha_q", "alpha_k", "mu_q_a", "bias_strength",
                                 "separation_strength", "plane_var_fraction", "omega", "omega_r_squared"]),
    "heads": ("layer, head", ["pos_var_q", "pos_var_k", "fisher_pc0", "qk_separation_pc0"]),
    "pca": ("layer, head, pc", ["explained_variance", "r_q", "r_k"]),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_pre_rope_capture_ingests_to_the_tables_of_the_post_rope_capture(family, model_of, corpus, tmp_path):
    folder = model_of(family)
    home = tmp_path / "home"
    post = _sniff(folder, corpus, tmp_path / "post")
    pre = _sniff(folder, corpus, tmp_path / "pre", pre_rope=True)
    api.ingest(post.out, model="post", home=home, workers=1)
    done = api.ingest(pre.out, model="pre", home=home, workers=1)
    assert any("captured before RoPE (--pre-rope): the ingest rotates every vector" in n for n in done.notes)
    con = api.connect(home)
    assert dict(con.sql("select model, pre_rope from models").fetchall()) == {"post": False, "pre": True}
    for table, (keys, columns) in COMPARED.items():
        cols = ", ".join(columns)
        a = con.sql(f"select {keys}, {cols} from {table} where model = 'post' order by {keys}").fetchnumpy()
        b = con.sql(f"select {keys}, {cols} from {table} where model = 'pre' order by {keys}").fetchnumpy()
        assert len(a["layer"]) == len(b["layer"]) > 0, table
        for c in columns:
            x, y = np.asarray(a[c], np.float64), np.asarray(b[c], np.float64)
            np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-6, err_msg=f"{family} {table}.{c}")
    same = con.sql("select count(*) filter (where p.rotating = q.rotating), count(*), sum(p.rotating::int) "
                   "from rope_planes p join rope_planes q using (layer, head, j) "
                   "where p.model = 'post' and q.model = 'pre'").fetchall()[0]
    assert same[0] == same[1] and same[2] > 0

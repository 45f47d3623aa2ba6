"""From a capture to ``rope_planes``: every family's planes are the model's own, at the model's own frequencies.

For each family of docs/sniff.md's coverage matrix that has RoPE, a tiny model whose token
embeddings are one large shared vector plus 1% noise (``tiny_models.build(rings=True)``: layer 0's
queries and keys trace clean circles in the true RoPE planes) is captured with ``qkdb sniff`` and
ingested. Then, against the model's own modules (``tiny_models.rope_truth``):

* ``rope_planes`` has one row per real plane (``rotary_dims / 2`` per head: partial rotary's
  unrotated dims are not planes);
* each plane's ``omega`` is the layer's ``inv_freq`` (scaling included; longrope's factor set for
  the text's length; Gemma-3's local and global layers each their own) to 1e-6;
* the planes pair the right coordinates: in layer 0, every plane that turns at least once over the
  text has phase coherence near 1 after undoing RoPE (a wrong pairing or slice gives rings nowhere).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

import qkdb  # noqa: E402

MAX_LENGTH = 64
ROPE_FAMILIES = [f for f, spec in tm.FAMILY_SPECS.items() if spec.refused is None and spec.pairing is not None]


@pytest.mark.parametrize("family", ROPE_FAMILIES)
def test_rope_planes_are_the_models_planes_at_its_frequencies(family, tokenizer, family_corpus, tmp_path):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    spec = tm.FAMILY_SPECS[family]
    folder = tm.build(tmp_path / "model", family, *tokenizer, rings=True)
    out = tmp_path / "capture"
    sniff(SniffOptions(out=out, model_path=folder, text=str(family_corpus), n_texts=2, max_length=MAX_LENGTH,
                       q_heads=None, vectors_per_head=128, min_bucket_size=16, seed=3, model_name="tiny"))
    qkdb.ingest(out, home=tmp_path / "home", workers=1, points=0)
    truth = tm.rope_truth(folder, tm.windows(folder, family_corpus, 1, MAX_LENGTH)[0], family)
    with qkdb.connect(tmp_path / "home") as con:
        planes = con.execute(
            "select layer, head, j, omega, turns, coherence_q, coherence_k from rope_planes order by all"
        ).fetchall()
        dims, offset, source = con.execute("select rotary_dims, rotary_offset, rope_source from models").fetchone()
    assert (dims, offset, source) == (spec.r, spec.offset, "recorded")
    by_head: dict[tuple[int, int], list] = {}
    for layer, head, j, omega, turns, coh_q, coh_k in planes:
        by_head.setdefault((layer, head), []).append((j, omega, turns, coh_q, coh_k))
    global_freq = next(t["inv_freq"] for t in truth if t["inv_freq"] is not None)
    for (layer, head), rows in by_head.items():
        assert [j for j, *_ in rows] == list(range(spec.r // 2)), (layer, head)
        # a layer without RoPE (SmolLM3's NoPE layer) is the control: computed at the model's frequencies
        want = truth[layer]["inv_freq"] if truth[layer]["inv_freq"] is not None else global_freq
        np.testing.assert_allclose([w for _, w, *_ in rows], want, rtol=1e-6, err_msg=f"l{layer:02d}h{head:02d}")
        if layer == 0:
            turning = [(q, k) for _, _, turns, q, k in rows if turns >= 1]
            assert turning, f"no plane of l00h{head:02d} turns over {MAX_LENGTH} tokens"
            assert min(min(q, k) for q, k in turning) > 0.9, (family, head, turning)

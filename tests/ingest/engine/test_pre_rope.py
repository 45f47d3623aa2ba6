"""A pre-RoPE capture is rotated at ingest by the RoPE its capture recorded, or refused (issue 37).

Without torch: pre-rotation vectors are planted with a drift and a Q/K offset; one dataset stores
them rotated by RoPE (complex multiplication, written here independently of qkdb), the other stores
them as they are with ``capture.pre_rope`` and the RoPE a ``qkdb sniff`` capture records. Both must
give the same tables; a pre-RoPE dataset without recorded RoPE is refused and leaves no warehouse.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from qkdb import api
from qkdb.errors import InputError
from qkdb.ingest.capture.rope_layout import Rotation
from qkdb.ingest.engine.pre_rope import apply_rope
from qkdb.ingest.sources.layout import METADATA_FILE, write_head

D, LAYERS, Q_HEADS, KV_HEADS, N = 16, 2, 4, 2, 900
OMEGA = 500.0 ** (-np.arange(0, D, 2) / D)
AMPLITUDE = 1.2


def _rope_complex(x, t, amplitude=AMPLITUDE, omega=OMEGA):
    """Rotate-half RoPE as complex multiplication: z_j = x_j + i·x_{j+d/2} times amplitude·exp(i·t·ω_j)."""
    h = x.shape[1] // 2
    z = (x[:, :h] + 1j * x[:, h:]) * amplitude * np.exp(1j * t[:, None] * omega[None, :])
    return np.concatenate([z.real, z.imag], axis=1)


def _write(root, pre_rope: bool, nope_layers=(1,), record=True):
    rng = np.random.default_rng(5)
    for layer in range(LAYERS):
        for g in range(KV_HEADS):
            for kind, heads in (("k", [g]), ("q", range(g * 2, g * 2 + 2))):
                for h in heads:
                    t = rng.integers(0, 1500, N)
                    x = rng.normal(size=(N, D))
                    x[:, 0] += (4.0 if kind == "q" else -1.0) + (1.5e-3 if kind == "q" else 3e-3) * t
                    x[:, 1] += 4.0 if kind == "q" else -4.0
                    stored = x if pre_rope or layer in nope_layers else _rope_complex(x, t)
                    write_head(root, layer, h, kind, stored, t, example_id=rng.integers(0, 4, N))
    meta = {"model": "planted", "source": "sniff", "n_layers": LAYERS, "n_q_heads": Q_HEADS, "n_kv_heads": KV_HEADS,
            "head_dim": D, "rope": "rotary", "nope_layers": list(nope_layers), "capture": {"pre_rope": pre_rope}}
    if record:
        meta.update({"rope_pairing": "half", "rotary_dims": D, "rotary_offset": 0,
                     "rope_inv_freq": OMEGA.tolist(), "rope_attention_factor": AMPLITUDE})
    (root / METADATA_FILE).write_text(json.dumps(meta))
    return root


def test_apply_rope_is_the_captures_rotation_in_every_layout():
    rng = np.random.default_rng(0)
    x, t = rng.normal(size=(50, 12)), rng.integers(0, 4000, 50).astype(np.float64)
    for pairing, offset, dims in (("half", 0, 12), ("interleaved", 0, 12), ("half", 4, 8), ("interleaved", 0, 6)):
        omega = 1e3 ** (-np.arange(dims // 2) / (dims // 2))
        angle = t[:, None] * omega
        want = Rotation(pairing, dims, offset).apply(x, 0.9 * np.cos(angle), 0.9 * np.sin(angle))
        got = apply_rope(x, t, pairing=pairing, offset=offset, dims=dims, omega=omega, amplitude=0.9)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        untouched = np.setdiff1d(np.arange(12), np.arange(offset, offset + dims))
        np.testing.assert_array_equal(got[:, untouched], x[:, untouched])


def test_rope_keeps_q_dot_k_a_function_of_the_distance():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(1, D)), rng.normal(size=(1, D))
    kw = dict(pairing="half", offset=0, dims=D, omega=OMEGA)
    dots = [float((apply_rope(q, np.array([s + 37.0]), **kw) @ apply_rope(k, np.array([float(s)]), **kw).T)[0, 0])
            for s in (0, 100, 2500)]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-10)
    with pytest.raises(ValueError, match="does not fit"):
        apply_rope(q, np.array([1.0]), pairing="half", offset=4, dims=D, omega=OMEGA)


def test_a_pre_rope_dataset_gives_the_tables_of_its_post_rope_twin(tmp_path):
    home = tmp_path / "home"
    api.ingest(_write(tmp_path / "post", pre_rope=False), model="post", home=home, workers=1)
    result = api.ingest(_write(tmp_path / "pre", pre_rope=True), model="pre", home=home, workers=1)
    assert any("captured before RoPE" in n for n in result.notes)
    con = api.connect(home)
    for table, keys, cols in (("rope_planes", "layer, head, j", "coherence_q, coherence_k, raw_coherence_q, var_frac"),
                              ("rotation", "layer, head", "r_q_a, r_k_a, alpha_k, mu_q_a, bias_strength, omega"),
                              ("heads", "layer, head", "pos_var_q, pos_var_k, fisher_pc0")):
        a, b = (np.array(con.sql(f"select {cols} from {table} where model = '{m}' order by {keys}").fetchall(),
                         dtype=np.float64) for m in ("post", "pre"))
        assert a.shape == b.shape and a.size
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-9, err_msg=table)
    # the planes rotate in the RoPE layer, not in the NoPE layer (left as stored)
    rotating = dict(con.sql("select layer, sum(rotating::int) from rope_planes where model = 'pre' "
                            "group by layer").fetchall())
    assert rotating[0] > 0 and rotating[1] == 0
    assert dict(con.sql("select model, pre_rope from models").fetchall()) == {"post": False, "pre": True}


def test_a_pre_rope_dataset_without_recorded_rope_is_refused_and_leaves_no_warehouse(tmp_path):
    home = tmp_path / "home"
    with pytest.raises(InputError, match=r"model planted: its capture stored vectors before RoPE \(capture.pre_rope\) "
                                         r"but did not record the frequencies"):
        api.ingest(_write(tmp_path / "pre", pre_rope=True, record=False), home=home, workers=1)
    assert not (home / "models").exists()
    bad = _write(tmp_path / "bad", pre_rope=True)
    meta = json.loads((bad / METADATA_FILE).read_text())
    meta["capture"]["pre_rope"] = "yes"
    (bad / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(InputError, match="capture.pre_rope must be true or false, got 'yes'"):
        api.ingest(bad, home=home, workers=1)

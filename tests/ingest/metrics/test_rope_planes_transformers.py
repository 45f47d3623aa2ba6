"""RoPE planes against transformers' own RoPE: the sense of rotation and the scaled frequencies.

Needs the ``sniff`` extra (torch, transformers), as the capture tests do: marked ``sniff``, which
the default run deselects and ``.ci/run`` runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkdb.ingest.metrics.rope_planes import rope_frequencies, rope_planes

from helpers.rope import apply_rope

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

THETA = 10000.0


def test_phase_convention_matches_transformers_rope():
    """Our sense of rotation is the one transformers' rotate-half RoPE applies."""
    from transformers.models.llama import modeling_llama as llama
    d, n = 16, 400
    rng = np.random.default_rng(0)
    t = rng.integers(0, 1000, n)
    pre = np.tile(rng.standard_normal(d), (n, 1))  # one steady pre-RoPE vector
    omega = THETA ** (-np.arange(0, d, 2) / d)
    freqs = np.outer(t, omega)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos = torch.tensor(np.cos(emb))[None]
    sin = torch.tensor(np.sin(emb))[None]
    x = torch.tensor(pre)[None, None]
    q, _ = llama.apply_rotary_pos_emb(x, x, cos, sin)
    post = q[0, 0].numpy()
    assert np.allclose(post, apply_rope(pre, t, omega, "half"))
    cols = rope_planes(post, t, post, t, rope_theta=THETA, rng=np.random.default_rng(0))
    assert np.all(cols["coherence_q"] > 0.999)
    fitted = rope_planes(post, t, post, t, rope_theta=None, rng=np.random.default_rng(0))
    turning = cols["turns"] > 1
    assert np.allclose(fitted["omega"][turning], omega[turning], rtol=1e-3)


def _transformers_inv_freq(config_kwargs: dict, d: int) -> np.ndarray:
    from transformers import LlamaConfig
    from transformers import modeling_rope_utils as utils

    cfg = LlamaConfig(hidden_size=d * 2, num_attention_heads=2, head_dim=d, **config_kwargs)
    kind = cfg.rope_parameters["rope_type"]
    inv, _ = utils.ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")
    return inv.double().numpy()


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "linear", "factor": 8.0},
        {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192},
        {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 16, "beta_slow": 2},
    ],
)
def test_scaled_frequencies_match_transformers(scaling):
    d, theta = 128, 500000.0
    ref = _transformers_inv_freq(
        {"rope_parameters": {"rope_theta": theta, **scaling}, "max_position_embeddings": 131072}, d
    )
    # transformers computes in float32: agree to its precision.
    assert np.allclose(rope_frequencies(d, theta, scaling), ref, rtol=2e-6)

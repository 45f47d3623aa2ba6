"""Tiny random models of every architecture family ``qkdb sniff`` is checked on, and an independent
recomputation of their queries and keys.

Models are built from transformers' config classes at test time (3 layers, 4 query / 2 KV heads,
d = 8, hidden 32) with a byte-level BPE tokenizer trained here: nothing is downloaded. Weights are
random; biases and q/k norm weights are randomised too, so that a wrong projection or a skipped
norm shows.

The recomputation (:func:`reference`) shares nothing with the capture but the model's weights and
its eager attention: it loads the model with ``attn_implementation="eager"``, catches each layer's
attention input, and in float64 numpy applies the projection, the q/k RMS norm, RoPE with
frequencies from :func:`qkdb.ingest.metrics.rope_planes.rope_frequencies` (checked against the model's own
``inv_freq``, so the ingest's RoPE planes use the model's frequencies too) and the llama-4 query
scale, written out from its definition.
"""

from __future__ import annotations

import shutil

import numpy as np

from qkdb.ingest.capture import texts
from qkdb.ingest.metrics.rope_planes import rope_frequencies

N_LAYERS, N_Q, N_KV, HEAD_DIM, HIDDEN = 3, 4, 2, 8, 32
THETA = 5000.0

# family -> (config class, model class, extra config) ; "gpt2" has no RoPE at all
FAMILIES = ("llama", "llama3", "qwen3", "mistral", "ministral", "ministral3", "smollm3", "gemma3", "gpt2")


def train_tokenizer(folder):
    """A byte-level BPE tokenizer (vocab 320) that adds BOS, saved to ``folder``."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts.pydoc_documents()[:40], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>"
    )
    fast.save_pretrained(folder)
    return folder, len(fast)


def _config(family: str, vocab: int, **extra):
    import transformers as tf

    common = dict(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=N_LAYERS,
        num_attention_heads=N_Q, num_key_value_heads=N_KV, head_dim=HEAD_DIM, max_position_embeddings=1024,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    default = {"rope_type": "default", "rope_theta": THETA}
    if family == "llama":
        return tf.LlamaConfig(**common, rope_parameters=default, attention_bias=True, **extra)
    if family == "llama3":  # Llama 3.1/3.2 frequency scaling, with a short original context so that it matters
        return tf.LlamaConfig(**common, rope_parameters={
            "rope_type": "llama3", "rope_theta": THETA, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, **extra)
    if family == "qwen3":
        return tf.Qwen3Config(**common, rope_parameters=default, attention_bias=True, **extra)
    if family == "mistral":
        return tf.MistralConfig(**common, rope_parameters=default, sliding_window=12, **extra)
    if family == "ministral":  # alternating local and global layers
        return tf.MinistralConfig(**common, rope_parameters=default, sliding_window=12,
                                  layer_types=["sliding_attention", "full_attention", "sliding_attention"], **extra)
    if family == "ministral3":  # YaRN and the llama-4 query scale, from position 16 on
        return tf.Ministral3Config(**common, rope_parameters={
            "rope_type": "yarn", "rope_theta": THETA, "factor": 4.0, "original_max_position_embeddings": 16,
            "max_position_embeddings": 1024, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
            "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}, **extra)
    if family == "smollm3":  # layer 1 applies no RoPE
        return tf.SmolLM3Config(**common, rope_parameters=default, no_rope_layer_interval=2, **extra)
    if family == "gemma3":  # local layers (theta 100) and a global one (theta 5000, linear scaling)
        return tf.Gemma3TextConfig(**common, sliding_window=12, query_pre_attn_scalar=HEAD_DIM,
                                   layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                                    "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": THETA}}, **extra)
    if family == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_embd=HIDDEN, n_layer=N_LAYERS, n_head=N_Q, n_positions=1024,
                             bos_token_id=1, eos_token_id=2, **extra)
    raise ValueError(family)


def build(folder, family: str, tokenizer_folder, vocab: int, seed: int = 0, **extra):
    """A random model of ``family`` saved with the tokenizer to ``folder``."""
    import torch
    import transformers

    shutil.copytree(tokenizer_folder, folder, dirs_exist_ok=True)
    config = _config(family, vocab, **extra)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # random biases and norm weights where the architecture has them
        for attn in attention_modules(model):
            for name in ("q_proj", "k_proj", "c_attn"):
                proj = getattr(attn, name, None)
                if proj is not None and getattr(proj, "bias", None) is not None:
                    proj.bias.normal_()
            for name in ("q_norm", "k_norm"):
                norm = getattr(attn, name, None)
                if norm is not None:
                    norm.weight.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return folder


def attention_modules(model) -> list:
    base = getattr(model, model.base_model_prefix)
    layers = base.layers if hasattr(base, "layers") else base.h
    return [getattr(layer, "self_attn", None) or layer.attn for layer in layers]


def windows(folder, corpus, n: int, max_length: int):
    """The token windows ``qkdb sniff`` makes of the corpus (packed, BOS first)."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return texts.token_windows(
        texts.iter_documents(corpus), lambda s: tok(s, add_special_tokens=False)["input_ids"], max_length,
        bos_id=tok.bos_token_id, eos_id=tok.eos_token_id, limit=n,
    )


def _linear(h: np.ndarray, module, conv1d: bool = False) -> np.ndarray:
    w = module.weight.detach().double().numpy()
    out = h @ (w if conv1d else w.T)  # GPT-2's Conv1D keeps its weight as (in, out)
    return out if module.bias is None else out + module.bias.detach().double().numpy()


def _rms(x: np.ndarray, norm, gemma: bool) -> np.ndarray:
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    w = norm.weight.detach().double().numpy()
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * (1.0 + w) if gemma else y * w  # Gemma's RMSNorm scales by (1 + weight)


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE: plane j = (x_j, x_{j+d/2}) turned by the angle of its cos/sin. x (..., seq, d)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def layer_rope(model, layer: int):
    """(omega (d/2,), attention scaling) of a layer, or None when it applies no RoPE.

    omega comes from qkdb's numpy definition of the layer's RoPE parameters and is checked against
    the model's own ``inv_freq``; the scaling (YaRN's attention factor, 1 otherwise) is the model's.
    """
    cfg = model.config
    rp = getattr(cfg, "rope_parameters", None)
    if not rp:
        return None
    if getattr(cfg, "no_rope_layers", None) is not None and not cfg.no_rope_layers[layer]:
        return None
    rotary = getattr(model, model.base_model_prefix).rotary_emb
    if all(isinstance(v, dict) for v in rp.values()):  # one RoPE per layer type (Gemma3)
        kind = cfg.layer_types[layer]
        rp = rp[kind]
        inv_freq, scaling = getattr(rotary, f"{kind}_inv_freq"), getattr(rotary, f"{kind}_attention_scaling")
    else:
        inv_freq, scaling = rotary.inv_freq, rotary.attention_scaling
    rope_scaling = None if rp.get("rope_type", "default") == "default" else rp
    omega = rope_frequencies(HEAD_DIM, rp["rope_theta"], rope_scaling)
    np.testing.assert_allclose(omega, inv_freq.double().numpy(), rtol=1e-6)
    return omega, float(scaling)


def llama4_scale(pos: np.ndarray, beta: float, original_max: int) -> np.ndarray:
    """transformers' get_llama_4_attn_scale, from its definition."""
    return 1.0 + beta * np.log(1.0 + np.floor(pos / original_max))


def reference(folder, token_windows):
    """Per text and layer: dict(pre_q, pre_k, q, k, scale) — (heads, seq, d) float64 arrays.

    ``pre_*`` are the projections after the q/k norm, ``q``/``k`` after RoPE (as the pre ones in a
    layer without RoPE), and ``scale`` the per-position factor the model applies to its queries on
    top (ones when it applies none).
    """
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    attns = attention_modules(model)
    inputs: dict[int, np.ndarray] = {}

    def hook(i):
        def grab(module, args, kwargs):
            h = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            inputs[i] = h[0].double().numpy()
        return grab

    handles = [a.register_forward_pre_hook(hook(i), with_kwargs=True) for i, a in enumerate(attns)]
    rp = getattr(model.config, "rope_parameters", None) or {}
    gemma = model.config.model_type.startswith("gemma")
    out = []
    try:
        for ids in token_windows:
            with torch.no_grad():
                model(input_ids=torch.as_tensor(ids)[None])
            per_layer = {}
            for i, a in enumerate(attns):
                h = inputs[i]
                n = len(h)
                if hasattr(a, "c_attn"):
                    qkv = _linear(h, a.c_attn, conv1d=True)
                    q, k = qkv[:, :N_Q * HEAD_DIM], qkv[:, N_Q * HEAD_DIM:2 * N_Q * HEAD_DIM]
                    n_kv = N_Q  # GPT-2 has no grouped-query attention
                else:
                    q, k, n_kv = _linear(h, a.q_proj), _linear(h, a.k_proj), N_KV
                q = q.reshape(n, N_Q, HEAD_DIM).transpose(1, 0, 2)
                k = k.reshape(n, n_kv, HEAD_DIM).transpose(1, 0, 2)
                if getattr(a, "q_norm", None) is not None:
                    q, k = _rms(q, a.q_norm, gemma), _rms(k, a.k_norm, gemma)
                pos = np.arange(n, dtype=np.float64)
                rope = layer_rope(model, i)
                if rope is None:
                    rq, rk = q, k
                else:
                    omega, att = rope
                    ang = pos[:, None] * omega[None, :]
                    cos, sin = np.cos(ang) * att, np.sin(ang) * att
                    rq, rk = _rotate(q, cos, sin), _rotate(k, cos, sin)
                beta = rp.get("llama_4_scaling_beta") if isinstance(rp, dict) else None
                scale = llama4_scale(pos, beta, rp["original_max_position_embeddings"]) if beta else np.ones(n)
                per_layer[i] = {"pre_q": q, "pre_k": k, "q": rq, "k": rk, "scale": scale}
            out.append(per_layer)
    finally:
        for hd in handles:
            hd.remove()
    return out

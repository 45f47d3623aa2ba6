"""Tiny random models of every architecture family ``qkdb sniff`` is checked on, and an independent
recomputation of their queries and keys.

Models are built from transformers' config classes at test time (3 layers, 4 query heads, 2 KV
heads where the family has grouped-query attention; d = 8 for the families without partial or
offset RoPE, d = 16 for the others so that partial rotary keeps >= 2 planes) with a byte-level BPE
tokenizer trained here: nothing is downloaded. Weights are random; biases and q/k norm weights are
randomised too, so that a wrong projection or a skipped norm shows.

The recomputation (:func:`reference`) shares nothing with the capture but the model's weights and
its eager attention: it loads the model with ``attn_implementation="eager"``, catches each layer's
attention input, and in float64 numpy applies the projection (split as the family's modeling code
splits it), the q/k norm, RoPE with the pairing, rotated dims and offset the family's modeling code
uses (:class:`Family`: what a reader of that code knows, not what the capture detects) and
frequencies from :func:`qkdb.ingest.metrics.rope_planes.rope_frequencies` (longrope and GPT-J's
fixed table written out here), checked against the model's own ``inv_freq`` — and the llama-4 query
scale, written out from its definition.

``build(..., rings=True)`` makes every token embedding one large shared vector plus small noise:
layer 0's pre-RoPE queries and keys are then nearly the same vector at every position, so after
RoPE they trace clean circles in each true rotation plane (and stay put in unrotated dims).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import numpy as np

from qkdb.ingest.capture import texts
from qkdb.ingest.metrics.rope_planes import rope_frequencies

N_LAYERS, N_Q, N_KV, HEAD_DIM, HIDDEN = 3, 4, 2, 8, 32
THETA = 5000.0
WIDE = 16  # head_dim of the families whose RoPE covers part of the head

# Families whose tiny models existed first (d = 8); FAMILY_SPECS below lists every family.
FAMILIES = ("llama", "llama3", "qwen3", "mistral", "ministral", "ministral3", "smollm3", "gemma3", "gpt2")


@dataclass(frozen=True)
class Family:
    """What the family's modeling code (transformers 5.24) does, as a reader of that code knows it.

    ``pairing`` None: no RoPE. ``rotary_dims`` None: the whole head. ``deinterleave``: the rotated
    slice's input is de-interleaved before a rotate-half rotation (DeepSeek-V3's ``rope_interleave``).
    ``fused``: ``"qkv"`` for one projection [q | k | v], ``"per_head"`` for [q_h | k_h | v_h] per
    head. ``norm``: the q/k norm's kind. ``refused``: a regex of the one-line refusal.
    """

    name: str
    head_dim: int = HEAD_DIM
    n_kv: int = N_KV
    pairing: str | None = "half"
    rotary_dims: int | None = None
    offset: int = 0
    deinterleave: bool = False
    fused: str | None = None
    norm: str | None = None
    mla: bool = False
    refused: str | None = None

    @property
    def r(self) -> int:
        return self.rotary_dims or self.head_dim


FAMILY_SPECS = {f.name: f for f in (
    Family("llama"),
    Family("llama3"),
    Family("qwen3", norm="rms"),
    Family("mistral"),
    Family("ministral"),
    Family("ministral3"),
    Family("smollm3"),
    Family("gemma3", norm="gemma"),
    Family("gpt2", n_kv=N_Q, pairing=None, fused="conv1d"),
    Family("qwen2"),
    Family("mixtral"),
    Family("olmo2", norm="rms_all"),
    Family("gemma2", head_dim=WIDE),
    Family("gpt_neox", head_dim=WIDE, n_kv=N_Q, rotary_dims=4, fused="per_head"),
    Family("persimmon", head_dim=WIDE, n_kv=N_Q, rotary_dims=8, fused="per_head", norm="ln"),
    Family("phi", head_dim=WIDE, rotary_dims=6),
    Family("phi3", head_dim=WIDE, fused="qkv"),
    Family("stablelm", head_dim=WIDE, rotary_dims=4, norm="ln_each"),
    Family("gptj", head_dim=WIDE, n_kv=N_Q, pairing="interleaved", rotary_dims=8),
    Family("cohere", head_dim=WIDE, pairing="interleaved"),
    Family("cohere_qk_norm", head_dim=WIDE, pairing="interleaved", norm="cohere"),
    Family("glm", head_dim=WIDE, pairing="interleaved", rotary_dims=8),
    Family("deepseek_v2", head_dim=24, n_kv=N_Q, pairing="interleaved", rotary_dims=8, offset=16, mla=True),
    Family("deepseek_v3", head_dim=24, n_kv=N_Q, pairing="half", rotary_dims=8, offset=16, deinterleave=True,
           mla=True),
    # OLMo with clip_qkv clamps q/k/v between the projection and RoPE (reproduced by the check)
    Family("olmo_clip"),
    # gpt-oss adds a learned sink logit per head: captured on its own eager attention (sdpa drops them)
    Family("gpt_oss"),
    Family("falcon", head_dim=WIDE, n_kv=1, refused=r"^(?!.*ALiBi).*does not go through transformers' "
                                                     r"AttentionInterface"),
    Family("falcon_alibi", head_dim=WIDE, n_kv=N_Q, pairing=None, refused=r"ALiBi"),
    Family("bloom", head_dim=WIDE, n_kv=N_Q, pairing=None, refused=r"ALiBi"),
    Family("mpt", head_dim=WIDE, n_kv=N_Q, pairing=None, refused=r"ALiBi"),
)}

# model_type -> the FAMILY_SPECS entry its tiny model is built as, where the names differ
MODEL_TYPES = {"gemma3_text": "gemma3", "olmo": "olmo_clip"}

# Phi-3's longrope: an original context of 32 tokens, so that the texts of the tests (64 tokens) use
# the long factors and texts of <= 32 tokens the short ones.
LONGROPE_ORIGINAL = 32
LONGROPE_SHORT = [1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.8, 2.0]
LONGROPE_LONG = [1.0, 1.2, 1.6, 2.4, 3.5, 5.0, 7.0, 9.0]
GEMMA2_SOFTCAP = 2.0
GEMMA2_QUERY_PRE_ATTN_SCALAR = 24


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

    def mk(cls, **kw):  # the family's settings, then the caller's on top
        return cls(**{**kw, **extra})

    common = dict(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=N_LAYERS,
        num_attention_heads=N_Q, num_key_value_heads=N_KV, head_dim=HEAD_DIM, max_position_embeddings=1024,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    # the families whose head_dim follows hidden_size / heads: d = 16
    wide = {**common, "hidden_size": N_Q * WIDE, "head_dim": WIDE}
    derived = {k: v for k, v in wide.items() if k != "head_dim"}
    default = {"rope_type": "default", "rope_theta": THETA}
    if family == "llama":
        return mk(tf.LlamaConfig, **common, rope_parameters=default, attention_bias=True)
    if family == "gpt_oss":  # learned per-head sink logits; sliding and full layers; a mixture of 2 experts
        return mk(tf.GptOssConfig, **common, rope_parameters=default, attention_bias=True, num_local_experts=2,
                  num_experts_per_tok=1, sliding_window=12,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    if family == "llama3":  # Llama 3.1/3.2 frequency scaling, with a short original context so that it matters
        return mk(tf.LlamaConfig, **common, rope_parameters={
            "rope_type": "llama3", "rope_theta": THETA, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    if family == "qwen3":
        return mk(tf.Qwen3Config, **common, rope_parameters=default, attention_bias=True)
    if family == "mistral":
        return mk(tf.MistralConfig, **common, rope_parameters=default, sliding_window=12)
    if family == "ministral":  # alternating local and global layers
        return mk(tf.MinistralConfig, **common, rope_parameters=default, sliding_window=12,
                                  layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    if family == "ministral3":  # YaRN and the llama-4 query scale, from position 16 on
        return mk(tf.Ministral3Config, **common, rope_parameters={
            "rope_type": "yarn", "rope_theta": THETA, "factor": 4.0, "original_max_position_embeddings": 16,
            "max_position_embeddings": 1024, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
            "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1})
    if family == "smollm3":  # layer 1 applies no RoPE
        return mk(tf.SmolLM3Config, **common, rope_parameters=default, no_rope_layer_interval=2)
    if family == "gemma3":  # local layers (theta 100) and a global one (theta 5000, linear scaling)
        return mk(tf.Gemma3TextConfig, **common, sliding_window=12, query_pre_attn_scalar=HEAD_DIM,
                                   layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                                    "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": THETA}})
    if family == "gpt2":
        return mk(tf.GPT2Config, vocab_size=vocab, n_embd=HIDDEN, n_layer=N_LAYERS, n_head=N_Q, n_positions=1024,
                             bos_token_id=1, eos_token_id=2)
    if family == "qwen2":  # YaRN with an attention factor (cos/sin amplitude) != 1
        return mk(tf.Qwen2Config, **common, rope_parameters={
            "rope_type": "yarn", "rope_theta": THETA, "factor": 4.0, "original_max_position_embeddings": 16})
    if family == "mixtral":
        return mk(tf.MixtralConfig, **common, rope_parameters=default, num_local_experts=2, num_experts_per_tok=1,
                                )
    if family == "olmo_clip":
        return mk(tf.OlmoConfig, **{k: v for k, v in common.items() if k != "head_dim"}, rope_parameters=default,
                  clip_qkv=0.05)
    if family == "olmo2":  # q/k RMS norm over all heads at once
        return mk(tf.Olmo2Config, **common, rope_parameters=default)
    if family == "gemma2":  # attention-logit softcapping, query_pre_attn_scalar != head_dim, local/global layers
        return mk(tf.Gemma2Config, **wide, rope_parameters=default, sliding_window=12,
                               query_pre_attn_scalar=GEMMA2_QUERY_PRE_ATTN_SCALAR,
                               attn_logit_softcapping=GEMMA2_SOFTCAP, final_logit_softcapping=None,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                               initializer_range=0.3)
    if family == "gpt_neox":  # Pythia: rotary_pct 0.25 of d = 16 -> 4 dims; fused per-head query_key_value
        return mk(tf.GPTNeoXConfig, vocab_size=vocab, hidden_size=N_Q * WIDE, num_hidden_layers=N_LAYERS,
                                num_attention_heads=N_Q, intermediate_size=128, max_position_embeddings=1024,
                                rotary_pct=0.25, rotary_emb_base=THETA, bos_token_id=1, eos_token_id=2)
    if family == "persimmon":  # partial 0.5, per-head LayerNorm q/k, fused per-head query_key_value
        return mk(tf.PersimmonConfig, vocab_size=vocab, hidden_size=N_Q * WIDE, num_hidden_layers=N_LAYERS,
                                  num_attention_heads=N_Q, intermediate_size=128, max_position_embeddings=1024,
                                  rope_parameters={**default, "partial_rotary_factor": 0.5}, qk_layernorm=True,
                                  bos_token_id=1, eos_token_id=2)
    if family == "phi":  # Phi-2 style: partial 0.4 of d = 16 -> int(6.4) = 6 dims
        return mk(tf.PhiConfig, **derived, rope_parameters={**default, "partial_rotary_factor": 0.4},
                            )
    if family == "phi3":  # longrope with fused [q | k | v]
        return mk(tf.Phi3Config, **{**derived, "max_position_embeddings": 4 * LONGROPE_ORIGINAL},
                             original_max_position_embeddings=LONGROPE_ORIGINAL,
                             rope_parameters={"rope_type": "longrope", "rope_theta": THETA,
                                              "short_factor": LONGROPE_SHORT, "long_factor": LONGROPE_LONG,
                                              "original_max_position_embeddings": LONGROPE_ORIGINAL})
    if family == "stablelm":  # partial 0.25, a LayerNorm per head for q and k (StableLM 2 12B)
        return mk(tf.StableLmConfig, **derived, rope_parameters={**default,
                                                                               "partial_rotary_factor": 0.25},
                                 qk_layernorm=True, use_qkv_bias=True)
    if family == "gptj":  # interleaved, rotary_dim 8 of d = 16, no rope_parameters at all
        return mk(tf.GPTJConfig, vocab_size=vocab, n_embd=N_Q * WIDE, n_layer=N_LAYERS, n_head=N_Q, rotary_dim=8,
                             n_positions=1024, bos_token_id=1, eos_token_id=2)
    if family in ("cohere", "cohere_qk_norm"):  # interleaved; q/k LayerNorm with (heads, d) weights
        return mk(tf.CohereConfig, **wide, rope_parameters=default, use_qk_norm=family == "cohere_qk_norm")
    if family == "glm":  # interleaved, partial 0.5
        return mk(tf.GlmConfig, **wide, rope_parameters={**default, "partial_rotary_factor": 0.5})
    if family in ("deepseek_v2", "deepseek_v3"):  # MLA: RoPE on the last 8 of 24 dims, one shared rotary key
        cls = tf.DeepseekV2Config if family == "deepseek_v2" else tf.DeepseekV3Config
        mla = dict(kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                   first_k_dense_replace=N_LAYERS, n_routed_experts=2, num_experts_per_tok=1, n_group=1,
                   topk_group=1, moe_intermediate_size=32,
                   q_lora_rank=None if family == "deepseek_v2" else 24,
                   rope_parameters={"rope_type": "yarn", "rope_theta": THETA, "factor": 4.0,
                                    "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                                    "mscale": 1.0, "mscale_all_dim": 1.0})
        base = {k: v for k, v in common.items() if k != "head_dim"}
        return mk(cls, **{**base, "num_key_value_heads": N_Q}, **mla)
    if family in ("falcon", "falcon_alibi"):
        return mk(tf.FalconConfig, vocab_size=vocab, hidden_size=N_Q * WIDE, num_hidden_layers=N_LAYERS,
                               num_attention_heads=N_Q, alibi=family == "falcon_alibi",
                               multi_query=family == "falcon", max_position_embeddings=1024,
                               rope_parameters=None if family == "falcon_alibi" else default,
                               bos_token_id=1, eos_token_id=2)
    if family == "bloom":
        return mk(tf.BloomConfig, vocab_size=vocab, hidden_size=N_Q * WIDE, n_layer=N_LAYERS, n_head=N_Q,
                              bos_token_id=1, eos_token_id=2)
    if family == "mpt":
        return mk(tf.MptConfig, vocab_size=vocab, d_model=N_Q * WIDE, n_heads=N_Q, n_layers=N_LAYERS, max_seq_len=1024,
                            bos_token_id=1, eos_token_id=2)
    raise ValueError(family)


def build(folder, family: str, tokenizer_folder, vocab: int, seed: int = 0, rings: bool = False, **extra):
    """A random model of ``family`` saved with the tokenizer to ``folder``.

    ``rings``: every token embedding is one large shared vector plus noise of 1% of its size, so
    that layer 0's queries and keys, after RoPE, lie on circles in each rotation plane.
    """
    import torch
    import transformers

    shutil.copytree(tokenizer_folder, folder, dirs_exist_ok=True)
    config = _config(family, vocab, **extra)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # random biases and norm weights where the architecture has them
        for attn in attention_modules(model):
            if getattr(attn, "sinks", None) is not None:  # (gpt-oss: sink logits large enough to matter)
                attn.sinks.normal_(0.0, 2.0)
            for name in ("q_proj", "k_proj", "c_attn", "qkv_proj", "query_key_value", "q_b_proj", "kv_a_proj_with_mqa"):
                proj = getattr(attn, name, None)
                if proj is not None and getattr(proj, "bias", None) is not None:
                    proj.bias.normal_()
            for name in ("q_norm", "k_norm", "q_layernorm", "k_layernorm", "kv_a_layernorm", "q_a_layernorm"):
                norm = getattr(attn, name, None)
                if norm is None:
                    continue
                for p in norm.parameters():  # StableLM keeps one LayerNorm per head
                    p.normal_(0.0, 0.5)
        if rings:
            emb = model.get_input_embeddings().weight
            shared = torch.randn(emb.shape[1])
            emb.copy_(shared[None, :] + 0.01 * shared.norm() / emb.shape[1] ** 0.5 * torch.randn_like(emb))
    model.save_pretrained(folder)
    return folder


def attention_inputs(folder, token_windows, dtype: str = "float32", eager: bool = False,
                     device: str = "cpu") -> list[dict]:
    """Per text and layer, the queries and keys (heads, seq, d) attention receives, as float32 numpy.

    Caught by an attention function of this module's own (registered as ``tiny_catch``) on the model
    run by transformers alone, in ``dtype`` on ``device``: what a capture must store, bit for bit.
    ``eager``: hand on to the model's eager attention (softcapping models) instead of sdpa.
    """
    import importlib

    import torch
    import transformers
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import eager_mask, sdpa_mask

    caught: dict = {}

    def record(module, query, key, value, attention_mask, *args, **kwargs):
        caught[module.layer_idx] = {"q": query[0].float().cpu().numpy().copy(),
                                    "k": key[0].float().cpu().numpy().copy()}
        if eager:
            forward = importlib.import_module(type(module).__module__).eager_attention_forward
            return forward(module, query, key, value, attention_mask, *args, **kwargs)
        return sdpa_attention_forward(module, query, key, value, attention_mask, *args, **kwargs)

    transformers.AttentionInterface.register("tiny_catch", record)
    transformers.AttentionMaskInterface.register("tiny_catch", eager_mask if eager else sdpa_mask)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype),
                                                              attn_implementation="tiny_catch").to(device)
    out = []
    for ids in token_windows:
        caught = {}
        with torch.inference_mode():
            model(input_ids=torch.as_tensor(ids)[None].to(device), use_cache=False)
        out.append(caught)
    return out


def attention_modules(model) -> list:
    base = getattr(model, model.base_model_prefix)
    layers = next(getattr(base, n) for n in ("layers", "h", "blocks") if hasattr(base, n))
    names = ("self_attn", "attention", "self_attention", "attn")
    return [next(getattr(layer, n) for n in names if getattr(layer, n, None) is not None) for layer in layers]


def rotary_module(model):
    """The model's rotary embedding module (its ``inv_freq`` is the ground truth of the frequencies)."""
    base = getattr(model, model.base_model_prefix)
    return base.rotary_emb


def windows(folder, corpus, n: int, max_length: int, pack: bool = True):
    """The token windows ``qkdb sniff`` makes of the corpus (packed, BOS first)."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return texts.token_windows(
        texts.iter_documents(corpus), lambda s: tok(s, add_special_tokens=False)["input_ids"], max_length,
        pack=pack, bos_id=tok.bos_token_id, eos_id=tok.eos_token_id, limit=n,
    )


def _linear(h: np.ndarray, module, conv1d: bool = False) -> np.ndarray:
    w = module.weight.detach().double().numpy()
    out = h @ (w if conv1d else w.T)  # GPT-2's Conv1D keeps its weight as (in, out)
    return out if module.bias is None else out + module.bias.detach().double().numpy()


def _param(p) -> np.ndarray | None:
    return None if p is None else p.detach().double().numpy()


def _rms(x: np.ndarray, norm, gemma: bool = False) -> np.ndarray:
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    w = _param(norm.weight)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * (1.0 + w) if gemma else y * w  # Gemma's RMSNorm scales by (1 + weight)


def _layer_norm(x: np.ndarray, weight, bias, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    y = y * weight if weight is not None else y
    return y + bias if bias is not None else y


def _norm(x: np.ndarray, norm, kind: str) -> np.ndarray:
    """q/k norm of x (heads, seq, d) as the family applies it."""
    if kind == "rms":
        return _rms(x, norm)
    if kind == "gemma":
        return _rms(x, norm, gemma=True)
    if kind == "rms_all":  # OLMo-2: over all heads' coordinates of a token at once
        h, n, d = x.shape
        flat = x.transpose(1, 0, 2).reshape(n, h * d)
        return _rms(flat, norm).reshape(n, h, d).transpose(1, 0, 2)
    if kind == "ln":
        return _layer_norm(x, _param(norm.weight), _param(norm.bias), norm.eps)
    if kind == "ln_each":  # StableLM: one LayerNorm per head
        return np.stack([_layer_norm(x[i], _param(m.weight), _param(m.bias), m.eps) for i, m in enumerate(norm.norms)])
    if kind == "cohere":  # weights of shape (heads, d), no bias
        w = _param(norm.weight)[:, None, :]
        return _layer_norm(x, w, None, norm.variance_epsilon)
    raise ValueError(kind)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, spec: Family) -> np.ndarray:
    """RoPE of x (..., seq, d) on the family's slice, with one cos/sin column per plane (seq, r/2)."""
    off, r = spec.offset, spec.r
    x = x.copy()
    part = x[..., off:off + r]
    if spec.deinterleave:  # DeepSeek-V3: (x0, x1), (x2, x3) ... rotated and written back as [evens | odds]
        part = np.concatenate([part[..., 0::2], part[..., 1::2]], axis=-1)
    h = r // 2
    if spec.pairing == "half" or spec.deinterleave:
        a, b = part[..., :h], part[..., h:]
        turned = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    else:
        a, b = part[..., 0::2], part[..., 1::2]
        turned = np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(part.shape)
    x[..., off:off + r] = turned
    return x


def _longrope_frequencies(r: int, theta: float, factors) -> np.ndarray:
    """LongRoPE (Phi-3): ω_j = 1 / (factor_j · θ^(2j/r))."""
    return 1.0 / (np.asarray(factors, np.float64) * theta ** (np.arange(0, r, 2, dtype=np.float64) / r))


def gptj_frequencies(r: int) -> np.ndarray:
    """GPT-J's fixed table: θ = 10,000 over the rotated dims (create_sinusoidal_positions), float32 as it computes it."""
    import torch

    return (1.0 / (10000 ** (torch.arange(0, r, 2, dtype=torch.int64) / r))).double().numpy()


def model_inv_freq(model, layer: int | None = None) -> np.ndarray:
    """The frequencies the model's rotary module holds (for its text length), for ``layer``'s type."""
    if model.config.model_type == "gptj":
        return gptj_frequencies(model.config.rotary_dim)
    rotary = rotary_module(model)
    kinds = getattr(rotary, "layer_types", None)
    if kinds is not None and layer is not None:
        return getattr(rotary, f"{model.config.layer_types[layer]}_inv_freq").double().numpy()
    return rotary.inv_freq.double().numpy()


def layer_rope(model, layer: int, spec: Family | None = None, seq_len: int | None = None):
    """(omega (r/2,), attention scaling) of a layer, or None when it applies no RoPE.

    omega comes from qkdb's numpy definition of the layer's RoPE parameters (longrope and GPT-J's
    table written out here) and is checked against the model's own ``inv_freq`` (for longrope:
    the factor set transformers picks for a text of ``seq_len`` tokens); the scaling (YaRN's or
    longrope's attention factor, 1 otherwise) is the model's.
    """
    spec = spec or FAMILY_SPECS.get(model.config.model_type, Family(model.config.model_type))
    cfg = model.config
    if cfg.model_type == "gptj":
        return gptj_frequencies(spec.r), 1.0
    rp = getattr(cfg, "rope_parameters", None)
    if not rp or spec.pairing is None:
        return None
    if getattr(cfg, "no_rope_layers", None) is not None and not cfg.no_rope_layers[layer]:
        return None
    rotary = rotary_module(model)
    if all(isinstance(v, dict) for v in rp.values()):  # one RoPE per layer type (Gemma3)
        kind = cfg.layer_types[layer]
        rp = rp[kind]
        inv_freq, scaling = getattr(rotary, f"{kind}_inv_freq"), getattr(rotary, f"{kind}_attention_scaling")
    else:
        inv_freq, scaling = rotary.inv_freq, rotary.attention_scaling
    kind = rp.get("rope_type", "default")
    if kind == "longrope":
        long = seq_len is not None and seq_len > rp["original_max_position_embeddings"]
        omega = _longrope_frequencies(spec.r, rp["rope_theta"], rp["long_factor" if long else "short_factor"])
        inv_freq = rotary.original_inv_freq if not long else getattr(rotary, "long_inv_freq", inv_freq)
    else:
        scaling_dict = None if kind == "default" else {k: v for k, v in rp.items() if k != "partial_rotary_factor"}
        omega = rope_frequencies(spec.r, rp["rope_theta"], scaling_dict)
    np.testing.assert_allclose(omega, inv_freq.double().numpy(), rtol=1e-6)
    return omega, float(scaling)


def llama4_scale(pos: np.ndarray, beta: float, original_max: int) -> np.ndarray:
    """transformers' get_llama_4_attn_scale, from its definition."""
    return 1.0 + beta * np.log(1.0 + np.floor(pos / original_max))


def _projections(a, h: np.ndarray, spec: Family) -> tuple[np.ndarray, np.ndarray]:
    """Pre-RoPE (q (heads, seq, d), k (kv_heads, seq, d)) of one layer, before any q/k norm."""
    n, d = len(h), spec.head_dim
    if spec.mla:
        if getattr(a, "q_proj", None) is not None:
            q = _linear(h, a.q_proj)
        else:
            q = _linear(_rms(_linear(h, a.q_a_proj), a.q_a_layernorm), a.q_b_proj)
        kv_a = _linear(h, a.kv_a_proj_with_mqa)
        lora, nope = a.kv_lora_rank, a.qk_nope_head_dim
        kv = _linear(_rms(kv_a[:, :lora], a.kv_a_layernorm), a.kv_b_proj).reshape(n, N_Q, -1)
        k = np.concatenate([kv[:, :, :nope], np.broadcast_to(kv_a[:, None, lora:], (n, N_Q, d - nope))], axis=-1)
        return q.reshape(n, N_Q, d).transpose(1, 0, 2), k.transpose(1, 0, 2)
    if spec.fused == "conv1d":
        qkv = _linear(h, a.c_attn, conv1d=True)
        q, k = qkv[:, :N_Q * d], qkv[:, N_Q * d:2 * N_Q * d]
    elif spec.fused == "qkv":
        qkv = _linear(h, a.qkv_proj)
        q, k = qkv[:, :N_Q * d], qkv[:, N_Q * d:(N_Q + spec.n_kv) * d]
    elif spec.fused == "per_head":
        qkv = _linear(h, a.query_key_value).reshape(n, N_Q, 3, d)
        q, k = qkv[:, :, 0], qkv[:, :, 1]
    else:
        q, k = _linear(h, a.q_proj), _linear(h, a.k_proj)
    q = q.reshape(n, N_Q, d).transpose(1, 0, 2)
    k = k.reshape(n, spec.n_kv, d).transpose(1, 0, 2)
    return q, k


def _norms(a, spec: Family):
    for names in (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm")):
        qn, kn = (getattr(a, n, None) for n in names)
        if qn is not None:
            return qn, kn
    return None, None


def reference(folder, token_windows, family: str | None = None):
    """Per text and layer: dict(pre_q, pre_k, q, k, scale) — (heads, seq, d) float64 arrays.

    ``pre_*`` are the projections after the q/k norm, ``q``/``k`` after RoPE (as the pre ones in a
    layer without RoPE), and ``scale`` the per-position factor the model applies to its queries on
    top (ones when it applies none). ``family`` names a :data:`FAMILY_SPECS` entry (default: the
    config's model_type).
    """
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    spec = FAMILY_SPECS[family or MODEL_TYPES.get(model.config.model_type, model.config.model_type)]
    attns = attention_modules(model)
    inputs: dict[int, np.ndarray] = {}

    def hook(i):
        def grab(module, args, kwargs):
            h = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            inputs[i] = h[0].double().numpy()
        return grab

    handles = [a.register_forward_pre_hook(hook(i), with_kwargs=True) for i, a in enumerate(attns)]
    rp = getattr(model.config, "rope_parameters", None) or {}
    out = []
    try:
        for ids in token_windows:
            with torch.no_grad():
                model(input_ids=torch.as_tensor(ids)[None])
            per_layer = {}
            for i, a in enumerate(attns):
                h = inputs[i]
                n = len(h)
                q, k = _projections(a, h, spec)
                qn, kn = _norms(a, spec)
                if qn is not None:
                    q, k = _norm(q, qn, spec.norm), _norm(k, kn, spec.norm)
                clip = getattr(model.config, "clip_qkv", None)
                if clip:  # OLMo: every query and key clamped before RoPE
                    q, k = np.clip(q, -clip, clip), np.clip(k, -clip, clip)
                pos = np.arange(n, dtype=np.float64)
                rope = layer_rope(model, i, spec, seq_len=n)
                if rope is None:
                    rq, rk = q, k
                else:
                    omega, att = rope
                    ang = pos[:, None] * omega[None, :]
                    cos, sin = np.cos(ang) * att, np.sin(ang) * att
                    rq, rk = rotate(q, cos, sin, spec), rotate(k, cos, sin, spec)
                beta = rp.get("llama_4_scaling_beta") if isinstance(rp, dict) else None
                scale = llama4_scale(pos, beta, rp["original_max_position_embeddings"]) if beta else np.ones(n)
                per_layer[i] = {"pre_q": q, "pre_k": k, "q": rq, "k": rk, "scale": scale}
            out.append(per_layer)
    finally:
        for hd in handles:
            hd.remove()
    return out


def rope_truth(folder, ids, family: str) -> list[dict]:
    """Per layer, what the model's own modules hold for a text ``ids`` (frequencies None without RoPE).

    ``inv_freq``: the rotary module's frequencies after a forward pass over the text (longrope
    rewrites them for the text's length; GPT-J has no buffer: its fixed table's frequencies), each
    checked against the independent definition of :func:`layer_rope`; ``attention_factor``: its
    ``attention_scaling``; ``scaling``: the ``scaling`` attribute the layer's attention module passes
    to attention.
    """
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    spec = FAMILY_SPECS[family]
    with torch.no_grad():
        model(input_ids=torch.as_tensor(ids)[None])
    out = []
    for layer, attn in enumerate(attention_modules(model)):
        scaling = getattr(attn, "scaling", None)
        rope = layer_rope(model, layer, spec, seq_len=len(ids))
        if rope is None:
            out.append({"inv_freq": None, "attention_factor": None, "scaling": scaling})
            continue
        omega, att = rope
        buffer = model_inv_freq(model, layer)
        np.testing.assert_allclose(omega, buffer, rtol=1e-6)
        out.append({"inv_freq": buffer, "attention_factor": att, "scaling": scaling})
    return out


def sniff_family(folder, corpus, out, **kw):
    """``qkdb sniff`` of a tiny model over a corpus, every query head, seed 3 (the family, device and GPU tests).

    ``kw``: the caller's ``n_texts``, ``max_length``, ``vectors_per_head`` and any other option, overriding these.
    """
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    opts = dict(out=out, model_path=folder, text=str(corpus), q_heads=None, min_bucket_size=16, seed=3)
    opts.update(kw)
    return sniff(SniffOptions(**opts))


def stored_vectors(out) -> dict:
    """(layer, head, 'q' or 'k') -> the vectors a capture stored in ``out``."""
    from qkdb.ingest.sources.layout import discover, read_head

    found = discover(out)
    return {(l, h, k): read_head(hf.path) for k, table in (("q", found.queries), ("k", found.keys))
            for (l, h), hf in table.items()}


def unknown_transform(monkeypatch) -> None:
    """Make tiny Llamas add a constant to their queries after RoPE: a step between projection and attention
    that is no rotation, scale or clamp qkdb sniff knows (for the tests of what it refuses)."""
    import transformers.models.llama.modeling_llama as llama

    rope = llama.apply_rotary_pos_emb

    def shifted(q, k, cos, sin, *args, **kwargs):
        q, k = rope(q, k, cos, sin, *args, **kwargs)
        return q + 0.5, k

    monkeypatch.setattr(llama, "apply_rotary_pos_emb", shifted)

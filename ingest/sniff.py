"""Capture queries and keys of a causal LM into the sniffed-qk layout (``qkdb sniff``).

How the vectors are caught
--------------------------
transformers routes every attention layer of its modern models through a function looked up
by name in ``transformers.AttentionInterface``. We register one more name whose function
receives ``query`` (batch, heads, seq, head_dim) and ``key`` (batch, kv_heads, seq, head_dim)
exactly as the model computed them — after RoPE, after any q/k norm — copies the sampled rows,
and hands everything on to transformers' own ``sdpa_attention_forward``. The model files are not
patched, so any causal LM that transformers loads (a local Hugging Face folder or a GGUF file)
can be sniffed; its outputs are unchanged. The same name is registered as an sdpa-style mask
builder (``AttentionMaskInterface``), so sliding-window layers keep their windows.

``pre_rope=True`` stores the vectors before RoPE instead: the captured rows are turned back by
the model's own rotary embedding (rotate-half pairing), which is exact up to float32 rounding;
NoPE layers are stored as they are.

What is kept (see :mod:`qkdb.ingest.sampling` for the policy): a seeded sample of query heads
across layers, the KV heads they read, and per text a seeded sample of positions per head file.
Only the sampled rows are copied out of the forward pass, so memory is bounded by
``heads × vectors_per_head × head_dim``, whatever the number or length of the texts.

torch and transformers are imported lazily: ``import qkdb`` works without them, and
:func:`sniff` raises :class:`SniffError` telling the user to install the ``sniff`` extra.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qkdb.errors import SniffError
from qkdb.ingest import sampling, texts
from qkdb.ingest.layout import HEAD_DIR, METADATA_FILE, write_head, write_metadata

ATTENTION_NAME = "qkdb_capture"
INSTALL_HINT = "pip install 'qkdb[sniff]'"

Progress = Callable[..., None]


@dataclass
class SniffOptions:
    """Everything that decides what a capture holds (recorded in the dataset's metadata).

    Exactly one of ``model_path`` (a local Hugging Face model folder) and ``gguf`` (a GGUF file)
    is given.
    """

    out: Path
    model_path: Path | None = None
    gguf: Path | None = None
    text: str = texts.PYDOC
    text_field: str = "text"
    n_texts: int | None = None
    max_length: int = 2048
    pack: bool = True
    q_heads: int | None = 300
    vectors_per_head: int = 4096
    positions: str = "log-uniform"
    min_bucket_size: int = 128
    seed: int = 0
    pre_rope: bool = False
    dtype: str = "float32"
    token_strings: bool = False
    model_name: str | None = None
    family: str | None = None
    hf_model: str | None = None
    model_revision: str | None = None
    force: bool = False
    threads: int | None = None

    def check(self) -> None:
        """Raise :class:`SniffError` for inconsistent options, before anything is loaded."""
        if (self.model_path is None) == (self.gguf is None):
            raise SniffError("give exactly one of --model-path (a Hugging Face model folder) and --gguf (a GGUF file)")
        if self.model_path is not None and not Path(self.model_path).is_dir():
            raise SniffError(f"{self.model_path}: no such model folder")
        if self.gguf is not None and not Path(self.gguf).is_file():
            raise SniffError(f"{self.gguf}: no such GGUF file")
        if self.positions not in sampling.POSITION_POLICIES:
            raise SniffError(
                f"unknown --positions {self.positions!r}; expected one of {', '.join(sampling.POSITION_POLICIES)}"
            )
        if self.dtype not in ("float32", "float16"):
            raise SniffError(f"--dtype must be float32 or float16, got {self.dtype!r}")
        for name in ("vectors_per_head", "min_bucket_size", "max_length"):
            if getattr(self, name) < 1:
                raise SniffError(f"--{name.replace('_', '-')} must be positive")
        if self.q_heads is not None and self.q_heads < 1:
            raise SniffError("--q-heads must be positive")
        if self.n_texts is not None and self.n_texts < 1:
            raise SniffError("--texts must be positive")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise SniffError(f"{out}: exists and is not a folder")
        if out.is_dir() and any(out.iterdir()) and not self.force:
            raise SniffError(f"{out}: folder is not empty (use --force to replace a previous capture)")
        if out.is_dir() and self.force:
            strangers = [p.name for p in out.iterdir() if not _is_capture_entry(p)]
            if strangers:
                raise SniffError(
                    f"{out}: holds files that are not a capture ({', '.join(sorted(strangers)[:3])}); "
                    "refusing to replace it"
                )


@dataclass
class ModelFacts:
    """Architecture facts read from the transformers config."""

    model_type: str
    n_layers: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float | None
    rope_scaling: dict | None
    nope_layers: list[int] = field(default_factory=list)


@dataclass
class SniffResult:
    out: Path
    metadata: dict
    query_heads: list[tuple[int, int]]
    key_heads: list[tuple[int, int]]
    n_texts: int
    n_vectors: int
    seconds: float


def _is_capture_entry(p: Path) -> bool:
    return (p.is_dir() and HEAD_DIR.match(p.name) is not None) or p.name == METADATA_FILE


def _import_backend():
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise SniffError(f"qkdb sniff needs torch and transformers ({exc.name} is missing): {INSTALL_HINT}") from exc
    if not hasattr(transformers, "AttentionInterface"):
        raise SniffError(
            f"transformers {transformers.__version__} is too old for qkdb sniff (needs 5.x): {INSTALL_HINT}"
        )
    return torch, transformers


# --------------------------------------------------------------------------- model facts


def _rope_parameters(cfg) -> dict:
    """The RoPE settings of a config as one flat dict (transformers 5 ``rope_parameters`` or 4.x attributes)."""
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and rp:
        # models with several attention types keep one dict per type; the global layers' one is the RoPE proper
        if all(isinstance(v, dict) for v in rp.values()):
            rp = rp.get("full_attention") or next(iter(rp.values()))
        return dict(rp)
    out = {}
    if getattr(cfg, "rope_theta", None) is not None:
        out["rope_theta"] = cfg.rope_theta
    scaling = getattr(cfg, "rope_scaling", None)
    if isinstance(scaling, dict):
        out.update(scaling)
    return out


def model_facts(config) -> ModelFacts:
    """Layers, heads, head_dim, RoPE base and scaling and NoPE layers of a transformers config."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_q = int(cfg.num_attention_heads)
    n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_q)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_q
    rp = _rope_parameters(cfg)
    theta = rp.get("rope_theta")
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    scaling = {k: v for k, v in rp.items() if k != "rope_theta"} if rope_type != "default" else None
    if rp.get("partial_rotary_factor") not in (None, 1, 1.0):
        scaling = {**(scaling or {}), "partial_rotary_factor": rp["partial_rotary_factor"]}
    # SmolLM3 / Llama 4 style: no_rope_layers[i] is 1 when layer i applies RoPE
    use_rope = getattr(cfg, "no_rope_layers", None)
    nope = [i for i, v in enumerate(use_rope) if not v] if isinstance(use_rope, (list, tuple)) else []
    return ModelFacts(
        model_type=str(getattr(cfg, "model_type", "unknown")),
        n_layers=int(cfg.num_hidden_layers),
        n_q_heads=n_q,
        n_kv_heads=n_kv,
        head_dim=int(head_dim),
        rope_theta=float(theta) if theta is not None else None,
        rope_scaling=scaling,
        nope_layers=nope,
    )


# --------------------------------------------------------------------------- loading


def load_model(options: SniffOptions, torch, transformers):
    """The model (float32, eval mode, our attention function selected) and its tokenizer."""
    kwargs = {"dtype": torch.float32}
    if options.gguf is not None:
        gguf = Path(options.gguf).resolve()
        where, kwargs["gguf_file"] = str(gguf.parent), gguf.name
        what = str(options.gguf)
    else:
        where, what = str(Path(options.model_path).resolve()), str(options.model_path)
        kwargs["local_files_only"] = True
    tok_kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, **tok_kwargs)
    except Exception as exc:  # transformers raises many types here; all mean "cannot use this folder"
        raise SniffError(f"{what}: transformers cannot load a tokenizer from it ({type(exc).__name__}: {exc})") from exc
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(where, **kwargs)
    except Exception as exc:
        raise SniffError(f"{what}: transformers cannot load it as a causal LM ({type(exc).__name__}: {exc})") from exc
    model.eval()
    return model, tokenizer


def _select_attention(model, name: str) -> None:
    try:
        model.set_attn_implementation(name)
    except (AttributeError, ValueError, KeyError):
        pass
    # older or unusual models keep private copies of the config on their layers
    for module in model.modules():
        cfg = getattr(module, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            try:
                cfg._attn_implementation = name
            except (AttributeError, ValueError):
                cfg._attn_implementation_internal = name


def _tokenizer_specials(tokenizer) -> tuple[int | None, int | None]:
    """(bos to start each window or None, eos to separate packed documents or None)."""
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    bos = tokenizer.bos_token_id
    adds_bos = bos is not None and len(probe) > 0 and probe[0] == bos
    return (bos if adds_bos else None), tokenizer.eos_token_id


# --------------------------------------------------------------------------- capture


class _StopForward(Exception):
    """Raised after the deepest sampled layer: the rest of the forward pass is not needed."""


class _Recorder:
    """The registered attention function plus the sampled rows it has collected.

    For the current text, ``picks[(layer, head, kind)]`` holds the row indices to copy; rows go
    into ``chunks`` in the storage dtype, one array per text and head file.
    """

    def __init__(self, torch, sdpa, q_heads, k_heads, store_dtype, rope_inverse, nope_layers):
        self.torch = torch
        self.sdpa = sdpa
        self.q_by_layer: dict[int, list[int]] = {}
        for layer, head in q_heads:
            self.q_by_layer.setdefault(layer, []).append(head)
        self.k_by_layer: dict[int, list[int]] = {}
        for layer, head in k_heads:
            self.k_by_layer.setdefault(layer, []).append(head)
        self.last_layer = max(max(self.q_by_layer), max(self.k_by_layer))
        self.store_dtype = store_dtype
        self.rope_inverse = rope_inverse  # callable(rows (n, d) float64, idx) -> rows, or None
        self.nope_layers = set(nope_layers)
        self.picks: dict[tuple[int, int, str], np.ndarray] = {}
        self.chunks: dict[tuple[int, int, str], list[np.ndarray]] = {}
        self.sliding: dict[int, int | None] = {}
        self.seen_layers: set[int] = set()
        self.active = False

    def _take(self, states, layer: int, heads: list[int], kind: str) -> None:
        for head in heads:
            idx = self.picks[(layer, head, kind)]
            # a numpy view of the (seq, d) slice, then fancy indexing: ~200x faster than torch's for this
            rows = states[0, head].detach().cpu().numpy()[idx]
            if self.rope_inverse is not None and layer not in self.nope_layers:
                rows = self.rope_inverse(rows.astype(np.float64), idx)
            self.chunks.setdefault((layer, head, kind), []).append(rows.astype(self.store_dtype))

    def __call__(self, module, query, key, value, attention_mask, *args, **kwargs):
        layer = getattr(module, "layer_idx", None)
        if self.active and layer is not None:
            if query.shape[0] != 1:
                raise SniffError("internal: qkdb sniff runs one text per forward pass")
            self.seen_layers.add(layer)
            sw = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
            self.sliding.setdefault(layer, int(sw) if sw else None)
            self._take(query, layer, self.q_by_layer.get(layer, []), "q")
            self._take(key, layer, self.k_by_layer.get(layer, []), "k")
            if layer == self.last_layer:
                raise _StopForward
        return self.sdpa(module, query, key, value, attention_mask, *args, **kwargs)


def _rope_inverse_fn(model, torch, head_dim: int):
    """A function turning captured post-RoPE rows back to pre-RoPE with the model's rotary embedding.

    Rotate-half RoPE maps x to ``x·cos + rot(x)·sin`` with ``rot(x) = (−x₂, x₁)``; since cos and sin
    repeat across the two halves, ``y·cos − rot(y)·sin = x·(cos² + sin²)`` recovers x exactly
    (the division undoes any attention scaling folded into cos and sin).
    """
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)
    rotary = getattr(base, "rotary_emb", None)
    if rotary is None:
        raise SniffError("--pre-rope: this model has no rotary_emb module to undo RoPE with")
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def table(length: int):
        if length not in cache:
            pos = torch.arange(length).unsqueeze(0)
            dummy = torch.zeros(1, length, head_dim, dtype=torch.float32)
            try:
                cos, sin = rotary(dummy, pos)
            except TypeError as exc:
                raise SniffError(f"--pre-rope is not supported for this architecture ({exc})") from exc
            cos = cos[0].to(torch.float64).numpy()
            sin = sin[0].to(torch.float64).numpy()
            if cos.shape[-1] != head_dim:
                raise SniffError("--pre-rope supports only RoPE over the whole head dimension")
            cache.clear()
            cache[length] = (cos, sin)
        return cache[length]

    def invert(rows: np.ndarray, idx: np.ndarray, length: int) -> np.ndarray:
        cos, sin = table(length)
        c, s = cos[idx], sin[idx]
        half = head_dim // 2
        rot = np.concatenate([-rows[:, half:], rows[:, :half]], axis=1)
        return (rows * c - rot * s) / (c * c + s * s)

    return invert


def _default_name(options: SniffOptions) -> str:
    src = Path(options.gguf) if options.gguf is not None else Path(options.model_path).resolve()
    stem = src.stem if options.gguf is not None else src.name
    name = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.")
    return name or "sniffed-model"


def _publish(tmp: Path, out: Path) -> None:
    """Move a finished capture into place; an existing capture is replaced only as a whole."""
    if out.is_dir():
        for entry in out.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for entry in tmp.iterdir():
            os.replace(entry, out / entry.name)
        tmp.rmdir()
    else:
        os.replace(tmp, out)


def sniff(options: SniffOptions, progress: Progress | None = None) -> SniffResult:
    """Run the capture described by ``options`` and write it to ``options.out``.

    ``progress(event, **info)`` is called with ``"load"``, ``"plan"`` (texts, query_heads,
    key_heads), ``"text"`` (done, total) and ``"write"`` (done, total) events.

    Returns
    -------
    SniffResult
        Where the dataset went, its metadata and what was captured.
    """
    t0 = time.perf_counter()
    progress = progress or (lambda *a, **k: None)
    options.check()
    torch, transformers = _import_backend()
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if options.threads:
        torch.set_num_threads(int(options.threads))
    progress("load", what=str(options.gguf or options.model_path))
    model, tokenizer = load_model(options, torch, transformers)
    facts = model_facts(model.config)
    try:
        ratio = sampling.gqa_ratio(facts.n_q_heads, facts.n_kv_heads)
    except ValueError as exc:
        raise SniffError(f"{options.gguf or options.model_path}: {exc}") from exc

    bos, eos = _tokenizer_specials(tokenizer)
    windows = texts.token_windows(
        texts.iter_documents(options.text, options.text_field),
        lambda s: tokenizer(s, add_special_tokens=False)["input_ids"],
        options.max_length,
        pack=options.pack,
        bos_id=bos,
        eos_id=eos,
        limit=options.n_texts,
    )
    q_heads = sampling.sample_query_heads(facts.n_layers, facts.n_q_heads, options.q_heads, options.seed)
    k_heads = sampling.key_heads_for(q_heads, facts.n_q_heads, facts.n_kv_heads)
    per_text = sampling.split_evenly(options.vectors_per_head, len(windows))
    progress("plan", texts=len(windows), query_heads=len(q_heads), key_heads=len(k_heads))

    invert = _rope_inverse_fn(model, torch, facts.head_dim) if options.pre_rope else None
    recorder = _Recorder(
        torch, sdpa_attention_forward, q_heads, k_heads, np.dtype(options.dtype), None, facts.nope_layers
    )
    # one fixed name: a later capture in the same process replaces this recorder, none piles up
    transformers.AttentionInterface.register(ATTENTION_NAME, recorder)
    # masks are built as for sdpa (sliding windows, padding); an unknown name would get no mask at all
    from transformers.masking_utils import sdpa_mask

    transformers.AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    _select_attention(model, ATTENTION_NAME)
    # the base model only: the LM head's logits (seq × vocab floats) are not needed
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)

    files = [(l, h, "q") for l, h in q_heads] + [(l, h, "k") for l, h in k_heads]
    positions: dict[tuple[int, int, str], list[np.ndarray]] = {f: [] for f in files}
    buckets: dict[tuple[int, int, str], list[np.ndarray]] = {f: [] for f in files}
    examples: dict[tuple[int, int, str], list[np.ndarray]] = {f: [] for f in files}
    tokens: dict[tuple[int, int, str], list[str]] = {f: [] for f in files}
    n_tokens = 0
    for example_id, (ids, count) in enumerate(zip(windows, per_text)):
        n_tokens += len(ids)
        recorder.picks = {}
        for f in files:
            rng = sampling.position_rng(options.seed, example_id, *f)
            pick = sampling.sample_positions(len(ids), int(count), rng, options.positions, options.min_bucket_size)
            recorder.picks[f] = pick.positions
            positions[f].append(pick.positions)
            buckets[f].append(pick.buckets)
            examples[f].append(np.full(len(pick.positions), example_id, np.int64))
            if options.token_strings:
                tokens[f].extend(tokenizer.convert_ids_to_tokens(ids[pick.positions].tolist()))
        if invert is not None:
            recorder.rope_inverse = lambda rows, idx, _n=len(ids): invert(rows, idx, _n)
        recorder.active = True
        try:
            with torch.inference_mode():
                base(input_ids=torch.as_tensor(ids).unsqueeze(0), use_cache=False)
        except _StopForward:
            pass
        except SniffError:
            raise
        except Exception as exc:
            raise SniffError(f"the forward pass failed on text {example_id} ({type(exc).__name__}: {exc})") from exc
        finally:
            recorder.active = False
        if example_id == 0:
            missing = sorted({l for l, _, _ in files} - recorder.seen_layers)
            if missing:
                raise SniffError(
                    f"{options.gguf or options.model_path}: the model does not route attention through "
                    f"transformers' AttentionInterface (no capture from layers {missing[:5]}); qkdb sniff "
                    "cannot read its queries and keys"
                )
        progress("text", done=example_id + 1, total=len(windows))

    out = Path(options.out)
    tmp = out.parent / f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.mkdir(parents=True)
    n_vectors = 0
    try:
        for i, f in enumerate(files):
            layer, head, kind = f
            vecs = np.concatenate(recorder.chunks.pop(f))
            n_vectors += len(vecs)
            write_head(
                tmp, layer, head, kind, vecs,
                np.concatenate(positions[f]),
                example_id=np.concatenate(examples[f]),
                bucket=np.concatenate(buckets[f]),
                sliding_window=recorder.sliding.get(layer),
                token_str=tokens[f] if options.token_strings else None,
                dtype=options.dtype,
            )
            progress("write", done=i + 1, total=len(files))
        metadata = _metadata(options, facts, ratio, q_heads, len(windows), n_tokens, transformers, torch)
        write_metadata(tmp, metadata)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return SniffResult(out, metadata, q_heads, k_heads, len(windows), n_vectors, time.perf_counter() - t0)


def _metadata(options, facts: ModelFacts, ratio, q_heads, n_windows, n_tokens, transformers, torch) -> dict:
    from qkdb.api import version

    weights = (
        {"gguf_file": Path(options.gguf).name} if options.gguf is not None
        else {"model_path": str(Path(options.model_path).resolve())}
    )
    meta = {
        "model": options.model_name or _default_name(options),
        "family": options.family or facts.model_type,
        "n_layers": facts.n_layers,
        "n_q_heads": facts.n_q_heads,
        "n_kv_heads": facts.n_kv_heads,
        "gqa_ratio": ratio,
        "head_dim": facts.head_dim,
        "rope_theta": facts.rope_theta,
        "rope_pairing": "half",
        "rope_scaling": facts.rope_scaling,
        "nope_layers": facts.nope_layers,
        "source": "sniff",
        "hf_model": options.hf_model or str(options.gguf or options.model_path),
        "capture": {
            "tool": "qkdb sniff",
            "qkdb_version": version(),
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            # the pydoc corpus changes between Python releases: an exact rerun needs the same one
            "python_version": platform.python_version(),
            **weights,
            "model_type": facts.model_type,
            "seed": options.seed,
            "texts": {
                "source": str(options.text),
                "n_texts": n_windows,
                "n_tokens": n_tokens,
                "pack": options.pack,
            },
            "max_length": options.max_length,
            "q_heads": len(q_heads),
            "q_heads_sampling": "numpy default_rng(seed).choice(n_layers*n_q_heads, q_heads, replace=False)",
            "positions": {
                "policy": options.positions,
                "min_bucket_size": options.min_bucket_size,
                "vectors_per_head": options.vectors_per_head,
            },
            "pre_rope": options.pre_rope,
            "dtype": options.dtype,
            "token_strings": options.token_strings,
        },
    }
    if options.model_revision:
        meta["model_revision"] = options.model_revision
    return meta


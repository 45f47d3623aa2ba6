"""Capture queries and keys of a causal LM into the sniffed-qk layout (``qkdb sniff``).

How the vectors are caught
--------------------------
transformers routes every attention layer of its modern models through a function looked up
by name in ``transformers.AttentionInterface``. We register one more name whose function
(:class:`qkdb.ingest.capture.sniff_recorder.Recorder`) receives ``query`` (batch, heads, seq, head_dim) and
``key`` (batch, kv_heads, seq, head_dim) exactly as the model computed them, copies the sampled
rows, and hands everything on to transformers' own ``sdpa_attention_forward``. The model files are
not patched, so any causal LM that transformers loads (a local Hugging Face folder or a GGUF file)
can be sniffed; its outputs are unchanged. The same name is registered as an sdpa-style mask
builder (``AttentionMaskInterface``), so sliding-window layers keep their windows.

What is stored, and how it is checked
-------------------------------------
Every stored row is compared with the layer's own projection (``q_proj``/``k_proj``, through its
``q_norm``/``k_norm``) rotated by the layer's own RoPE ``cos``/``sin`` — or not rotated, in layers
without RoPE. Position-dependent factors the model applies that are not RoPE (Ministral3's llama-4
query scale) are divided out by default and recorded in ``position_scaling``; anything else that
makes a row differ stops the capture with an error naming the layer. ``pre_rope=True`` stores the
rows before the rotation, undone with the layer's own cos/sin.

What is kept (see :mod:`qkdb.ingest.capture.sampling` for the policy): a seeded sample of query heads
across layers, the KV heads they read, and per text a seeded sample of positions per head file.
All positions are drawn before the model loads, so texts that are too short are reported before
any forward pass; the rows go into arrays allocated once, so memory is bounded by
``heads × vectors_per_head × head_dim``, whatever the number or length of the texts.

torch and transformers are imported lazily: ``import qkdb`` works without them, and
:func:`sniff` raises :class:`SniffError` telling the user to install the ``sniff`` extra.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qkdb.errors import SniffError
from qkdb.ingest.sources import registry
from qkdb.ingest.capture import sampling
from qkdb.ingest.capture import texts
from qkdb.ingest.sources.layout import HEAD_DIR, METADATA_FILE, head_dir_name, write_head, write_metadata
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.capture import attention_backend
from qkdb.ingest.capture.rope_layout import FrequencySource
from qkdb.ingest.capture.rope_record import rope_facts
from qkdb.ingest.capture.rope_record import summary as rope_summary
from qkdb.ingest.capture.sniff_recorder import PositionScaling, Recorder, StopForward, check_summary

ATTENTION_NAME = "qkdb_capture"
INSTALL_HINT = "pip install 'qkdb[sniff]'"

# transformers model_type -> the registry's family name, where the architecture is one family.
# ("llama" is not here: Llama 2, 3.1, 3.2, SmolLM2 ... share it; the registry's hf_model tells them apart.)
FAMILY_OF_MODEL_TYPE = {"qwen3": "Qwen3", "mistral": "Mistral", "ministral3": "Ministral3", "smollm3": "SmolLM3"}

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
    keep_position_scaling: bool = False
    unchecked: bool = False
    dtype: str = "float32"
    token_strings: bool = False
    model_name: str | None = None
    family: str | None = None
    hf_model: str | None = None
    model_revision: str | None = None
    force: bool = False
    threads: int | None = None

    def check(self) -> None:
        """Raise :class:`SniffError` for bad options or inputs, before anything is loaded.

        Checks that the model folder holds a model (a ``config.json``) or the GGUF file is one,
        that the text source exists and holds some text, and that the output can be written.
        """
        if (self.model_path is None) == (self.gguf is None):
            raise SniffError("give exactly one of --model-path (a Hugging Face model folder) and --gguf (a GGUF file)", kind="usage")
        if self.model_path is not None:
            _check_model_folder(Path(self.model_path))
        if self.gguf is not None:
            _check_gguf(Path(self.gguf))
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
        if self.pre_rope and self.keep_position_scaling:
            raise SniffError(
                "--pre-rope stores the vectors before RoPE, without any position scaling; "
                "--keep-position-scaling cannot apply to them"
            )
        texts.check_source(self.text, self.text_field)
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


def _check_model_folder(path: Path) -> None:
    if not path.is_dir():
        raise SniffError(f"{path}: no such model folder", kind="not_found")
    if not (path / "config.json").is_file():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = f"; for the GGUF file use --gguf {path / ggufs[0]}" if ggufs else ""
        raise SniffError(f"{path}: no model here (no config.json of a Hugging Face model folder){hint}")


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise SniffError(f"{path}: no such GGUF file", kind="not_found")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise SniffError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    if magic != b"GGUF":
        raise SniffError(f"{path}: not a GGUF file (it does not start with the GGUF magic bytes)")


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
    # the config's NoPE layers (what each captured layer does is established from its rows, and wins)
    nope_layers: list[int] = field(default_factory=list)
    # what the config declares: "rotary", or "none" without RoPE parameters (GPT-2; also GPT-J, whose
    # RoPE is in its code: what is recorded is what the layers do)
    rope: str = "rotary"
    # the config's global RoPE parameters as one flat dict (provenance; longrope's threshold)
    rope_parameters: dict = field(default_factory=dict)
    # each layer's own RoPE base and scaling, when the layers differ (Gemma3: local and global layers)
    layer_rope_theta: list[float | None] | None = None
    layer_rope_scaling: list[dict | None] | None = None
    position_scalings: list[PositionScaling] = field(default_factory=list)


@dataclass
class SniffResult:
    out: Path
    metadata: dict
    query_heads: list[tuple[int, int]]
    key_heads: list[tuple[int, int]]
    n_texts: int
    n_vectors: int
    seconds: float
    notes: list[str] = field(default_factory=list)  # one line each, for the user (stderr)
    rope: str = ""  # one line: the RoPE recorded (layout, frequencies' source, attention scale)


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


def _one_line(exc: BaseException) -> str:
    """An exception as one short line (transformers' messages run over several)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}{'…' if len(text) > 300 else ''}"


# --------------------------------------------------------------------------- model facts


def _flat_rope(rp: dict) -> tuple[float | None, dict | None]:
    """(rope_theta, scaling or None) of one flat transformers RoPE dict."""
    theta = rp.get("rope_theta")
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    # partial rotary is not a scaling of the frequencies: the capture records it as rotary_dims
    scaling = ({k: v for k, v in rp.items() if k not in ("rope_theta", "partial_rotary_factor")}
               if rope_type != "default" else None)
    return (float(theta) if theta is not None else None), scaling


def _rope_parameters(cfg) -> tuple[dict, dict[str, dict]]:
    """The model's RoPE settings as one flat dict, and the per-attention-type dicts when there are several.

    transformers 5 keeps ``rope_parameters`` (one dict, or one per layer type: Gemma3's
    ``sliding_attention`` / ``full_attention``); 4.x configs keep ``rope_theta`` and ``rope_scaling``.
    The flat dict is the global layers' one.
    """
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and rp:
        if all(isinstance(v, dict) for v in rp.values()):
            return dict(rp.get("full_attention") or next(iter(rp.values()))), {k: dict(v) for k, v in rp.items()}
        return dict(rp), {}
    out = {}
    if getattr(cfg, "rope_theta", None) is not None:
        out["rope_theta"] = cfg.rope_theta
    scaling = getattr(cfg, "rope_scaling", None)
    if isinstance(scaling, dict):
        out.update(scaling)
    return out, {}


def model_facts(config) -> ModelFacts:
    """Layers, heads, head_dim, RoPE (base, scaling, per layer), NoPE layers and non-RoPE position scalings."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_q = int(cfg.num_attention_heads)
    n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_q)
    # multi-head latent attention (DeepSeek-V2/V3) sets head_dim to its rotary part; attention
    # receives qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
    head_dim = getattr(cfg, "qk_head_dim", None) or getattr(cfg, "head_dim", None) or cfg.hidden_size // n_q
    n_layers = int(cfg.num_hidden_layers)
    rp, by_type = _rope_parameters(cfg)
    theta, scaling = _flat_rope(rp)
    # SmolLM3 / Llama 4 style: no_rope_layers[i] is 1 when layer i applies RoPE
    use_rope = getattr(cfg, "no_rope_layers", None)
    nope = [i for i, v in enumerate(use_rope) if not v] if isinstance(use_rope, (list, tuple)) else []
    rope = "rotary" if rp else "none"
    layer_theta = layer_scaling = None
    layer_types = getattr(cfg, "layer_types", None)
    if by_type and isinstance(layer_types, (list, tuple)) and len(layer_types) == n_layers:
        per_layer = [_flat_rope(by_type.get(t, rp)) for t in layer_types]
        if len({json.dumps(p, sort_keys=True) for p in per_layer}) > 1:
            layer_theta = [p[0] for p in per_layer]
            layer_scaling = [p[1] for p in per_layer]
    scalings = []
    beta = rp.get("llama_4_scaling_beta")
    if beta:
        orig = rp.get("original_max_position_embeddings")
        if not orig:
            raise SniffError("the config sets llama_4_scaling_beta without original_max_position_embeddings")
        scalings.append(PositionScaling(
            "q", "llama4", tuple(range(n_layers)),
            {"beta": float(beta), "original_max_position_embeddings": int(orig)},
        ))
    return ModelFacts(
        model_type=str(getattr(cfg, "model_type", "unknown")),
        n_layers=n_layers,
        n_q_heads=n_q,
        n_kv_heads=n_kv,
        head_dim=int(head_dim),
        rope_theta=theta,
        rope_scaling=scaling,
        nope_layers=nope,
        rope=rope,
        rope_parameters=rp,
        layer_rope_theta=layer_theta,
        layer_rope_scaling=layer_scaling,
        position_scalings=scalings,
    )


# --------------------------------------------------------------------------- names


def _default_name(options: SniffOptions) -> str:
    src = Path(options.gguf) if options.gguf is not None else Path(options.model_path).resolve()
    stem = src.stem if options.gguf is not None else src.name
    name = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.")
    return name or "sniffed-model"


def _hub_cache_origin(path: Path) -> tuple[str | None, str | None]:
    """(repo id, revision) of a path inside a Hugging Face cache (``models--org--name/snapshots/<sha>``)."""
    parts = path.resolve().parts
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 2 < len(parts) and parts[i + 1] == "snapshots":
            return part[len("models--"):].replace("--", "/"), parts[i + 2]
    return None, None


def _gguf_origin(path: Path) -> str | None:
    """The Hugging Face repo a GGUF file says it was converted from, if it says so."""
    try:
        from gguf import GGUFReader

        fields = GGUFReader(str(path)).fields
    except Exception:  # a file transformers can read but gguf cannot: no origin, not an error
        return None

    def value(key: str):
        f = fields.get(key)
        try:
            return f.contents() if f is not None else None
        except Exception:
            return None

    repo = value("general.source.huggingface.repository")
    if isinstance(repo, str) and repo.strip():
        return repo.strip()
    url = value("general.source.url")
    if isinstance(url, str):
        m = re.match(r"https?://huggingface\.co/([^/\s]+/[^/\s]+)", url.strip())
        if m:
            return m.group(1)
    return None


def _origin(options: SniffOptions) -> tuple[str, str | None]:
    """(hf_model, model_revision) to record: given, else the repo id when known, else the file name.

    Never an absolute local path: the record must mean the same on another machine.
    """
    src = Path(options.gguf if options.gguf is not None else options.model_path)
    repo, rev = _hub_cache_origin(src.parent if options.gguf is not None else src)
    if repo is None and options.gguf is not None:
        repo = _gguf_origin(src)
    if options.hf_model is not None and options.hf_model != repo:
        rev = None  # the cache's snapshot is a revision of another repo than the one given
    return options.hf_model or repo or src.resolve().name, options.model_revision or rev


def default_family(model_type: str, hf_model: str | None) -> str:
    """The registry's family of the model when it is known to it, else the config's ``model_type``."""
    for spec in registry.load_registry():
        if hf_model and spec.hf_model and spec.hf_model.lower() == hf_model.lower():
            return spec.family
    return FAMILY_OF_MODEL_TYPE.get(model_type, model_type)


# --------------------------------------------------------------------------- loading


def _where(options: SniffOptions) -> tuple[str, dict, str]:
    """(folder, from_pretrained kwargs, name for messages)."""
    if options.gguf is not None:
        gguf = Path(options.gguf).resolve()
        return str(gguf.parent), {"gguf_file": gguf.name}, str(options.gguf)
    return str(Path(options.model_path).resolve()), {"local_files_only": True}, str(options.model_path)


def load_config(options: SniffOptions, transformers):
    where, kwargs, what = _where(options)
    try:
        return transformers.AutoConfig.from_pretrained(where, **kwargs)
    except Exception as exc:  # transformers raises many types here; all mean "cannot use this"
        raise SniffError(f"{what}: transformers cannot read its model config ({_one_line(exc)})") from exc


def load_tokenizer(options: SniffOptions, transformers):
    where, kwargs, what = _where(options)
    try:
        return transformers.AutoTokenizer.from_pretrained(where, **kwargs)
    except Exception as exc:
        raise SniffError(f"{what}: transformers cannot load a tokenizer from it ({_one_line(exc)})") from exc


def load_model(options: SniffOptions, torch, transformers):
    """The model in float32 and eval mode."""
    where, kwargs, what = _where(options)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kwargs)
    except Exception as exc:
        raise SniffError(f"{what}: transformers cannot load it as a causal LM ({_one_line(exc)})") from exc
    model.eval()
    return model


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


def _attention_modules(model) -> dict[int, object]:
    """Each layer's attention module (the one with a ``layer_idx`` whose class names attention)."""
    found: dict[int, object] = {}
    for module in model.modules():
        layer = getattr(module, "layer_idx", None)
        if isinstance(layer, int) and "attention" in type(module).__name__.lower():
            found.setdefault(layer, module)
    return found


def _tokenizer_specials(tokenizer) -> tuple[int | None, int | None]:
    """(bos to start each window or None, eos to separate packed documents or None)."""
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    bos = tokenizer.bos_token_id
    adds_bos = bos is not None and len(probe) > 0 and probe[0] == bos
    return (bos if adds_bos else None), tokenizer.eos_token_id


# --------------------------------------------------------------------------- the plan


class CapturePlan:
    """Which rows each head file keeps from each text, drawn before the model loads, and where they go.

    A head file keeps ``min(share, length)`` positions of each text (its share of
    ``vectors_per_head``, or all positions of a shorter text), so every file keeps the same count;
    ``store`` writes a text's rows into the file's array, allocated once for the whole capture.
    """

    def __init__(self, files, lengths, options: SniffOptions, head_dim: int):
        self.files = list(files)
        self.lengths = np.asarray(lengths, np.int64)
        self.asked = options.vectors_per_head
        share = sampling.split_evenly(options.vectors_per_head, len(self.lengths))
        self.counts = np.minimum(share, self.lengths)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)])
        n = int(self.offsets[-1])
        self.example_id = np.repeat(np.arange(len(self.lengths), dtype=np.int32), self.counts)
        self.positions: dict[tuple, np.ndarray] = {}
        self.buckets: dict[tuple, np.ndarray] = {}
        for f in self.files:
            pos, bucket = np.empty(n, np.int64), np.empty(n, np.int32)
            for e, length in enumerate(self.lengths):
                a, b = self.offsets[e], self.offsets[e + 1]
                rng = sampling.position_rng(options.seed, e, *f)
                pick = sampling.sample_positions(int(length), int(self.counts[e]), rng, options.positions,
                                                 options.min_bucket_size)
                pos[a:b], bucket[a:b] = pick.positions, pick.buckets
            self.positions[f], self.buckets[f] = pos, bucket
        self.dtype = np.dtype(options.dtype)
        self.head_dim = head_dim
        self.vectors: dict[tuple, np.ndarray] = {}

    @property
    def kept(self) -> int:
        """Rows every head file keeps."""
        return int(self.offsets[-1])

    def allocate(self) -> None:
        # Once, before the first forward pass (see sniff_recorder's module doc for why it matters).
        self.vectors = {f: np.zeros((self.kept, self.head_dim), self.dtype) for f in self.files}

    def positions_of(self, f, text: int) -> np.ndarray:
        return self.positions[f][self.offsets[text]:self.offsets[text + 1]]

    def store(self, f, text: int, rows: np.ndarray) -> None:
        self.vectors[f][self.offsets[text]:self.offsets[text + 1]] = rows

    def shortfall(self, minimum: int) -> tuple[list[str], str | None]:
        """Notes when the files keep fewer rows than asked, and an error when fewer than ``minimum``."""
        if self.kept >= self.asked:
            return [], None
        short = int(np.sum(self.counts < sampling.split_evenly(self.asked, len(self.lengths))))
        why = (f"{short} of the {len(self.lengths)} texts hold fewer tokens than their share "
               f"(lengths {_range(self.lengths)})")
        names = ", ".join(head_dir_name(*f) for f in self.files[:6]) + (
            f" and {len(self.files) - 6} more" if len(self.files) > 6 else "")
        if self.kept < minimum:
            return [], (f"every head file would keep only {self.kept} vectors ({names}), fewer than the "
                        f"{minimum} an ingest needs (asked for {self.asked}; {why}): use longer or more texts")
        return [f"each of the {len(self.files)} head files keeps {self.kept} of the {self.asked} vectors asked "
                f"for ({names}): {why}"], None


def _range(values) -> str:
    lo, hi = int(np.min(values)), int(np.max(values))
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


# --------------------------------------------------------------------------- capture


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

    Everything that can be checked without the model is checked first: the options and inputs,
    the config, the texts (tokenized), and whether every head file gets enough rows.

    ``progress(event, **info)`` is called with ``"load"``, ``"plan"`` (texts, query_heads,
    key_heads), ``"text"`` (done, total) and ``"write"`` (done, total) events.

    Returns
    -------
    SniffResult
        Where the dataset went, its metadata, what was captured and notes for the user.
    """
    t0 = time.perf_counter()
    progress = progress or (lambda *a, **k: None)
    options.check()
    torch, transformers = _import_backend()

    if options.threads:
        torch.set_num_threads(int(options.threads))
    what = str(options.gguf or options.model_path)
    config = load_config(options, transformers)
    facts = model_facts(config)
    cls = _model_class(config, transformers)
    if cls is not None:
        _check_routes_attention(cls, config, what)
    try:
        ratio = sampling.gqa_ratio(facts.n_q_heads, facts.n_kv_heads)
    except ValueError as exc:
        raise SniffError(f"{what}: {exc}") from exc
    tokenizer = load_tokenizer(options, transformers)
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
    files = [(l, h, "q") for l, h in q_heads] + [(l, h, "k") for l, h in k_heads]
    plan = CapturePlan(files, [len(w) for w in windows], options, facts.head_dim)
    notes, error = plan.shortfall(IngestOptions().min_vectors)
    if error:
        raise SniffError(f"{options.text}: {error}")
    _check_longrope(facts, [len(w) for w in windows], options.text)
    tokens = None
    if options.token_strings:
        tokens = {f: [] for f in files}
        for f in files:
            for e, ids in enumerate(windows):
                tokens[f].extend(tokenizer.convert_ids_to_tokens(ids[plan.positions_of(f, e)].tolist()))
    progress("plan", texts=len(windows), query_heads=len(q_heads), key_heads=len(k_heads))

    progress("load", what=what)
    model = load_model(options, torch, transformers)
    # the loaded model's config is the one that counts (a GGUF's is built while loading)
    facts = _same_facts(facts, model_facts(model.config), what)
    if cls is None:
        _check_routes_attention(type(model), model.config, what)
    attn_modules = _attention_modules(model)
    backend = attention_backend.choose(model, attn_modules)
    plan.allocate()
    recorder = Recorder(
        torch, backend, plan, nope_layers=facts.nope_layers,
        scalings=facts.position_scalings, remove_scalings=not options.keep_position_scaling,
        pre_rope=options.pre_rope, check=not options.unchecked, attn_modules=attn_modules,
        dims=(facts.n_q_heads, facts.n_kv_heads, facts.head_dim), frequencies=FrequencySource(model),
    )
    # one fixed name: a later capture in the same process replaces this recorder, none piles up
    transformers.AttentionInterface.register(ATTENTION_NAME, recorder)
    # masks are built as for the attention handed on to (sliding windows, padding); an unknown
    # name would get no mask at all
    transformers.AttentionMaskInterface.register(ATTENTION_NAME, backend.mask)
    _select_attention(model, ATTENTION_NAME)
    # the base model only: the LM head's logits (seq × vocab floats) are not needed
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)
    layers = sorted({l for l, _, _ in files})
    try:
        for example_id, ids in enumerate(windows):
            recorder.begin_text(example_id, len(ids))
            try:
                with torch.inference_mode():
                    base(input_ids=torch.as_tensor(ids).unsqueeze(0), use_cache=False)
            except StopForward:
                pass
            except SniffError:
                raise
            except Exception as exc:
                raise SniffError(_forward_failed(exc, example_id, what, recorder)) from exc
            finally:
                recorder.end_text()
            if example_id == 0:
                missing = sorted(set(layers) - recorder.seen_layers)
                if missing:
                    raise SniffError(
                        f"{what}: the model does not route attention through transformers' AttentionInterface "
                        f"(no capture from layers {missing[:5]}); qkdb sniff cannot read its queries and keys"
                    )
            progress("text", done=example_id + 1, total=len(windows))
    finally:
        recorder.close()
    check = check_summary(recorder, layers)
    rope = rope_facts(recorder, facts.n_layers, facts.nope_layers, facts.rope_parameters, [len(w) for w in windows])
    notes.extend(_check_notes(check, facts, options, rope))

    out = Path(options.out)
    tmp = out.parent / f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.mkdir(parents=True)
    try:
        for i, f in enumerate(files):
            layer, head, kind = f
            write_head(
                tmp, layer, head, kind, plan.vectors.pop(f), plan.positions[f],
                example_id=plan.example_id, bucket=plan.buckets[f],
                sliding_window=recorder.sliding.get(layer),
                token_str=tokens[f] if tokens is not None else None,
                dtype=options.dtype,
            )
            progress("write", done=i + 1, total=len(files))
        max_position = int(max(p.max() for p in plan.positions.values())) if plan.kept else None
        metadata = _metadata(options, facts, ratio, q_heads, windows, plan, check, rope, max_position, transformers,
                             torch)
        write_metadata(tmp, metadata)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return SniffResult(out, metadata, q_heads, k_heads, len(windows), plan.kept * len(files),
                       time.perf_counter() - t0, notes, rope_summary(metadata))


def _check_longrope(facts: ModelFacts, lengths: list[int], text: str) -> None:
    """Refuse texts on both sides of longrope's switch: their queries and keys would turn at two sets of frequencies.

    transformers' longrope (Phi-3) uses its ``long_factor`` for a text longer than
    ``original_max_position_embeddings`` and its ``short_factor`` otherwise.
    """
    rp = facts.rope_parameters
    if rp.get("rope_type", rp.get("type")) != "longrope" or not lengths:
        return
    threshold = rp.get("original_max_position_embeddings")
    if not isinstance(threshold, int):
        return
    short = sum(n <= threshold for n in lengths)
    if 0 < short < len(lengths):
        raise SniffError(
            f"{text}: the model's longrope uses its short factors for texts of up to {threshold} tokens "
            f"(original_max_position_embeddings) and its long factors above; these texts are "
            f"{_range(lengths)} tokens long ({short} short, {len(lengths) - short} long), so their RoPE frequencies "
            f"would differ: capture texts all of up to {threshold} tokens (--max-length {threshold}) or all longer"
        )


def _model_class(config, transformers):
    """The causal-LM class transformers would load for ``config``, or None when it cannot say."""
    try:
        return transformers.AutoModelForCausalLM._model_mapping[type(config)]
    except Exception:  # noqa: BLE001 - a private mapping: when it fails, the loaded model is checked instead
        return None


def _check_routes_attention(cls, config, what: str) -> None:
    """Refuse a model class whose attention does not go through AttentionInterface (before loading its weights).

    transformers' own test (``_can_set_attn_implementation``: does its modeling code call
    ``ALL_ATTENTION_FUNCTIONS``) decides; the reason names ALiBi when the config says so, or, for
    configs without such a flag (Bloom), when its attention takes an ``alibi`` argument.
    """
    can = getattr(cls, "_can_set_attn_implementation", None)
    try:
        routed = bool(can()) if callable(can) else True
    except Exception:  # noqa: BLE001 - transformers' own heuristic failed: let the forward pass tell
        routed = True
    if routed:
        return
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    flags = [getattr(cfg, "alibi", None), getattr(getattr(cfg, "attn_config", None), "alibi", None)]
    params: set[str] = set()
    module = sys.modules.get(cls.__module__)
    for name, obj in inspect.getmembers(module, inspect.isclass) if module is not None else ():
        if "Attention" in name and obj.__module__ == cls.__module__ and hasattr(obj, "forward"):
            params |= set(inspect.signature(obj.forward).parameters)
    alibi = any(f is True for f in flags) or (all(f is None for f in flags) and bool({"alibi", "position_bias"} & params))
    why = ("it adds ALiBi position biases to its attention scores (no rotary embedding), and its attention "
           if alibi else "its attention ")
    raise SniffError(
        f"{what}: {why}does not go through transformers' AttentionInterface ({cls.__name__} computes it in "
        "its own code): qkdb sniff cannot read its queries and keys"
    )


def _forward_failed(exc: BaseException, text: int, what: str, recorder) -> str:
    """One line for a forward pass that raised inside transformers (its text only with --debug)."""
    where = None
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "transformers" in name:
            where = Path(name).name
        tb = tb.tb_next
    place = f" in transformers' {where}" if where else ""
    return (f"{what}: the model's forward pass failed on text {text}{place}, with qkdb sniff's "
            f"attention function handing on to {recorder.backend.name}: qkdb sniff cannot capture this model "
            "(--debug shows the error)")


def _same_facts(before: ModelFacts, after: ModelFacts, what: str) -> ModelFacts:
    """The loaded model's facts; its head counts must be those the plan was drawn with."""
    keys = ("n_layers", "n_q_heads", "n_kv_heads", "head_dim")
    if any(getattr(before, k) != getattr(after, k) for k in keys):
        shown = ", ".join(f"{k} {getattr(before, k)} → {getattr(after, k)}" for k in keys
                          if getattr(before, k) != getattr(after, k))
        raise SniffError(f"{what}: the loaded model's config differs from the one read before loading ({shown})")
    return after


def _check_notes(check: dict, facts: ModelFacts, options: SniffOptions, rope) -> list[str]:
    """One line per thing the user should know about what was stored."""
    notes = list(rope.notes)
    if check["method"].startswith("none"):
        notes.append("--unchecked: the stored vectors were not compared with the layers' projections "
                     "(recorded in capture.check)")
    for entry in check.get("unchecked", []):
        notes.append(
            f"layers {_layer_list(entry['layers'])} were not checked against their projections ({entry['reason']}): "
            "a non-RoPE position signal there would go unnoticed"
        )
    for s in facts.position_scalings:
        vectors = "queries" if s.kind == "q" else "keys"
        where = ("kept in the stored vectors (--keep-position-scaling)" if options.keep_position_scaling
                 else "divided out of the stored vectors")
        notes.append(f"the model multiplies its {vectors} by a position-dependent factor that is not RoPE "
                     f"({s.type}: {s.FORMULAS[s.type]}): {where}; recorded in position_scaling")
    if rope.top["rope"] == "none":
        notes.append("the model has no rotary position embedding: recorded as rope: none, every layer as a NoPE "
                     "layer; the ingest skips its RoPE planes")
    elif facts.rope == "none":
        notes.append("the config declares no RoPE parameters, but the layers rotate their queries and keys "
                     "(established from the rows): recorded as the model does it")
    return notes


def _layer_list(layers: list[int]) -> str:
    return ", ".join(map(str, layers[:8])) + (f" and {len(layers) - 8} more" if len(layers) > 8 else "")


def _metadata(options, facts: ModelFacts, ratio, q_heads, windows, plan: CapturePlan, check, rope, max_position,
              transformers, torch) -> dict:
    from qkdb._version import version

    weights = (
        {"gguf_file": Path(options.gguf).name} if options.gguf is not None
        else {"model_path": str(Path(options.model_path).resolve())}
    )
    hf_model, revision = _origin(options)
    top = rope.top
    meta = {
        "model": options.model_name or _default_name(options),
        "family": options.family or default_family(facts.model_type, hf_model),
        "n_layers": facts.n_layers,
        "n_q_heads": facts.n_q_heads,
        "n_kv_heads": facts.n_kv_heads,
        "gqa_ratio": ratio,
        "head_dim": facts.head_dim,
        "rope": top["rope"],
        "rope_theta": facts.rope_theta,
        "rope_pairing": top["rope_pairing"],
        "rotary_dims": top["rotary_dims"],
        "rotary_offset": top["rotary_offset"],
        "rope_inv_freq": top["rope_inv_freq"],
        "layer_rope_inv_freq": top["layer_rope_inv_freq"],
        "rope_attention_factor": top["rope_attention_factor"],
        "layer_rope_attention_factor": top["layer_rope_attention_factor"],
        "attention_scale": top["attention_scale"],
        "layer_attention_scale": top["layer_attention_scale"],
        "rope_scaling": facts.rope_scaling,
        "layer_rope_theta": facts.layer_rope_theta,
        "layer_rope_scaling": facts.layer_rope_scaling,
        "nope_layers": top["nope_layers"],
        "position_scaling": [
            s.record(removed=not options.keep_position_scaling, max_position=max_position)
            for s in facts.position_scalings
        ] or None,
        "source": "sniff",
        "hf_model": hf_model,
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
                "n_texts": len(windows),
                "n_tokens": int(sum(len(w) for w in windows)),
                "pack": options.pack,
            },
            "max_length": options.max_length,
            "q_heads": len(q_heads),
            "q_heads_sampling": "numpy default_rng(seed).choice(n_layers*n_q_heads, q_heads, replace=False)",
            "positions": {
                "policy": options.positions,
                "min_bucket_size": options.min_bucket_size,
                "vectors_per_head": options.vectors_per_head,
                "kept_per_head": plan.kept,
            },
            "pre_rope": options.pre_rope,
            "dtype": options.dtype,
            "token_strings": options.token_strings,
            "check": check,
            "rope": rope.rope,
            "attention": rope.attention,
        },
    }
    if revision:
        meta["model_revision"] = revision
    return meta

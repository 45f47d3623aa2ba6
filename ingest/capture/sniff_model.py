"""The model side of ``qkdb sniff``: what it is, its facts from the config, loading it, and where its attention is.

A model is a local Hugging Face folder (read with ``local_files_only``), a GGUF file (dequantised;
its tokenizer read from the same file), or a Hub model id ``owner/name`` at a revision (``--revision``:
a branch such as Pythia's ``step1000``, a tag or a commit), downloaded through the Hugging Face cache
with the Hub's usual behaviour (``HF_TOKEN``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT``). :class:`ModelRef`
says which; everything here reads the config, the tokenizer or the weights through it.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from qkdb.errors import SniffError
from qkdb.ingest.capture import vector_math
from qkdb.ingest.capture.plan import value_range
from qkdb.ingest.capture.sniff_recorder import PositionScaling
from qkdb.ingest.sources import registry

INSTALL_HINT = "pip install 'qkdb[sniff]'"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# transformers model_type -> the registry's family name, where the architecture is one family.
# ("llama" is not here: Llama 2, 3.1, 3.2, SmolLM2 ... share it; the registry's hf_model tells them apart.)
FAMILY_OF_MODEL_TYPE = {"qwen3": "Qwen3", "mistral": "Mistral", "ministral3": "Ministral3", "smollm3": "SmolLM3"}


@dataclass(frozen=True)
class ModelRef:
    """Which model: ``model_path`` (a local folder, or a Hub id when no such folder exists) or ``gguf``."""

    model_path: str | None = None
    gguf: str | None = None
    revision: str | None = None

    @property
    def hub_id(self) -> str | None:
        """The Hub model id when ``model_path`` names one (and no local folder of that name exists)."""
        if self.model_path is None or Path(self.model_path).exists():
            return None
        return self.model_path if HUB_ID.match(str(self.model_path)) else None

    def check(self) -> None:
        """Refuse what is not a model, before anything is loaded (a Hub id is checked when it is read)."""
        if (self.model_path is None) == (self.gguf is None):
            raise SniffError("give exactly one of --model-path (a Hugging Face model folder or Hub id) and --gguf "
                             "(a GGUF file)", kind="usage")
        if self.gguf is not None:
            _check_gguf(Path(self.gguf))
        elif self.hub_id is None:
            _check_model_folder(Path(self.model_path))

    def where(self) -> tuple[str, dict, str]:
        """(folder or repo id, from_pretrained kwargs, name for messages)."""
        if self.gguf is not None:
            gguf = Path(self.gguf).resolve()
            return str(gguf.parent), {"gguf_file": gguf.name}, str(self.gguf)
        if self.hub_id is not None:
            rev = self.revision or "main"
            return self.hub_id, {"revision": rev}, f"{self.hub_id}@{rev}"
        return str(Path(self.model_path).resolve()), {"local_files_only": True}, str(self.model_path)


def _check_model_folder(path: Path) -> None:
    if not path.is_dir():
        raise SniffError(f"{path}: no such model folder (nor a Hub model id owner/name)", kind="not_found")
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
    # the config's max_position_embeddings (the trained context, unless a scaled RoPE says its original)
    max_position_embeddings: int | None = None



def import_backend():
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise SniffError(f"qkdb sniff needs torch and transformers ({exc.name} is missing): {INSTALL_HINT}") from exc
    if not hasattr(transformers, "AttentionInterface"):
        raise SniffError(
            f"transformers {transformers.__version__} is too old for qkdb sniff (needs 5.x): {INSTALL_HINT}"
        )
    # before any model computes: the first call of each vector math function must be single-threaded
    vector_math.settle(torch)
    return torch, transformers


def one_line(exc: BaseException) -> str:
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
        max_position_embeddings=_positive_int(getattr(cfg, "max_position_embeddings", None)),
    )


def _positive_int(value) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None



# --------------------------------------------------------------------------- names


def slug(text: str) -> str:
    """A model name from a file, folder or repo name: lower case, ``[a-z0-9._-]``."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")


def default_name(ref: ModelRef, hf_model: str | None = None) -> str:
    """The registry's name of the model at its revision when it is one of the registry's; else the file,
    folder or repo name, with the revision of a Hub model (``pythia-70m-step1000``)."""
    for spec in registry.load_registry():
        if hf_model and spec.hf_model and spec.hf_model.lower() == hf_model.lower() \
                and ref.revision is not None and spec.model_revision == ref.revision:
            return spec.name
    if ref.hub_id is not None:
        stem = ref.hub_id.split("/")[-1] + (f"-{ref.revision}" if ref.revision and ref.revision != "main" else "")
    elif ref.gguf is not None:
        stem = Path(ref.gguf).stem
    else:
        stem = Path(ref.model_path).resolve().name
    return slug(stem) or "sniffed-model"


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


def origin(ref: ModelRef, hf_model: str | None) -> tuple[str, str | None]:
    """(hf_model, model_revision) to record: ``hf_model`` given, else the repo id when known, else the file name.

    Never an absolute local path: the record must mean the same on another machine.
    """
    if ref.hub_id is not None:
        return hf_model or ref.hub_id, ref.revision or "main"
    src = Path(ref.gguf if ref.gguf is not None else ref.model_path)
    repo, rev = _hub_cache_origin(src.parent if ref.gguf is not None else src)
    # (the file's own word only when no repo is given: it would change nothing then, and gguf reads
    # every field of the file to give it, ~3.5 s for SmolLM2-135M's 49k-token vocabulary)
    if repo is None and ref.gguf is not None and hf_model is None:
        repo = _gguf_origin(src)
    if hf_model is not None and hf_model != repo:
        rev = None  # the cache's snapshot is a revision of another repo than the one given
    return hf_model or repo or src.resolve().name, ref.revision or rev


def default_family(model_type: str, hf_model: str | None) -> str:
    """The registry's family of the model when it is known to it, else the config's ``model_type``."""
    for spec in registry.load_registry():
        if hf_model and spec.hf_model and spec.hf_model.lower() == hf_model.lower():
            return spec.family
    return FAMILY_OF_MODEL_TYPE.get(model_type, model_type)


# --------------------------------------------------------------------------- loading


def _hub_failure(exc: BaseException, ref: ModelRef) -> SniffError | None:
    """A one-line error for a Hub model id that cannot be read (not found, no such revision, offline), else None."""
    if ref.hub_id is None:
        return None
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    cause, seen = exc, set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, RevisionNotFoundError):
            return SniffError(f"model {ref.hub_id}: revision {ref.revision or 'main'!r} not found on the Hub",
                              kind="not_found")
        if isinstance(cause, RepositoryNotFoundError):
            return SniffError(f"model {ref.hub_id}: no such model repo on the Hub (if it is private or gated: log in "
                              "with `hf auth login` or set HF_TOKEN)", kind="not_found")
        if isinstance(cause, LocalEntryNotFoundError):
            from huggingface_hub import constants

            if constants.is_offline_mode():
                return SniffError(f"model {ref.hub_id}@{ref.revision or 'main'}: offline (HF_HUB_OFFLINE=1) and not "
                                  "in the Hugging Face cache; download it once online")
            return SniffError(f"model {ref.hub_id}@{ref.revision or 'main'}: cannot reach the Hub and it is not in "
                              "the Hugging Face cache", kind="network")
        cause = cause.__cause__ or cause.__context__
    return None


def load_config(ref: ModelRef, transformers):
    where, kwargs, what = ref.where()
    try:
        return transformers.AutoConfig.from_pretrained(where, **kwargs)
    except Exception as exc:  # transformers raises many types here; all mean "cannot use this"
        raise (_hub_failure(exc, ref) or
               SniffError(f"{what}: transformers cannot read its model config ({one_line(exc)})")) from exc


def load_tokenizer(ref: ModelRef, transformers):
    where, kwargs, what = ref.where()
    try:
        return transformers.AutoTokenizer.from_pretrained(where, **kwargs)
    except Exception as exc:
        raise (_hub_failure(exc, ref) or
               SniffError(f"{what}: transformers cannot load a tokenizer from it ({one_line(exc)})")) from exc


def load_model(ref: ModelRef, device, transformers):
    """The model in eval mode, in the device's compute dtype, where the device says (:meth:`Device.load_kwargs`)."""
    where, kwargs, what = ref.where()
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(where, **device.load_kwargs(), **kwargs)
    except Exception as exc:
        raise (_hub_failure(exc, ref) or
               SniffError(f"{what}: transformers cannot load it as a causal LM ({one_line(exc)})")) from exc
    model.eval()
    return model


def hub_snapshot(ref: ModelRef) -> Path | None:
    """The Hugging Face cache's folder of the commit a Hub model's revision resolved to (where its files are)."""
    if ref.hub_id is None:
        return None
    from huggingface_hub import try_to_load_from_cache

    path = try_to_load_from_cache(ref.hub_id, "config.json", revision=ref.revision or "main")
    return Path(path).parent if isinstance(path, str) and "snapshots" in Path(path).parts else None


def hub_commit(ref: ModelRef) -> str | None:
    """The commit a Hub model's revision resolved to (read from the Hugging Face cache, where its files are)."""
    folder = hub_snapshot(ref)
    return folder.name if folder is not None else None


def weights_of(ref: ModelRef) -> dict:
    """``weights_sha256`` and ``weight_files`` of the weights a capture loads (:mod:`.weights`); None when unknown."""
    from qkdb.ingest.capture.weights import weights_record

    where = ref.gguf if ref.gguf is not None else (hub_snapshot(ref) if ref.hub_id is not None else ref.model_path)
    return (weights_record(where) if where is not None else None) or {"weights_sha256": None}


def input_device(model):
    """Where the token ids go: the input embedding's device (with a device map, not necessarily the first GPU)."""
    emb = model.get_input_embeddings()
    weight = getattr(emb, "weight", None)
    if weight is not None and weight.device.type != "meta":
        return weight.device
    return next(p.device for p in model.parameters() if p.device.type != "meta")


def select_attention(model, name: str) -> None:
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


def attention_modules(model) -> dict[int, object]:
    """Each layer's attention module (the one with a ``layer_idx`` whose class names attention)."""
    found: dict[int, object] = {}
    for module in model.modules():
        layer = getattr(module, "layer_idx", None)
        if isinstance(layer, int) and "attention" in type(module).__name__.lower():
            found.setdefault(layer, module)
    return found


def tokenizer_specials(tokenizer) -> tuple[int | None, int | None]:
    """(bos to start each window or None, eos to separate packed documents or None)."""
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    bos = tokenizer.bos_token_id
    adds_bos = bos is not None and len(probe) > 0 and probe[0] == bos
    return (bos if adds_bos else None), tokenizer.eos_token_id



def check_longrope(facts: ModelFacts, lengths: list[int], text: str) -> None:
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
            f"{value_range(lengths)} tokens long ({short} short, {len(lengths) - short} long), so their RoPE frequencies "
            f"would differ: capture texts all of up to {threshold} tokens (--max-length {threshold}) or all longer"
        )


def model_class(config, transformers):
    """The causal-LM class transformers would load for ``config``, or None when it cannot say."""
    try:
        return transformers.AutoModelForCausalLM._model_mapping[type(config)]
    except Exception:  # noqa: BLE001 - a private mapping: when it fails, the loaded model is checked instead
        return None


def check_routes_attention(cls, config, what: str) -> None:
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


def forward_failed(exc: BaseException, text: int, what: str, recorder) -> str:
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


def same_facts(before: ModelFacts, after: ModelFacts, what: str) -> ModelFacts:
    """The loaded model's facts; its head counts must be those the plan was drawn with."""
    keys = ("n_layers", "n_q_heads", "n_kv_heads", "head_dim")
    if any(getattr(before, k) != getattr(after, k) for k in keys):
        shown = ", ".join(f"{k} {getattr(before, k)} → {getattr(after, k)}" for k in keys
                          if getattr(before, k) != getattr(after, k))
        raise SniffError(f"{what}: the loaded model's config differs from the one read before loading ({shown})")
    return after


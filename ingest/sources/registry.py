"""The model registry (SPEC §3.3): architecture facts for the seeds' models, shipped as models.csv."""

from __future__ import annotations

import csv
import difflib
import io
import json
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources

from qkdb.errors import RegistryError


@dataclass(frozen=True)
class ModelSpec:
    """Everything ingest needs to know about a model that the vectors do not say."""

    model: str
    family: str = "unknown"
    n_layers: int | None = None
    n_q_heads: int | None = None
    n_kv_heads: int | None = None
    gqa_ratio: int | None = None
    head_dim: int | None = None
    rope_theta: float | None = None
    # 'half' (rotate-half) or 'interleaved'; None: a capture that could not establish it (no RoPE planes then)
    rope_pairing: str | None = "half"
    rope_scaling: str | None = None  # JSON text
    rope_scaling_source: str | None = None  # where the registry's rope_scaling comes from (models.csv)
    # RoPE turns head dims [rotary_offset, rotary_offset + rotary_dims); None: every dim (or the
    # partial_rotary_factor an older capture left in rope_scaling)
    rotary_dims: int | None = None
    rotary_offset: int = 0
    # the frequencies (rad/token) the model applied, recorded by its capture: the global layers', and
    # each layer's where they differ (None entries: layers without RoPE); None: not recorded
    rope_inv_freq: tuple[float, ...] | None = None
    layer_rope_inv_freq: tuple[tuple[float, ...] | None, ...] | None = None
    attention_scale: float | None = None  # the scaling attention was called with (recorded by a capture)
    # the cos/sin amplitude of the model's RoPE (YaRN's attention factor), recorded by a capture: the global
    # layers', and each layer's where they differ
    rope_attention_factor: float | None = None
    layer_rope_attention_factor: tuple[float | None, ...] | None = None
    # The context length plasticity's bins divide (tokens): the capture's max length (see context_length)
    context_length: int | None = None
    # the capture stored vectors before RoPE (qkdb sniff --pre-rope): the ingest rotates them by the RoPE the
    # capture recorded before computing anything (ingest/engine/pre_rope.py)
    pre_rope: bool = False
    # L_train, the context the model's RoPE planes were trained over (tokens), and where it came from
    # (ingest/sources/trained_context.py): frequency_usage's turns_trained and critical plane
    trained_context: int | None = None
    trained_context_source: str | None = None
    # sha256 of the weights the capture loaded (capture.weights_sha256; the simulator's: of its planted
    # parameters): a series whose checkpoints share it is refused (qkdb/pipeline.py)
    weights_sha256: str | None = None
    # what the captured texts were (capture.texts.kind: natural, random or repeated tokens; Gu et al. 2025
    # §3.3): carried into every attention-mass row; only natural captures count in pooled aggregates
    input_kind: str = "natural"
    # positions 0..sinks_below-1 of every text a sampled capture kept for attention mass (--keep-first;
    # its position policy never drew them): only the attention-mass tables read them
    sinks_below: int = 0
    # Per layer (layer, scaling, softcap) of a capture that stored each query's softmax normaliser and
    # whose stored vectors give its logits (capture.normaliser): the attention_mass table's inputs
    attention_logits: tuple[tuple[int, float, float | None], ...] | None = None
    nope_layers: tuple[int, ...] = ()
    # "rotary", or "none" for a model without rotary position embeddings (then every layer is in nope_layers)
    rope: str = "rotary"
    # each layer's own RoPE base / scaling (JSON text or None) where layers differ (Gemma3 local/global)
    layer_rope_theta: tuple[float | None, ...] | None = None
    layer_rope_scaling: tuple[str | None, ...] | None = None
    # position-dependent factors in the vectors that are not RoPE (JSON list, see docs/sniff.md)
    position_scaling: str | None = None
    in_paper: bool = False
    hf_model: str | None = None
    model_revision: str | None = None
    dataset_repo: str | None = None
    dataset_revision: str | None = None
    series: str | None = None
    series_order: int | None = None
    phase: str | None = None
    step: int | None = None
    in_registry: bool = field(default=False, compare=False)

    def with_overrides(self, **facts) -> "ModelSpec":
        """A copy with the non-None facts replaced (ingest options win over the registry).

        A missing ``gqa_ratio`` is derived from ``n_q_heads / n_kv_heads`` when they divide; a ratio
        already known is kept, never silently re-derived: :func:`check_head_counts` refuses counts
        that contradict it.
        """
        known = {f.name for f in fields(self)}
        bad = set(facts) - known
        if bad:
            raise ValueError(f"unknown model facts: {sorted(bad)}")
        spec = replace(self, **{k: v for k, v in facts.items() if v is not None})
        q, kv = spec.n_q_heads, spec.n_kv_heads
        if spec.gqa_ratio is None and q and kv and q > 0 and kv > 0 and q % kv == 0:
            spec = replace(spec, gqa_ratio=q // kv)
        return spec

    def missing_facts(self) -> list[str]:
        """Facts ingest cannot do without (named as the CLI options that give them)."""
        missing = []
        if not self.gqa_ratio:
            missing.append("--gqa-ratio")
        if not self.n_layers:
            missing.append("--n-layers")
        return missing


# The facts that map query heads to key heads, and the ingest options that give them.
HEAD_COUNTS = {"n_q_heads": "--n-q-heads", "n_kv_heads": "--n-kv-heads", "gqa_ratio": "--gqa-ratio"}


def check_head_counts(spec: ModelSpec, origin: dict[str, str] | None = None) -> None:
    """Refuse head counts that are not positive or that contradict each other.

    Query head ``h`` reads key head ``h // gqa_ratio``: a ratio that disagrees with
    ``n_q_heads / n_kv_heads`` pairs queries with the wrong keys and publishes a ``models`` row
    that contradicts itself, so it is refused before any file is read.

    Parameters
    ----------
    spec : ModelSpec
        The merged facts.
    origin : dict, optional
        Where each fact of :data:`HEAD_COUNTS` came from (e.g. ``"--gqa-ratio"``, ``"the registry"``),
        for the message.

    Raises
    ------
    RegistryError
        Naming the numbers and where each came from.
    """
    origin = origin or {}

    def where(*names: str) -> str:
        places = [origin[n] for n in names if n in origin]
        return f" ({places[0]})" if places and len(set(places)) == 1 and len(places) == len(names) else ""

    def fact(name: str) -> str:
        return f"{name}={getattr(spec, name)}{where(name)}"

    for name in HEAD_COUNTS:
        value = getattr(spec, name)
        if value is not None and value < 1:
            raise RegistryError(f"model {spec.model}: {fact(name)} must be at least 1")
    q, kv, ratio = spec.n_q_heads, spec.n_kv_heads, spec.gqa_ratio
    if q is not None and kv is not None:
        # The counts as one clause: their common source once, else each its own.
        same = where("n_q_heads", "n_kv_heads")
        counts = (f"n_q_heads / n_kv_heads = {q} / {kv}" + same if same
                  else f"n_q_heads / n_kv_heads = {q}{where('n_q_heads')} / {kv}{where('n_kv_heads')}")
        if ratio is None and q % kv:
            raise RegistryError(
                f"model {spec.model}: {counts} is not a whole number; every KV head must serve the same "
                "number of query heads"
            )
        if ratio is not None and q != ratio * kv:
            raise RegistryError(
                f"model {spec.model}: {fact('gqa_ratio')} contradicts {counts} = {q / kv:g}; query head h reads "
                "key head h // gqa_ratio, so the three must agree: give the right ones with --n-q-heads, "
                "--n-kv-heads and --gqa-ratio"
            )
    elif q is not None and ratio is not None and q % ratio:
        raise RegistryError(
            f"model {spec.model}: {fact('n_q_heads')} is not a multiple of {fact('gqa_ratio')}; every KV head "
            "must serve the same number of query heads"
        )


# Facts of the Hub's captures that models.csv has no column for. qk-sniffer captured Ministral3's
# queries after transformers' llama-4 attention scale (its models/ministral3/modeling_ministral3.py
# calls sniffer.capture after `query_states * _get_llama_4_attn_scale(...)`, with capture_pre_rope
# false and texts up to 131,072 tokens): past position 16,384 they carry a factor 1.07–1.22.
HUB_POSITION_SCALING = {
    "Ministral3": [{
        "kind": "q", "type": "llama4",
        "formula": "1 + beta * ln(1 + floor(position / original_max_position_embeddings))",
        "beta": 0.1, "original_max_position_embeddings": 16384, "layers": "all", "removed": False,
    }],
}


# The texts' length (tokens) of the Hub's captures, which models.csv has no column for: qk-sniffer's
# configs/attention-plasticity captured texts of viktoroo/longbench-pro-128k-plus with max_length 131,072
# (SmolLM3's checkpoints 65,536; ../shared/NOTES.md, "Verified in the third round"); Mistral-7B-v0.2's
# captures stop at 32,768 tokens, its trained context (../shared/benchmarks/README.md).
HUB_CONTEXT_LENGTH = 131072
HUB_CONTEXT_LENGTH_BY = {"SmolLM3": 65536, "mistral-v0.2-7b": 32768}


def hub_context_length(spec: "ModelSpec") -> int | None:
    """The context length of a registry model's Hub capture (None for a model outside the registry)."""
    if not spec.in_registry:
        return None
    return HUB_CONTEXT_LENGTH_BY.get(spec.model, HUB_CONTEXT_LENGTH_BY.get(spec.family, HUB_CONTEXT_LENGTH))


def _int(v: str) -> int | None:
    return int(v) if v.strip() else None


def _json_text(v: str) -> str | None:
    """A registry cell holding a JSON object, normalised (sorted keys) as every spec keeps JSON; None when empty."""
    if not v or not v.strip():
        return None
    value = json.loads(v)
    return json.dumps(value, sort_keys=True) if value else None


def _row_to_spec(row: dict[str, str]) -> ModelSpec:
    n_q, n_kv = _int(row["n_q_heads"]), _int(row["n_kv_heads"])
    return ModelSpec(
        model=row["model"],
        family=row["family"],
        in_paper=row["in_paper"].strip().lower() == "true",
        hf_model=row["hf_model"] or None,
        model_revision=row["model_revision"] or None,
        dataset_repo=row["dataset_repo"] or None,
        dataset_revision=row["dataset_revision"] or None,
        n_layers=_int(row["n_layers"]),
        n_q_heads=n_q,
        n_kv_heads=n_kv,
        gqa_ratio=n_q // n_kv if n_q and n_kv else None,
        head_dim=_int(row["head_dim"]),
        rope_theta=float(row["rope_theta"]) if row["rope_theta"].strip() else None,
        rope_scaling=_json_text(row.get("rope_scaling", "")),
        rope_scaling_source=(row.get("rope_scaling_source") or "").strip() or None,
        nope_layers=tuple(int(x) for x in row["nope_layers"].split(";") if x.strip()),
        position_scaling=(json.dumps(HUB_POSITION_SCALING[row["family"]], sort_keys=True)
                          if row["family"] in HUB_POSITION_SCALING else None),
        series=row["series"] or None,
        series_order=_int(row["series_order"]),
        phase=row["phase"] or None,
        step=_int(row["step"]),
        in_registry=True,
    )


@lru_cache(maxsize=1)
def load_registry() -> tuple[ModelSpec, ...]:
    """Every model of the shipped registry, in file order."""
    text = resources.files("qkdb.ingest.sources").joinpath("models.csv").read_text()
    return tuple(_row_to_spec(r) for r in csv.DictReader(io.StringIO(text)))


def find(name: str) -> ModelSpec | None:
    for spec in load_registry():
        if spec.model == name:
            return spec
    return None


def suggest(name: str, candidates: list[str] | None = None) -> list[str]:
    names = candidates if candidates is not None else [s.model for s in load_registry()]
    return difflib.get_close_matches(name, names, n=3, cutoff=0.5)


def lookup(name: str) -> ModelSpec:
    """The registry entry of ``name``; a :class:`RegistryError` suggesting close names otherwise."""
    spec = find(name)
    if spec is None:
        close = suggest(name)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise RegistryError(f"unknown model {name!r}.{hint} See `qkdb models` for the registry.", kind="not_found")
    return spec


def series_models(series: str) -> list[ModelSpec]:
    """The checkpoints of a training series, in series order."""
    members = [s for s in load_registry() if s.series == series]
    if not members:
        names = sorted({s.series for s in load_registry() if s.series})
        close = suggest(series, names)
        hint = f" Did you mean {', '.join(close)}?" if close else f" Known series: {', '.join(names)}."
        raise RegistryError(f"unknown series {series!r}.{hint}", kind="not_found")
    return sorted(members, key=lambda s: s.series_order or 0)

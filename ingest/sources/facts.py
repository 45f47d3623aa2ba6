"""A model's facts (SPEC §3.3): the ingest's options win over the registry, the registry over the dataset.

Architecture facts the vectors do not carry (family, layers, heads per layer, GQA ratio, RoPE,
NoPE layers, training series) come from three places; this module merges them into one
:class:`~qkdb.ingest.sources.registry.ModelSpec` and refuses contradictions before any work. The
dataset's facts are ``qkdb_dataset.json``'s, completed by qk-sniffer's ``_saver_state.json``
(:mod:`.saver_state`); where they contradict a registry model's, the dataset's hold, with a note
(:func:`recorded_over_registry`).
"""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace

from qkdb.errors import InputError, RegistryError
from qkdb.ingest.sources import registry
from qkdb.ingest.sources.layout import METADATA_FILE
from qkdb.ingest.sources.registry import ModelSpec

_METADATA_FACTS = {f.name for f in fields(ModelSpec)} - {"model", "in_registry", "weights_sha256", "attention_logits", "input_kind", "sinks_below"}


def resolve_spec(name: str | None, metadata: dict, **overrides) -> ModelSpec:
    """Model facts: options win over the registry, the registry over the dataset's metadata.

    Head counts that contradict each other — a ``gqa_ratio`` that is not ``n_q_heads / n_kv_heads``,
    whichever of the options, the registry and ``qkdb_dataset.json`` each number comes from, or a
    ``qkdb_dataset.json`` whose ratio differs from the registry's for a registry model — are a
    :class:`RegistryError` naming the numbers and their sources, raised before any work is done.
    """
    name = name or metadata.get("model")
    if not name:
        raise RegistryError("give the model's name with --model (the dataset has no qkdb_dataset.json naming it)", kind="usage")
    registered = registry.find(name)
    facts = {k: v for k, v in metadata.items() if k in _METADATA_FACTS and v is not None}
    for f in registry.HEAD_COUNTS:
        if f in facts and (not isinstance(facts[f], int) or isinstance(facts[f], bool)):
            raise InputError(f"{METADATA_FILE}: {f} must be an integer, got {facts[f]!r}")
    given = {k: v for k, v in overrides.items() if v is not None}
    facts = _metadata_facts(facts)
    if registered is not None:
        base, base_origin = registered, "the registry"
        if metadata.get("source") == "sniff":
            # The registry wins, except on what a qkdb sniff capture records about its own vectors
            # (the registry's entries describe the Hub's captures).
            captured = _metadata_facts({k: metadata.get(k) for k in _CAPTURE_FACTS})
            base = replace(base, **{k: captured[k] if captured[k] is not None else _SPEC_DEFAULTS[k]
                                    for k in _CAPTURE_FACTS})
        base = replace(base, **recorded_over_registry(registered, metadata, overrides)[0])
        base = _unestablished_pairing(base, metadata)
    else:
        base, base_origin = ModelSpec(model=name).with_overrides(**facts), metadata.get("_file", METADATA_FILE)
        base = _unestablished_pairing(base, metadata)
    # Where each head count comes from, for the messages (a ratio derived from the counts: from theirs).
    origin = {f: base_origin for f in registry.HEAD_COUNTS if getattr(base, f) is not None}
    origin.update({f: flag for f, flag in registry.HEAD_COUNTS.items() if f in given})
    spec = base.with_overrides(**given)
    if spec.gqa_ratio is not None and "gqa_ratio" not in origin:
        origin["gqa_ratio"] = "n_q_heads / n_kv_heads"
    registry.check_head_counts(spec, origin)
    if registered is not None:
        _check_dataset_counts(spec, facts, given)
    spec = replace(spec, pre_rope=captured_pre_rope(metadata), weights_sha256=captured_weights(metadata),
                   attention_logits=captured_logits(metadata), input_kind=captured_input_kind(metadata),
                   sinks_below=captured_sink_rows(metadata))
    missing = spec.missing_facts()
    if missing:
        close = registry.suggest(name)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise RegistryError(
            f"unknown model {name!r}: not in the registry, so give its facts with {', '.join(missing)} "
            f"(and --family).{hint}", kind="not_found",  # an unknown name, whatever the command (docs/cli.md)
        )
    return spec


# Facts a dataset's qkdb_dataset.json records about its own vectors, which the registry cannot know.
# (RoPE's layout as the capture established it from the model: pairing, rotated slice, frequencies.)
_CAPTURE_FACTS = (
    "rope", "layer_rope_theta", "layer_rope_scaling", "position_scaling", "rope_pairing", "rotary_dims",
    "rotary_offset", "rope_inv_freq", "layer_rope_inv_freq", "attention_scale", "rope_attention_factor",
    "layer_rope_attention_factor",
)
_SPEC_DEFAULTS = {f.name: f.default for f in fields(ModelSpec)}


def captured_pre_rope(metadata: dict) -> bool:
    """Whether the dataset's vectors were stored before RoPE (``capture.pre_rope`` of a qkdb sniff capture).

    (qk-sniffer's ``_saver_state.json`` does not record its ``capture_pre_rope``: its captures read as post-RoPE.)
    """
    capture = metadata.get("capture")
    value = capture.get("pre_rope") if isinstance(capture, dict) else None
    if value is not None and not isinstance(value, bool):
        raise InputError(f"{METADATA_FILE}: capture.pre_rope must be true or false, got {value!r}")
    return bool(value)


def captured_weights(metadata: dict) -> str | None:
    """The sha256 of the weights the capture was made from (``capture.weights_sha256``), None when not recorded."""
    capture = metadata.get("capture")
    value = capture.get("weights_sha256") if isinstance(capture, dict) else None
    if value is not None and not (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value)):
        raise InputError(f"{METADATA_FILE}: capture.weights_sha256 must be a sha256 (64 hex digits), got {value!r}")
    return value


INPUT_KINDS = ("natural", "random", "repeated")


def captured_input_kind(metadata: dict) -> str:
    """What the captured texts were (``capture.texts.kind``); a capture that does not say read natural text."""
    capture = metadata.get("capture")
    texts = capture.get("texts") if isinstance(capture, dict) else None
    value = texts.get("kind") if isinstance(texts, dict) else None
    if value is None:
        return "natural"
    if value not in INPUT_KINDS:
        raise InputError(f"{METADATA_FILE}: capture.texts.kind is {value!r}; expected one of {', '.join(INPUT_KINDS)}")
    return value


def captured_sink_rows(metadata: dict) -> int:
    """How many first positions of every text a sampled capture kept outside its position policy
    (``capture.positions.keep_first``; 0 for a dense capture, whose policy takes every position, and
    for a capture made like another, whose rows are that one's)."""
    capture = metadata.get("capture")
    positions = capture.get("positions") if isinstance(capture, dict) else None
    if not isinstance(positions, dict) or positions.get("policy") in ("dense", "like", None):
        return 0
    value = positions.get("keep_first", 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(f"{METADATA_FILE}: capture.positions.keep_first must be a whole number >= 0, got {value!r}")
    return value


def _rotated_back(metadata: dict) -> bool:
    """A ``--pre-rope`` capture whose only change to the vectors was leaving RoPE out: the ingest turns
    them back with the RoPE the capture recorded (ingest/engine/pre_rope.py), and the logits are
    attention's again. A query scale divided out of them (not 1 where captured) stays a refusal."""
    capture = metadata.get("capture")
    if not (isinstance(capture, dict) and capture.get("pre_rope") is True):
        return False
    return not any(isinstance(s, dict) and s.get("kind") == "q" and s.get("removed")
                   and s.get("max_factor_in_capture", 0) != 1 for s in metadata.get("position_scaling") or [])


def captured_logits(metadata: dict) -> tuple | None:
    """Each layer's (layer, scaling, softcap) from ``capture.normaliser``, when the stored vectors give the
    logits the normaliser sums (``logits_from_stored_vectors``), or give them once the ingest has turned
    a ``--pre-rope`` capture back (:func:`_rotated_back`); None otherwise (no attention mass)."""
    capture = metadata.get("capture")
    record = capture.get("normaliser") if isinstance(capture, dict) else None
    if not isinstance(record, dict):
        return None
    if record.get("logits_from_stored_vectors") is not True and not _rotated_back(metadata):
        return None
    out = []
    for entry in record.get("layers") or []:
        try:
            layer, scaling = int(entry["layer"]), float(entry["scaling"])
            softcap = None if entry.get("softcap") is None else float(entry["softcap"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{METADATA_FILE}: capture.normaliser.layers holds {entry!r}; expected "
                             "{layer, scaling, softcap}") from None
        out.append((layer, scaling, softcap))
    return tuple(out) or None


def _metadata_facts(facts: dict) -> dict:
    """``qkdb_dataset.json`` values in the types of :class:`ModelSpec` (tuples, JSON text)."""
    facts = dict(facts)

    def as_json(v):
        return v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True)

    for key in ("nope_layers", "layer_rope_theta", "rope_inv_freq", "layer_rope_attention_factor"):
        if isinstance(facts.get(key), list):
            facts[key] = tuple(facts[key])
    if isinstance(facts.get("layer_rope_inv_freq"), list):
        facts["layer_rope_inv_freq"] = tuple(
            tuple(v) if isinstance(v, list) else None for v in facts["layer_rope_inv_freq"]
        )
    if isinstance(facts.get("layer_rope_scaling"), list):
        facts["layer_rope_scaling"] = tuple(as_json(v) for v in facts["layer_rope_scaling"])
    for key in ("rope_scaling", "position_scaling"):
        if isinstance(facts.get(key), (dict, list)):
            facts[key] = as_json(facts[key])
    rope = facts.get("rope")
    if rope is not None and rope not in ("rotary", "none"):
        raise InputError(f"{METADATA_FILE}: rope must be 'rotary' or 'none', got {rope!r}")
    return facts


def _unestablished_pairing(spec: ModelSpec, metadata: dict) -> ModelSpec:
    """A capture that recorded its RoPE layout but no pairing could not establish one: keep that unknown.

    (Only captures that record ``rope_inv_freq`` say so; an older dataset's missing pairing means
    rotate-half, the only layout they were written with.)
    """
    rotary = spec.rope != "none"
    if rotary and "rope_inv_freq" in metadata and metadata.get("rope_pairing") is None:
        return replace(spec, rope_pairing=None)
    return spec


def _check_dataset_counts(spec: ModelSpec, facts: dict, given: dict) -> None:
    """Refuse a registry model whose dataset records another GQA ratio than the registry's.

    The registry's facts win over ``qkdb_dataset.json``, but the key folders of a captured dataset
    follow the ratio it records (stated, or ``n_q_heads / n_kv_heads``): where the two differ and
    no ``--gqa-ratio`` settles it, queries would be paired by a mapping the capture did not use.
    Counts that differ at the same ratio (a small simulation under a registry name) pair correctly.
    """
    if "gqa_ratio" in given or _consistent_counts(facts, facts):
        return  # (consistent counts of the dataset's own won in recorded_over_registry)
    q, kv = facts.get("n_q_heads"), facts.get("n_kv_heads")
    theirs = facts.get("gqa_ratio") or (q // kv if q and kv and q > 0 and kv > 0 and q % kv == 0 else None)
    if theirs is None or spec.gqa_ratio is None or theirs == spec.gqa_ratio:
        return

    def counts(n_q, n_kv) -> str:
        return f" (n_q_heads / n_kv_heads = {n_q} / {n_kv})" if n_q and n_kv else ""

    raise RegistryError(
        f"model {spec.model}: the dataset's {METADATA_FILE} gives gqa_ratio={theirs}{counts(q, kv)}, the registry "
        f"gqa_ratio={spec.gqa_ratio}{counts(spec.n_q_heads, spec.n_kv_heads)}; the key folders follow the "
        "capture's ratio: give the right one with --gqa-ratio (and --n-q-heads, --n-kv-heads)"
    )


# Facts a dataset records about its own vectors (qkdb_dataset.json, qk-sniffer's _saver_state.json).
# Where one contradicts the registry's (a simulation under a registry name, a capture of another
# config), the dataset's holds: it describes the vectors being ingested, the registry the Hub's
# captures. An option overrides both. The GQA ratio too, when the dataset records both head counts
# and they agree with its stated ratio; a ratio without such counts is refused (_check_dataset_counts).
RECORDED_FACTS = ("n_layers", "n_q_heads", "n_kv_heads", "head_dim", "rope_theta", "rope_pairing", "rope_scaling",
                  "nope_layers", "trained_context", "trained_context_source")


def recorded_over_registry(registered: ModelSpec, metadata: dict, overrides: dict) -> tuple[dict, str | None]:
    """The dataset's recorded facts that the ingest uses instead of the registry's, and a note naming both values.

    Returns ``{fact: the dataset's value}`` for every fact of :data:`RECORDED_FACTS` the dataset
    records, no option sets, and the registry has otherwise (or lacks: then it is filled, without a
    note), and the note (None when nothing contradicts). A ``qkdb simulate`` or ``qkdb sniff``
    dataset's explicit ``"rope_scaling": null`` is a fact: its vectors carry no RoPE scaling.
    """
    given = {k for k, v in overrides.items() if v is not None}
    recorded = _metadata_facts({k: metadata[k] for k in RECORDED_FACTS if metadata.get(k) is not None})
    if "rope_scaling" in metadata and metadata["rope_scaling"] is None and metadata.get("source") in ("simulate", "sniff"):
        recorded["rope_scaling"] = None
    q, kv = recorded.get("n_q_heads"), recorded.get("n_kv_heads")
    theirs = metadata.get("gqa_ratio") or (q // kv if q and kv and q % kv == 0 else None)
    if "gqa_ratio" not in given and theirs is not None and registered.gqa_ratio not in (None, theirs):
        if _consistent_counts(metadata, recorded):
            # The dataset's own counts agree with its ratio: they describe these key folders (a
            # simulation under a registry name), so they win like every other recorded fact.
            recorded["gqa_ratio"] = theirs
        else:
            recorded.pop("n_q_heads", None)  # refused by _check_dataset_counts, naming both ratios
            recorded.pop("n_kv_heads", None)
    updates, differ = {}, []
    for fact, value in recorded.items():
        ours = getattr(registered, fact)
        if fact in given or _same(value, ours):
            continue
        updates[fact] = value
        if ours is not None or (fact == "rope_scaling" and value is not None):
            differ.append((fact, value, ours))
    if not differ:
        return updates, None
    sources = metadata.get("_sources", {})

    def show(fact, value) -> str:
        shown = list(value) if isinstance(value, tuple) else ("none" if value is None else value)
        return f"{fact}={shown:g}" if isinstance(shown, float) else f"{fact}={shown}"

    files = sorted({sources.get(f, METADATA_FILE) for f, _, _ in differ})
    options = [f"--{f.replace('_', '-')}" for f, _, _ in differ if f in _OPTION_FACTS]
    # (a fact no option sets, such as nope_layers, has no override to offer)
    override = f" ({', '.join(options)} would override both)" if options else ""
    return updates, (
        f"{registered.model}: the dataset's {' and '.join(files)} records "
        f"{', '.join(show(f, v) for f, v, _ in differ)} where the registry has "
        f"{', '.join(show(f, r) for f, _, r in differ)}; the ingest uses the dataset's, which describe these vectors"
        f"{override}"
    )


def _consistent_counts(metadata: dict, recorded: dict) -> bool:
    """Whether a dataset records both head counts, and its stated ratio (if any) is theirs."""
    q, kv = recorded.get("n_q_heads"), recorded.get("n_kv_heads")
    if not (isinstance(q, int) and isinstance(kv, int) and q > 0 and kv > 0 and q % kv == 0):
        return False
    stated = metadata.get("gqa_ratio")
    return stated is None or stated == q // kv


_OPTION_FACTS = ("n_layers", "n_q_heads", "n_kv_heads", "rope_theta", "rope_pairing", "rope_scaling")


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    if isinstance(a, str) and isinstance(b, str) and a.startswith(("{", "[")):
        try:
            return json.loads(a) == json.loads(b)
        except ValueError:
            return a == b
    return a == b


def recorded_facts_notes(name: str | None, metadata: dict, **overrides) -> list[str]:
    """The note :func:`recorded_over_registry` has for a registry model's dataset (the ingest says it once)."""
    registered = registry.find(name or metadata.get("model") or "")
    if registered is None:
        return []
    note = recorded_over_registry(registered, metadata, overrides)[1]
    return [note] if note else []


def spec_notes(spec: ModelSpec, complement: bool = True) -> list[str]:
    """What the user should know about the model's positional encoding before reading its metrics (once each)."""
    notes = []
    if spec.family == "unknown":
        notes.append(
            f"{spec.model}: no family is known (it is not in the registry, no --family was given and the dataset "
            "records none): its family is 'unknown', and the within-family findings pool it with every other "
            "model of that family; give --family to place it"
        )
    if spec.rope == "none" and complement:
        notes.append(
            f"{spec.model} has no rotary position embedding (rope: none): no RoPE planes are computed "
            "(rope_planes and frequency_usage have no rows for it), its layers count as NoPE layers (heads.is_nope) and the "
            "findings about RoPE layers leave it out; rotation.omega comes from the complement pairs"
        )
    if spec.rope != "none" and spec.nope_layers and complement:
        shown = ", ".join(map(str, spec.nope_layers))
        notes.append(
            f"{spec.model}: layer{'s' if len(spec.nope_layers) > 1 else ''} {shown} apply no RoPE (NoPE): their "
            "rope_planes rows are the control, and frequency_usage has none for them (their planes do not turn)"
        )
    for entry in json.loads(spec.position_scaling or "[]"):
        if not entry.get("removed", False):
            kind = "queries" if entry.get("kind") == "q" else "keys"
            notes.append(
                f"{spec.model}: its {kind} carry a position-dependent factor that is not RoPE "
                f"({entry.get('type')}: {entry.get('formula')}); the positional metrics of the {kind} include "
                "it (models.position_scaling)"
            )
    return notes

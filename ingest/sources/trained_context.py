"""A model's trained context ``L_train`` (SPEC §4.8): which length its RoPE planes were trained to turn over.

``frequency_usage.turns_trained`` and the critical plane (Liu et al. 2023) need it. It comes from, in
this order, and is recorded with where it came from (``models.trained_context_source``):

1. ``option`` — ``--trained-context`` (``IngestOptions.trained_context``);
2. the dataset — a ``qkdb sniff`` capture records its config's (``config``: the original length
   under scaled RoPE, else ``max_position_embeddings``), a simulation its ``max_position``;
3. ``rope_scaling`` — the scaling's ``original_max_position_embeddings``: under scaled RoPE the base
   frequencies were trained over that length, the scaled ones are the extension's;
4. the registry — :data:`REGISTRY`, each entry with the reason it holds;
5. none: the critical plane is NULL, with a note saying how to give it.

A guessed length would move the critical plane: nothing here is inferred from the captured positions.
"""

from __future__ import annotations

import json
from dataclasses import replace

from qkdb.ingest.sources.registry import ModelSpec

# Registry models whose length no rope_scaling gives: model (or SmolLM3 phase) -> (tokens, why).
REGISTRY = {
    "mistral-v0.2-7b": (32768, "registry: Mistral-7B-v0.2's trained context, where its Hub captures stop "
                               "(../shared/benchmarks/README.md)"),
}
# SmolLM3's training phases, as their names say: pretraining (stages 1-3) before the 4k -> 32k extension,
# then the two long-context phases.
SMOLLM3_PHASES = {
    "stage1": 4096, "stage2": 4096, "stage3": 4096, "lc-4k-to-32k": 32768, "lc-32k-to-64k": 65536,
}


def scaled_original(spec: ModelSpec) -> int | None:
    """The original length of a scaled RoPE (``original_max_position_embeddings``), None otherwise."""
    return original_length(spec.rope_scaling)


def original_length(rope_scaling: str | dict | None) -> int | None:
    """A scaling's ``original_max_position_embeddings`` (JSON text or dict); None for plain RoPE or none given."""
    try:  # (a malformed scaling is refused, naming it, where the frequencies are derived: plane_layout)
        cfg = json.loads(rope_scaling) if isinstance(rope_scaling, str) else (rope_scaling or {})
    except ValueError:
        return None
    if not isinstance(cfg, dict):
        return None
    value = cfg.get("original_max_position_embeddings")
    kind = cfg.get("rope_type", cfg.get("type", "default"))
    if kind == "default" or not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return None
    return int(value)


def _registry(spec: ModelSpec) -> tuple[int, str] | None:
    if not spec.in_registry:
        return None
    if spec.model in REGISTRY:
        return REGISTRY[spec.model]
    if spec.family == "SmolLM3" and spec.phase in SMOLLM3_PHASES:
        return SMOLLM3_PHASES[spec.phase], f"registry: SmolLM3's phase {spec.phase!r} trained at this length"
    return None


def resolve(spec: ModelSpec, option: int | None = None) -> ModelSpec:
    """``spec`` with ``trained_context`` and ``trained_context_source`` set as the module docstring orders them."""
    if option is not None:
        return replace(spec, trained_context=int(option), trained_context_source="option")
    if spec.trained_context is not None:
        return replace(spec, trained_context_source=spec.trained_context_source or "dataset")
    original = scaled_original(spec)
    if original is not None:
        return replace(spec, trained_context=original, trained_context_source="rope_scaling")
    known = _registry(spec)
    if known is not None:
        return replace(spec, trained_context=known[0], trained_context_source=known[1])
    return replace(spec, trained_context=None, trained_context_source=None)


def note(spec: ModelSpec) -> list[str]:
    """What the user should know when the trained context is unknown (said once per model)."""
    if spec.rope == "none" or spec.trained_context is not None:
        return []
    if spec.rope_theta is None and spec.rope_inv_freq is None:
        return []  # (fitted frequencies get no critical plane whatever the length: plane_layout says why)
    return [f"{spec.model}: its trained context is not known (no --trained-context, no rope_scaling original length, "
            "nothing recorded by its capture): frequency_usage has no turns_trained, critical plane or low band; "
            "give --trained-context TOKENS"]


def record(max_position_embeddings, rope_scaling: dict | None) -> dict:
    """What a capture records of its config's trained context (the keys of :class:`ModelSpec` it sets)."""
    original = original_length(rope_scaling)
    if original is not None:
        return {"trained_context": original,
                "trained_context_source": "config: rope_scaling original_max_position_embeddings"}
    if isinstance(max_position_embeddings, int) and not isinstance(max_position_embeddings, bool) \
            and max_position_embeddings > 0:
        return {"trained_context": max_position_embeddings, "trained_context_source": "config: max_position_embeddings"}
    return {}

"""qk-sniffer's ``_saver_state.json``: what a capture records about itself, as a source of facts and provenance.

qk-sniffer's dataset writer (``saver/dataset.py``) keeps, at the root of every capture beside the head
folders and its ``README.md``, a ``_saver_state.json``::

    {"model_name": "meta-llama/Llama-3.2-1B",
     "model_metadata": {"source_dataset": "...", "dataset_name": "", "dataset_split": "train",
                        "sampling_strategy": "uniform", "sampling_bucket_size": 2048,
                        "head_sampling_seed": 0, "head_sampling_num_layers": 16,
                        "head_sampling_num_query_heads": 32, "head_sampling_num_key_heads": 8, ...},
     "bucket_counts": {"0": 812, "1": 790, ...}}

(its older writer kept ``model_metadata`` and ``bucket_counts`` keyed by the model's name). The
layer and head counts are the model config's, as the capture resolved them when it sampled its
heads: read here, a capture of a model outside the registry needs no ``--n-layers`` or
``--gqa-ratio``. They come after the ingest's options and the registry, and after a
``qkdb_dataset.json`` beside them. The whole state (sampling strategy, bucket size and counts, the
head-sampling seed, the source texts) is the model's provenance: ``models.capture``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from qkdb.errors import InputError
from qkdb.ingest.sources import registry
from qkdb.ingest.sources.layout import METADATA_FILE

SAVER_STATE = "_saver_state.json"

# model_metadata keys -> the facts they give (the counts of the model the capture sampled heads of)
_COUNTS = {
    "head_sampling_num_layers": "n_layers",
    "head_sampling_num_query_heads": "n_q_heads",
    "head_sampling_num_key_heads": "n_kv_heads",
}
SOURCES = "_sources"  # key of the merged facts: which file gave each fact (for messages)


@dataclass(frozen=True)
class SaverState:
    """A parsed ``_saver_state.json``."""

    path: Path
    model_name: str | None
    metadata: dict  # model_metadata: str -> str | int | float
    bucket_counts: dict  # bucket (as text) -> rows

    def facts(self) -> dict:
        """The model facts it gives: ``model`` (the registry's name for its ``model_name``, else one made from it), ``hf_model``, the layer and head counts."""
        out: dict = {}
        for key, fact in _COUNTS.items():
            value = self.metadata.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{self.path}: model_metadata.{key} must be a positive integer, got {value!r}")
            out[fact] = value
        if self.model_name:
            out["hf_model"] = self.model_name
            name = model_name_for(self.model_name)
            if name:
                out["model"] = name
        return out

    def record(self) -> dict:
        """Everything it says about the capture, for ``models.capture``."""
        return {"written_by": "qk-sniffer", "model_name": self.model_name, **self.metadata,
                "bucket_counts": self.bucket_counts}


def read_saver_state(root: str | os.PathLike) -> SaverState | None:
    """The ``_saver_state.json`` at a dataset's root, or None when there is none (an :class:`InputError` when it is unreadable)."""
    path = Path(root) / SAVER_STATE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object (qk-sniffer's saver state)")
    name, metadata, counts = data.get("model_name"), data.get("model_metadata"), data.get("bucket_counts")
    if not isinstance(name, str) and isinstance(metadata, dict) and len(metadata) == 1:
        # The older writer: {"model_metadata": {name: {...}}, "bucket_counts": {name: {...}}}
        (name, metadata), = metadata.items()
        if isinstance(counts, dict):
            counts = counts.get(name, {})
    if not isinstance(metadata, dict):
        metadata = {}
    clean = {k: v for k, v in metadata.items() if isinstance(k, str) and isinstance(v, (str, int, float))}
    buckets = {str(k): v for k, v in counts.items() if isinstance(v, int)} if isinstance(counts, dict) else {}
    return SaverState(path, name if isinstance(name, str) and name else None, clean, buckets)


def model_name_for(hf_model: str) -> str | None:
    """The qkdb model name of a captured Hugging Face model id.

    The registry's name when exactly one registry model has that id (the SmolLM3 checkpoints share
    one, told apart by revision: then None, and ``--model`` names it); else the id's last part in
    lower case with any character a partition cannot hold made ``-`` (``meta-llama/Llama-3.2-1B``
    -> ``llama-3.2-1b``).
    """
    matches = [s.model for s in registry.load_registry() if (s.hf_model or "").lower() == hf_model.lower()]
    if matches:
        return matches[0] if len(matches) == 1 else None
    base = hf_model.rstrip("/").rsplit("/", 1)[-1].lower()
    base = re.sub(r"[^a-z0-9._+-]+", "-", base).strip("-.")
    return base or None


def dataset_facts(metadata: dict, state: SaverState | None) -> dict:
    """What the dataset records about its model: ``qkdb_dataset.json``'s facts, completed by ``_saver_state.json``'s.

    The result is what :func:`qkdb.ingest.sources.facts.resolve_spec` takes as the dataset's
    metadata; under :data:`SOURCES` it says which file gave each fact, and ``_file`` names the file
    the dataset's facts come from when there is one only.
    """
    if state is None:
        return metadata
    given = state.facts()
    merged = {**given, **{k: v for k, v in metadata.items() if v is not None or k not in given}}
    merged[SOURCES] = {**{k: SAVER_STATE for k in given}, **{k: METADATA_FILE for k in metadata}}
    if not metadata:
        merged["_file"] = SAVER_STATE
    return merged


def capture_record(metadata: dict, state: SaverState | None) -> str | None:
    """``models.capture``: how the vectors were captured, as the dataset records it (JSON text), or None.

    qk-sniffer's saver state, or the ``capture`` section a ``qkdb sniff`` / ``qkdb simulate``
    dataset's ``qkdb_dataset.json`` writes; both when a dataset has both.
    """
    record: dict = {}
    if isinstance(metadata.get("capture"), dict):
        record.update({"written_by": f"qkdb {metadata.get('source') or ''}".strip(), **metadata["capture"]})
    if state is not None:
        record = {**record, "qk_sniffer": state.record()} if record else state.record()
    return json.dumps(record, sort_keys=True) if record else None

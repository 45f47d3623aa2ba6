"""``qkdb sniff --like DATASET``: capture another model (a checkpoint) at exactly another capture's texts, heads and positions.

Checkpoints of one training run (Pythia's ``stepN`` branches, OLMo-2's, SmolLM3's) are compared head
by head and position by position: the series views and their paired intervals assume the same
(layer, head) files holding the same (example_id, position) rows. ``--like`` makes a capture of a
new model take from an earlier ``qkdb sniff`` capture

* its **texts**: the source recorded in its ``qkdb_dataset.json`` (a file, folder, the built-in
  corpus, or a Hub dataset at the commit it was read at), with the same windows; the tokens are
  hashed and must equal the recorded hash — a model whose tokenizer cuts them otherwise is refused;
* its **head files**: the (layer, head, kind) folders it holds;
* its **positions**: every file's (example_id, position, bucket) rows, as stored.

The new model must have the same head layout (layers, query and KV heads, head dimension).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from qkdb.errors import SniffError
from qkdb.ingest.sources.layout import METADATA_FILE, discover, read_metadata

LAYOUT_KEYS = ("n_layers", "n_q_heads", "n_kv_heads", "head_dim")


@dataclass
class Like:
    """What a capture to be matched holds (see the module doc)."""

    path: Path
    metadata: dict
    files: list
    rows: dict  # file -> (text index, position, bucket) arrays
    example_ids: np.ndarray  # example_id of each text index
    text_options: dict  # SniffOptions fields that rebuild its texts
    tokens_sha256: str

    @property
    def texts(self) -> dict:
        return self.metadata["capture"]["texts"]

    def record(self) -> dict:
        """``capture.like`` in the new capture's metadata."""
        meta = self.metadata
        return {"path": str(self.path.resolve()), "model": meta.get("model"), "hf_model": meta.get("hf_model"),
                "model_revision": meta.get("model_revision"),
                "plan_sha256": (meta.get("capture") or {}).get("plan_sha256")}


def read_like(path: str | Path) -> Like:
    """Read the capture ``path`` to match; one-line :class:`SniffError` when it cannot be matched."""
    path = Path(path)
    if not path.is_dir():
        raise SniffError(f"--like {path}: no such capture folder", kind="not_found")
    meta = read_metadata(path)
    cap = meta.get("capture") if isinstance(meta, dict) else None
    if not meta:
        raise SniffError(f"--like {path}: no {METADATA_FILE} (a capture written by qkdb sniff records its texts there)")
    if meta.get("source") != "sniff" or not isinstance(cap, dict) or "tokens_sha256" not in (cap.get("texts") or {}):
        raise SniffError(f"--like {path}: not a capture of this qkdb sniff (its {METADATA_FILE} does not record the "
                         "texts' tokens), so its texts cannot be rebuilt exactly")
    record = cap["texts"]
    found = discover(path)
    files = [(l, h, "q") for l, h in sorted(found.queries)] + [(l, h, "k") for l, h in sorted(found.keys)]
    if not files:
        raise SniffError(f"--like {path}: no head files")
    n_texts = int(record["n_texts"])
    example_ids = np.asarray(record.get("example_ids") or range(n_texts), np.int64)
    index = {int(e): i for i, e in enumerate(example_ids)}
    rows = {}
    for f in files:
        hf = (found.queries if f[2] == "q" else found.keys)[(f[0], f[1])]
        table = pq.read_table(hf.path, columns=["example_id", "position", "bucket"]).to_pydict()
        ex = np.asarray(table["example_id"], np.int64)
        try:
            text = np.asarray([index[int(e)] for e in ex], np.int64)
        except KeyError as exc:
            raise SniffError(f"--like {hf.path}: example_id {exc.args[0]} is none of the capture's texts") from None
        rows[f] = (text, np.asarray(table["position"], np.int64), np.asarray(table["bucket"], np.int64))
    if record.get("source") == "dataset":
        text_options = {
            "dataset": record["dataset"], "dataset_config": record.get("config"),
            "dataset_split": record.get("split"), "dataset_revision": record["commit"],
            "text_field": record.get("text_column", "text"), "id_column": record.get("id_column"),
            "min_tokens": int(record.get("min_tokens", 1)), "n_texts": n_texts, "pack": False,
        }
    else:
        text_options = {
            "text": record["source"], "text_field": record.get("text_field", "text"),
            "pack": bool(record.get("pack", True)), "min_tokens": int(record.get("min_tokens", 1)),
            "n_texts": n_texts, "dataset": None,
        }
    text_options["max_length"] = int(cap.get("max_length", 2048))
    return Like(path, meta, files, rows, example_ids.astype(np.int32), text_options, str(record["tokens_sha256"]))


def check_layout(like: Like, facts, what: str) -> None:
    """Refuse a model whose head layout is not the matched capture's (its files would name other heads)."""
    theirs = {k: like.metadata.get(k) for k in LAYOUT_KEYS}
    ours = {k: getattr(facts, k) for k in LAYOUT_KEYS}
    if theirs != ours:
        def show(d):
            return (f"{d['n_layers']} layers, {d['n_q_heads']} query and {d['n_kv_heads']} KV heads of "
                    f"{d['head_dim']} dims")
        raise SniffError(f"--like {like.path}: a capture of a model with {show(theirs)}; {what} has {show(ours)}: "
                         "its heads cannot be paired")


__all__ = ["LAYOUT_KEYS", "Like", "check_layout", "read_like"]

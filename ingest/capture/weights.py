"""The sha256 of the weights a capture was made from, so that two checkpoints can prove they differ.

A training series is silently wrong when two of its "checkpoints" serve the same weights (Pythia's
step branches: pythia #195, #205, #206). Every ``qkdb sniff`` capture therefore records each weight
file's sha256 and one hash over them all (``capture.weights_sha256``); the ingest refuses a series
whose entries share it (docs/sniff.md, "Checkpoints that prove they differ").

Where the hashes come from, without reading the weights twice:

* a Hub model: huggingface_hub stores each downloaded file under ``blobs/<etag>``, and the etag of a
  file kept in LFS (every weight file on the Hub) *is* its sha256 — the Hub's LFS object id. The
  snapshot's link names it; nothing is read;
* anything else (a local folder, a GGUF file, a Hub file not in LFS, a cache without symlinks): the
  file is hashed here, in 8 MiB blocks.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

# The files a checkpoint's weights are in, by preference: transformers loads safetensors when a
# folder has them, else the pickled shards (so a folder holding both is hashed as it is loaded).
WEIGHT_KINDS = ((".safetensors",), (".bin", ".pt", ".pth", ".ckpt"), (".gguf",))
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_BLOCK = 8 << 20


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in blocks (memory stays at one block whatever its size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """The weight files of a model folder (its top level, as transformers reads it), in name order."""
    folder = Path(folder)
    present = [p for p in folder.iterdir() if p.is_file()]
    for suffixes in WEIGHT_KINDS:
        chosen = sorted((p for p in present if p.name.endswith(suffixes)), key=lambda p: p.name)
        if chosen:
            return chosen
    return []


def lfs_oid(path: Path) -> str | None:
    """The sha256 the Hub gave a file, when ``path`` is a Hugging Face cache link to an LFS blob."""
    if not path.is_symlink():
        return None
    blob = Path(os.path.realpath(path))
    return blob.name if blob.parent.name == "blobs" and _SHA256.match(blob.name) else None


def combined_sha256(files: dict[str, str]) -> str:
    """One hash of a checkpoint's weights: sha256 over ``name<TAB>sha256`` lines in name order."""
    lines = "".join(f"{name}\t{sha}\n" for name, sha in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def weights_record(where: str | os.PathLike) -> dict | None:
    """``{"weights_sha256", "weight_files": {name: {"sha256", "from"}}}`` of a model folder or a
    single weight file (``from``: ``"lfs oid"`` or ``"hashed"``); None when it holds no weight file."""
    where = Path(where)
    paths = [where] if where.is_file() else weight_files(where)
    if not paths:
        return None
    files = {}
    for p in paths:
        oid = lfs_oid(p)
        files[p.name] = {"sha256": oid or file_sha256(p), "from": "lfs oid" if oid else "hashed"}
    return {"weights_sha256": combined_sha256({n: f["sha256"] for n, f in files.items()}), "weight_files": files}

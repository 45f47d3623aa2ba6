"""The sha256 of the weights a capture was made from, so that two checkpoints can prove they differ.

A training series is silently wrong when two of its "checkpoints" serve the same weights (Pythia's
step branches: pythia #195, #205, #206). Every ``qkdb sniff`` capture therefore records each weight
file's sha256 and one hash of the weights (``capture.weights_sha256``: over the tensors where they
are safetensors, so that a checkpoint's sharding does not change it); the ingest refuses a series
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
import json
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


_MAX_HEADER = 100 << 20  # safetensors' own bound on its JSON header


def safetensors_tensors(path: str | os.PathLike) -> list[tuple[str, str, tuple[int, ...], int, int]] | None:
    """``(name, dtype, shape, first byte, end byte)`` of every tensor of a safetensors file; None when it is not one.

    The format: 8 bytes (little-endian header length), a JSON header naming each tensor's dtype,
    shape and ``data_offsets`` into the bytes after it (safetensors' specification).
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else 0
        if not 0 < n <= min(_MAX_HEADER, size - 8):
            return None
        try:
            header = json.loads(f.read(n))
        except ValueError:
            return None
    if not isinstance(header, dict):
        return None
    out = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(x) for x in t["data_offsets"])
            entry = (name, str(t["dtype"]), tuple(int(d) for d in t["shape"]), 8 + n + start, 8 + n + end)
        except (TypeError, KeyError, ValueError):
            return None
        if not 8 + n <= entry[3] <= entry[4] <= size:
            return None
        out.append(entry)
    return out


def tensors_sha256(paths: list[Path]) -> str | None:
    """One hash of what the weights *are*, however they are split into files: sha256 over
    ``name<TAB>dtype<TAB>shape<TAB>sha256(bytes)`` lines in tensor-name order. None unless every
    file is safetensors (a pickle's tensors cannot be read without unpickling it)."""
    tensors = []
    for p in paths:
        found = safetensors_tensors(p)
        if found is None:
            return None
        tensors.extend((name, dtype, shape, p, start, end) for name, dtype, shape, start, end in found)
    lines = []
    for name, dtype, shape, p, start, end in sorted(tensors, key=lambda t: t[0]):
        h = hashlib.sha256()
        with open(p, "rb") as f:
            f.seek(start)
            left = end - start
            while left and (block := f.read(min(_BLOCK, left))):
                h.update(block)
                left -= len(block)
        lines.append(f"{name}\t{dtype}\t{list(shape)}\t{h.hexdigest()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def weights_record(where: str | os.PathLike) -> dict | None:
    """``{"weights_sha256", "weights_hashed", "weight_files": {name: {"sha256", "from"}}}`` of a model
    folder or a single weight file; None when it holds no weight file.

    ``weights_sha256`` is over the tensors (:func:`tensors_sha256`: the same checkpoint saved in one
    file or in six shards hashes alike) where the weights are safetensors, ``weights_hashed``
    ``"tensors"``; else over the files (:func:`combined_sha256`), ``"files"``. Each file's own sha256
    is kept in ``weight_files`` (``from``: ``"lfs oid"``, the Hub's, or ``"hashed"``).
    """
    where = Path(where)
    paths = [where] if where.is_file() else weight_files(where)
    if not paths:
        return None
    files = {}
    for p in paths:
        oid = lfs_oid(p)
        files[p.name] = {"sha256": oid or file_sha256(p), "from": "lfs oid" if oid else "hashed"}
    by_tensor = tensors_sha256(paths)
    return {"weights_sha256": by_tensor or combined_sha256({n: f["sha256"] for n, f in files.items()}),
            "weights_hashed": "tensors" if by_tensor else "files", "weight_files": files}

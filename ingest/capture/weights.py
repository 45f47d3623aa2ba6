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


def _read_hashes(path: Path, whole: bool, tensors: list | None) -> tuple[str | None, dict[str, str]]:
    """In one read of ``path``: the sha256 of its bytes (when ``whole``) and of each tensor's byte range
    (``tensors``: :func:`safetensors_tensors`' entries). Ranges are fed from the blocks as they pass,
    so a weight file is read once whatever is asked of it."""
    ranges = sorted(((start, end, name) for name, _, _, start, end in tensors or []))
    hashers = {name: hashlib.sha256() for _, _, name in ranges}
    whole_h = hashlib.sha256() if whole else None
    last = max((end for _, end, _ in ranges), default=0)
    first = 0  # ranges before this index end before the current block
    pos = 0
    with open(path, "rb") as f:
        while whole_h is not None or pos < last:
            block = f.read(_BLOCK)
            if not block:
                break
            if whole_h is not None:
                whole_h.update(block)
            view, stop = memoryview(block), pos + len(block)
            while first < len(ranges) and ranges[first][1] <= pos:
                first += 1
            for start, end, name in ranges[first:]:
                if start >= stop:
                    break  # (sorted by start: no later range reaches into this block)
                if end > pos:
                    hashers[name].update(view[max(start, pos) - pos:min(end, stop) - pos])
            pos = stop
    return (whole_h.hexdigest() if whole_h is not None else None), {n: h.hexdigest() for n, h in hashers.items()}


def _tensors_sha256(entries: list[tuple[str, str, tuple, str]]) -> str:
    """sha256 over ``name<TAB>dtype<TAB>shape<TAB>sha256(bytes)`` lines in tensor-name order."""
    lines = "".join(f"{name}\t{dtype}\t{list(shape)}\t{sha}\n" for name, dtype, shape, sha in sorted(entries))
    return hashlib.sha256(lines.encode()).hexdigest()


def weights_record(where: str | os.PathLike) -> dict | None:
    """``{"weights_sha256", "weights_hashed", "weight_files": {name: {"sha256", "from"}}}`` of a model
    folder or a single weight file; None when it holds no weight file.

    ``weights_sha256`` is over the tensors where the weights are safetensors (sha256 over
    ``name<TAB>dtype<TAB>shape<TAB>sha256(bytes)`` lines in tensor-name order: the same checkpoint saved
    in one file or in six shards hashes alike), ``weights_hashed`` ``"tensors"``; else over the files (:func:`combined_sha256`), ``"files"``. Each file's own sha256
    is kept in ``weight_files`` (``from``: ``"lfs oid"``, the Hub's, or ``"hashed"``).
    """
    where = Path(where)
    paths = [where] if where.is_file() else weight_files(where)
    if not paths:
        return None
    found = [safetensors_tensors(p) for p in paths]
    by_tensor = all(t is not None for t in found)
    files, entries = {}, []
    for p, tensors in zip(paths, found):
        oid = lfs_oid(p)
        # one read per file for both hashes (its own, unless the Hub named it, and its tensors')
        whole, hashes = _read_hashes(p, whole=oid is None, tensors=tensors if by_tensor else None)
        files[p.name] = {"sha256": oid or whole, "from": "lfs oid" if oid else "hashed"}
        if by_tensor:
            entries.extend((name, dtype, shape, hashes[name]) for name, dtype, shape, _, _ in tensors)
    return {"weights_sha256": _tensors_sha256(entries) if by_tensor else
            combined_sha256({n: f["sha256"] for n, f in files.items()}),
            "weights_hashed": "tensors" if by_tensor else "files", "weight_files": files}

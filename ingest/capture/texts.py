"""Texts for ``qkdb sniff``: where they come from and how they become fixed-length token windows.

Sources
-------
``pydoc``
    The English prose that every Python ships in ``pydoc_data.topics.topics`` (~465,000
    characters, ~113,000 SmolLM2 tokens): the topics in sorted order, one document each.
    Always available, so a capture needs no download.
a ``.jsonl`` file
    One document per line: the line's ``text`` field (``text_field``), or the line itself
    when it is a JSON string.
any other file
    The whole file is one document (UTF-8).
a folder
    Every ``*.txt``, ``*.md``, ``*.rst`` and ``*.jsonl`` file below it, in sorted path order.
``random`` and ``repeated``
    Not texts but Gu et al.'s (2025, §3.3) controls for attention sinks: each window is
    ``max_length`` token ids drawn uniformly, seeded, from the vocabulary less the tokenizer's
    special tokens (``random``), or one such id repeated (``repeated``); 100 windows unless
    ``--texts`` says otherwise (:func:`synthetic_windows`). These words name the kind, never a file.

Windows
-------
With ``pack=True`` (the default) the documents are tokenized without special tokens, joined
with the tokenizer's end-of-sequence token and cut into consecutive windows of exactly
``max_length`` tokens (a trailing shorter window is dropped unless it is the only one); when the
tokenizer adds a beginning-of-sequence token by itself, every window starts with it. Packing gives
every window the full context length, which the positional findings need. With ``pack=False``
each document is one window, truncated to ``max_length``. Empty (or whitespace-only) documents are
skipped in both modes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from qkdb.errors import SniffError

PYDOC = "pydoc"
SYNTHETIC = ("random", "repeated")  # input kinds that are token ids, not texts (capture.texts.kind)
SYNTHETIC_TEXTS = 100  # Gu et al. average over 100 sequences
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".jsonl")


def pydoc_documents() -> list[str]:
    """The topics of ``pydoc_data.topics`` in sorted key order."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some distributions strip pydoc_data
        raise SniffError("the built-in 'pydoc' corpus is missing from this Python (pydoc_data)") from exc
    return [topics[k] for k in sorted(topics)]


def json_lines(path: Path, where: str | None = None) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) of every non-blank line of a JSON-lines file; ``where`` names it in errors."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except ValueError as exc:
                raise SniffError(f"{where or path}:{lineno}: not valid JSON ({exc})") from None


def _jsonl_documents(path: Path, text_field: str) -> Iterator[str]:
    for lineno, item in json_lines(path):
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict) and isinstance(item.get(text_field), str):
            yield item[text_field]
        else:
            raise SniffError(f"{path}:{lineno}: expected a JSON string or an object with a string {text_field!r}")


def _file_documents(path: Path, text_field: str) -> Iterator[str]:
    if path.suffix == ".jsonl":
        yield from _jsonl_documents(path, text_field)
        return
    try:
        yield path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SniffError(f"{path}: cannot read as UTF-8 text ({exc})") from exc


def iter_documents(source: str | os.PathLike, text_field: str = "text") -> Iterator[str]:
    """Documents of a source (``"pydoc"``, a file or a folder), lazily, in a fixed order."""
    if str(source) == PYDOC:
        yield from pydoc_documents()
        return
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        if not files:
            raise SniffError(f"{path}: no {', '.join(TEXT_SUFFIXES)} files in this folder")
        for f in files:
            yield from _file_documents(f, text_field)
    elif path.is_file():
        yield from _file_documents(path, text_field)
    else:
        raise SniffError(f"{source}: no such text file or folder (use 'pydoc' for the built-in corpus)", kind="not_found")


def input_kind(source: str | os.PathLike) -> str:
    """``capture.texts.kind`` of a text source: ``random``, ``repeated`` or ``natural`` (any text)."""
    return str(source) if str(source) in SYNTHETIC else "natural"


def synthetic_windows(kind: str, vocab: np.ndarray, n_texts: int, max_length: int, *, bos_id: int | None,
                      seed: int) -> list[np.ndarray]:
    """Gu et al.'s inputs: ``n_texts`` windows of ``max_length`` tokens, BOS first when given.

    ``random``: every token drawn uniformly from ``vocab`` (the tokenizer's ids less its special
    tokens); ``repeated``: one id drawn from it, repeated. Seeded by ``seed`` and the kind alone, so
    that two captures of one model with the same seed see the same inputs.
    """
    if kind not in SYNTHETIC:
        raise SniffError(f"unknown input kind {kind!r}; expected one of {', '.join(SYNTHETIC)}")
    if max_length < 2:
        raise SniffError(f"--max-length must be at least 2, got {max_length}")
    vocab = np.asarray(vocab, np.int64)
    if vocab.size == 0:
        raise SniffError(f"--text {kind}: the tokenizer has no tokens but special ones")
    rng = np.random.default_rng([int(seed), SYNTHETIC.index(kind)])
    body = max_length - (1 if bos_id is not None else 0)
    head = np.asarray([] if bos_id is None else [int(bos_id)], np.int64)
    if kind == "random":
        drawn = vocab[rng.integers(0, vocab.size, size=(n_texts, body))]
    else:
        drawn = np.repeat(vocab[rng.integers(0, vocab.size, size=(n_texts, 1))], body, axis=1)
    return [np.concatenate([head, row]) for row in drawn]


def check_source(source: str | os.PathLike, text_field: str = "text") -> None:
    """Raise :class:`SniffError` unless the source exists and holds some text (not only whitespace).

    Reads documents only until the first non-empty one: cheap, and done before any model loads.
    The synthetic kinds (``random``, ``repeated``) need no source.
    """
    if str(source) in SYNTHETIC:
        return
    for doc in iter_documents(source, text_field):
        if doc.strip():
            return
    where = "the built-in corpus" if str(source) == PYDOC else str(source)
    raise SniffError(f"{where}: no text in it (every document is empty or whitespace)")


def token_windows(
    documents: Iterable[str],
    encode: Callable[[str], list[int]],
    max_length: int,
    *,
    pack: bool = True,
    bos_id: int | None = None,
    eos_id: int | None = None,
    limit: int | None = None,
    min_tokens: int = 1,
) -> list[np.ndarray]:
    """Token-id windows (int64 arrays) from documents, tokenized lazily until ``limit`` windows exist.

    ``encode`` maps a text to token ids without special tokens; ``bos_id`` (when not None) starts
    every window; ``eos_id`` (when not None) separates packed documents. Unpacked, a document of
    fewer than ``min_tokens`` tokens (its window's length before truncation) is skipped. See the
    module doc.
    """
    if max_length < 2:
        raise SniffError(f"--max-length must be at least 2, got {max_length}")
    body = max_length - (1 if bos_id is not None else 0)
    head = [] if bos_id is None else [int(bos_id)]
    windows: list[np.ndarray] = []
    pending: list[np.ndarray] = []
    n_pending = 0

    def full() -> bool:
        return limit is not None and len(windows) >= limit

    for doc in documents:
        if full():
            break
        if not doc.strip():
            continue  # an empty document is no text: packed, it would add a lone separator
        ids = list(encode(doc))
        if not pack:
            if ids and len(head) + len(ids) >= min_tokens:
                windows.append(np.asarray(head + ids[:body], dtype=np.int64))
            continue
        if eos_id is not None:
            ids.append(int(eos_id))
        pending.append(np.asarray(ids, dtype=np.int64))
        n_pending += len(ids)
        if n_pending >= body:
            stream = np.concatenate(pending)
            n_full = len(stream) // body
            for i in range(n_full):
                if full():
                    break
                windows.append(np.concatenate([np.asarray(head, np.int64), stream[i * body : (i + 1) * body]]))
            rest = stream[n_full * body :]
            pending, n_pending = [rest], len(rest)
    if pack and not windows and n_pending:
        windows.append(np.concatenate([np.asarray(head, np.int64)] + pending))
    if not windows:
        raise SniffError("the text source produced no tokens" if min_tokens <= 1 else
                         f"the text source holds no document of at least {min_tokens} tokens (lower --min-tokens)")
    return windows[:limit] if limit is not None else windows


def tokens_sha256(windows: list[np.ndarray]) -> str:
    """A hash of the token windows (their lengths and ids): the same texts tokenized the same way, the same hash."""
    import hashlib

    h = hashlib.sha256()
    for w in windows:
        arr = np.ascontiguousarray(w, np.int64)
        h.update(np.int64(len(arr)).tobytes())
        h.update(arr.tobytes())
    return h.hexdigest()

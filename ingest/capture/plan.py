"""What a capture keeps: per head file and text, the positions — drawn before the model loads, or taken from another capture.

A :class:`CapturePlan` holds, for every head file ``(layer, head, kind)`` and every text, the sorted
positions the file keeps from that text (and their buckets). It is made either

* by drawing (:meth:`CapturePlan.drawn`): each file keeps ``min(share, length)`` positions of each
  text (its share of ``vectors_per_head``, or all positions of a shorter text): its first
  ``keep_first`` positions (token 0 and the other sink candidates, so that every query's weight on
  them is measurable), then the rest drawn by :mod:`qkdb.ingest.capture.sampling`'s seeded policy
  over the positions after them, so every file keeps the same count; or
* from another capture's rows (:meth:`CapturePlan.given`, ``qkdb sniff --like``): exactly the
  (text, position) pairs that capture stored, file by file, whatever their counts.

During the capture the rows of one text are gathered into one flat block, file after file in the
order of :attr:`files` (:meth:`text_layout`): a layer's query files, and its key files, are
contiguous there, so each is filled by one gather.
"""

from __future__ import annotations

import hashlib

import numpy as np

from qkdb.ingest.capture import sampling
from qkdb.ingest.sources.layout import head_dir_name

File = tuple[int, int, str]  # (layer, head, "q" | "k")


class CapturePlan:
    """Positions (and buckets) per head file and text; see the module doc.

    Attributes
    ----------
    files : list of (layer, head, kind)
        Query files first, then key files, each sorted by (layer, head).
    lengths : (n_texts,) int64
        The texts' lengths in tokens.
    example_ids : (n_texts,) int32
        The ``example_id`` column's value for each text.
    counts : (n_files, n_texts) int64
        Rows each file keeps from each text.
    positions, buckets : dict of file to array
        The file's positions (int64) and buckets (int32), text after text, sorted within a text.
    """

    def __init__(self, files, lengths, example_ids, counts, positions, buckets, asked: int | None = None):
        self.files: list[File] = list(files)
        self.index = {f: i for i, f in enumerate(self.files)}
        self.lengths = np.asarray(lengths, np.int64)
        self.example_ids = np.asarray(example_ids, np.int32)
        self.counts = np.asarray(counts, np.int64).reshape(len(self.files), len(self.lengths))
        self.positions: dict[File, np.ndarray] = positions
        self.buckets: dict[File, np.ndarray] = buckets
        self.asked = asked
        # per file: where each text's rows start in its arrays; per text: where each file's rows start
        self.starts = np.concatenate([np.zeros((len(self.files), 1), np.int64), np.cumsum(self.counts, axis=1)], axis=1)
        self.text_offsets = np.concatenate([np.zeros((1, len(self.lengths)), np.int64),
                                            np.cumsum(self.counts, axis=0)], axis=0).T

    # -- making one ------------------------------------------------------------------------------

    @classmethod
    def drawn(cls, files, lengths, *, vectors_per_head: int, seed: int, policy: str, min_bucket_size: int,
              example_ids=None, keep_first: int = 0) -> CapturePlan:
        """Each file keeps ``min(share, length)`` positions of each text: the first ``keep_first``, then
        seeded draws over the positions after them (module doc)."""
        lengths = np.asarray(lengths, np.int64)
        share = sampling.split_evenly(vectors_per_head, len(lengths))
        per_text = np.minimum(share, lengths)
        files = list(files)
        positions, buckets = {}, {}
        for f in files:
            pos, bucket = [], []
            for e, length in enumerate(lengths):
                rng = sampling.position_rng(seed, e, *f)
                first = min(int(keep_first), int(per_text[e]))
                pick = sampling.sample_positions(int(length) - first, int(per_text[e]) - first, rng, policy,
                                                 min_bucket_size)
                p = np.concatenate([np.arange(first, dtype=np.int64), pick.positions + first])
                pos.append(p)
                # (the buckets of the positions themselves, as the policy labels them)
                bucket.append(sampling.log2_bucket(p, min_bucket_size) if policy == "log-uniform"
                              else p // min_bucket_size)
            positions[f] = np.concatenate(pos).astype(np.int64) if pos else np.zeros(0, np.int64)
            buckets[f] = np.concatenate(bucket).astype(np.int32) if bucket else np.zeros(0, np.int32)
        ids = np.arange(len(lengths)) if example_ids is None else example_ids
        counts = np.tile(per_text, (len(files), 1))
        return cls(files, lengths, ids, counts, positions, buckets, asked=vectors_per_head)

    @classmethod
    def given(cls, files, lengths, example_ids, rows: dict) -> CapturePlan:
        """From another capture's rows: ``rows[f] = (text index, position, bucket)`` arrays of file ``f``.

        Raises
        ------
        ValueError
            A row names a text that is not there, a position beyond its text, or repeats a position.
        """
        lengths = np.asarray(lengths, np.int64)
        files = list(files)
        counts = np.zeros((len(files), len(lengths)), np.int64)
        positions, buckets = {}, {}
        for i, f in enumerate(files):
            text, pos, bucket = (np.asarray(a, np.int64) for a in rows[f])
            if len(text) and (text.min() < 0 or text.max() >= len(lengths)):
                raise ValueError(f"{head_dir_name(*f)}: rows of texts the capture does not have")
            order = np.lexsort((pos, text))
            text, pos, bucket = text[order], pos[order], bucket[order]
            if len(pos) and (pos.min() < 0 or np.any(pos >= lengths[text])):
                raise ValueError(f"{head_dir_name(*f)}: positions beyond the end of their text")
            if np.any((np.diff(text) == 0) & (np.diff(pos) == 0)):
                raise ValueError(f"{head_dir_name(*f)}: the same (example_id, position) twice")
            counts[i] = np.bincount(text, minlength=len(lengths))
            positions[f], buckets[f] = pos, bucket.astype(np.int32)
        return cls(files, lengths, example_ids, counts, positions, buckets)

    # -- reading it ------------------------------------------------------------------------------

    @property
    def n_texts(self) -> int:
        return len(self.lengths)

    @property
    def kept(self) -> int:
        """Rows the files keep (the fewest any file keeps, when they differ)."""
        totals = self.counts.sum(axis=1)
        return int(totals.min()) if len(totals) else 0

    @property
    def kept_per_file(self) -> np.ndarray:
        return self.counts.sum(axis=1)

    def positions_of(self, f: File, text: int) -> np.ndarray:
        i = self.index[f]
        return self.positions[f][self.starts[i, text]:self.starts[i, text + 1]]

    def example_id_column(self, f: File) -> np.ndarray:
        return np.repeat(self.example_ids, self.counts[self.index[f]]).astype(np.int32)

    def text_rows(self, text: int) -> int:
        """Rows of all files from one text (the size of its block)."""
        return int(self.text_offsets[text, -1])

    def text_layout(self, text: int) -> np.ndarray:
        """(n_files + 1,) offsets of each file's rows in the text's block."""
        return self.text_offsets[text]

    def fingerprint(self) -> str:
        """A hash of the files, the texts' lengths and ids and every position: equal plans, equal hashes."""
        h = hashlib.sha256()
        h.update(repr(self.files).encode())
        for arr in (self.lengths, self.example_ids, self.counts):
            h.update(np.ascontiguousarray(arr, np.int64).tobytes())
        for f in self.files:
            h.update(np.ascontiguousarray(self.positions[f], np.int64).tobytes())
        return h.hexdigest()

    def shortfall(self, minimum: int) -> tuple[list[str], str | None]:
        """Notes when the files keep fewer rows than asked, and an error when fewer than ``minimum``."""
        if self.asked is None or self.kept >= self.asked:
            return [], None
        short = int(np.sum(self.counts[0] < sampling.split_evenly(self.asked, len(self.lengths))))
        why = (f"{short} of the {len(self.lengths)} texts hold fewer tokens than their share "
               f"(lengths {value_range(self.lengths)})")
        names = ", ".join(head_dir_name(*f) for f in self.files[:6]) + (
            f" and {len(self.files) - 6} more" if len(self.files) > 6 else "")
        if self.kept < minimum:
            return [], (f"every head file would keep only {self.kept} vectors ({names}), fewer than the "
                        f"{minimum} an ingest needs (asked for {self.asked}; {why}): use longer or more texts")
        return [f"each of the {len(self.files)} head files keeps {self.kept} of the {self.asked} vectors asked "
                f"for ({names}): {why}"], None


def value_range(values) -> str:
    lo, hi = int(np.min(values)), int(np.max(values))
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


__all__ = ["CapturePlan", "File", "value_range"]

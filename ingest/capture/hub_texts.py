"""Texts for ``qkdb sniff --dataset``: the rows of a Hugging Face dataset, read through ``huggingface_hub``.

Why not the ``datasets`` library: a capture reads a few long texts in a fixed order, one column of
them. The Hub stores almost every dataset as parquet or JSON-lines files (and converts the others
to parquet on its ``refs/convert/parquet`` branch), so ``huggingface_hub`` alone — already a
dependency of qkdb — finds and downloads them through the Hugging Face cache, and pyarrow reads
them row group by row group. That keeps what the capture depends on small, downloads only the
files the texts come from (one shard of a large split rather than the split), and inherits the
Hub's usual behaviour: ``HF_TOKEN`` for gated or private datasets, ``HF_HUB_OFFLINE=1`` to read only
the cache, ``HF_ENDPOINT`` for a mirror.

Which files: the ``configs`` of the dataset card's YAML (``data_files`` per split, with globs), as
the Hub's viewer reads them; without them, the Hub's file-name conventions — a file belongs to the
split named as a word of its path (``train``/``training``, ``validation``/``valid``/``val``/``dev``,
``test``/``testing``/``eval``), and when no file names a split, every file is ``train``; ``--config C``
then means the folder ``C/`` (the parquet conversion's layout). The split's files are read in path
order, rows in file order: the row's index in that order is its **row number**.

Ids. Each text's ``example_id`` (an int32 column) is, with ``--id-column``, the row's id when the
column holds integers that fit in int32; otherwise (strings, or larger integers) the text's
ordinal in the capture, and ``capture.texts.ids`` in ``qkdb_dataset.json`` lists the dataset id of
every ``example_id`` (position i: example_id i). Without ``--id-column`` it is the row number.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qkdb.errors import SniffError
from qkdb.ingest.capture.texts import json_lines

FORMATS = (".parquet", ".jsonl")
SPLIT_WORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}
INT32_MAX = 2**31 - 1


@dataclass
class DatasetRequest:
    """What ``--dataset`` and its options ask for."""

    repo: str
    config: str | None = None
    split: str | None = None
    revision: str | None = None
    text_column: str = "text"
    id_column: str | None = None


@dataclass
class DatasetTexts:
    """The texts a capture takes from a dataset, and what identifies them."""

    windows: list[np.ndarray]
    example_ids: np.ndarray  # (n,) int32
    ids: list | None  # dataset id of each text when example_id is the ordinal (string or large ids), else None
    record: dict = field(default_factory=dict)  # capture.texts


# --------------------------------------------------------------------------- finding the files


def _glob(pattern: str) -> re.Pattern:
    """A Hub ``data_files`` glob as a regex over repo paths (``*`` within a folder, ``**`` across)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _matching(patterns, files: list[str]) -> list[str]:
    pats = [patterns] if isinstance(patterns, str) else list(patterns or [])
    regexes = [_glob(p) for p in pats]
    return sorted(f for f in files if any(r.match(f) for r in regexes))


def _split_of(path: str) -> str | None:
    words = {w for w in re.split(r"[/\-._ 0-9]+", path.lower()) if w}
    for split, names in SPLIT_WORDS.items():
        if words & set(names):
            return split
    return None


def _card_configs(card: Path | None) -> list[dict]:
    if card is None:
        return []
    from huggingface_hub.repocard import metadata_load

    try:
        meta = metadata_load(card) or {}
    except Exception:  # noqa: BLE001 - a card whose YAML does not parse: the file-name conventions apply
        return []
    configs = meta.get("configs")
    return [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []


def _config_files(config: dict, files: list[str]) -> dict[str, list[str]]:
    """Split -> files of one card config (``data_files``: a glob, a list of them, or a list of {split, path})."""
    data = config.get("data_files")
    if isinstance(data, (str, list)) and not (isinstance(data, list) and data and isinstance(data[0], dict)):
        return {"train": _matching(data, files)}
    out: dict[str, list[str]] = {}
    if isinstance(data, list):
        for entry in data:
            if isinstance(entry, dict) and "split" in entry:
                out[str(entry["split"])] = _matching(entry.get("path"), files)
    elif isinstance(data, dict):
        for split, pats in data.items():
            out[str(split)] = _matching(pats, files)
    return out


def split_files(request: DatasetRequest, files: list[str], card: Path | None) -> tuple[str, str, list[str]]:
    """(config, split, its data files in path order) for a request, by the card's configs or the Hub's conventions.

    Raises
    ------
    SniffError
        No such config or split (naming those there are), or no parquet/jsonl files in it.
    """
    where = f"dataset {request.repo}"
    configs = _card_configs(card)
    if configs:
        names = [str(c.get("config_name", "default")) for c in configs]
        wanted = request.config or ("default" if "default" in names else names[0])
        if wanted not in names:
            raise SniffError(f"{where}: no config {wanted!r} (its configs: {', '.join(names)})", kind="not_found")
        by_split = _config_files(configs[names.index(wanted)], files)
        config = wanted
    else:
        config = request.config or "default"
        pool = [f for f in files if f.lower().endswith(FORMATS + (".csv", ".json", ".arrow", ".txt", ".tsv"))
                and not f.startswith(".") and Path(f).name != "README.md"]
        if request.config is not None:
            inside = [f for f in pool if f.startswith(request.config.rstrip("/") + "/")]
            if not inside:
                folders = sorted({f.split("/")[0] for f in pool if "/" in f})
                shown = f" (its folders: {', '.join(folders[:8])})" if folders else ""
                raise SniffError(f"{where}: no config {request.config!r}: no data files in a folder of that "
                                 f"name and no configs in its card{shown}", kind="not_found")
            pool = [f[len(request.config.rstrip("/")) + 1:] for f in inside]
            prefix = request.config.rstrip("/") + "/"
        else:
            prefix = ""
        by_split: dict[str, list[str]] = {}
        named = {f: _split_of(f) for f in pool}
        if not any(named.values()):
            by_split["train"] = sorted(pool)
        else:
            for f, s in named.items():
                if s is not None:
                    by_split.setdefault(s, []).append(f)
        by_split = {s: sorted(prefix + f for f in fs) for s, fs in by_split.items()}
    splits = sorted(s for s, fs in by_split.items() if fs)
    if not splits:
        raise SniffError(f"{where}: no data files (parquet or jsonl) in config {config!r}", kind="not_found")
    split = request.split or ("train" if "train" in splits else splits[0] if len(splits) == 1 else None)
    if split is None:
        raise SniffError(f"{where}: config {config!r} has splits {', '.join(splits)}: choose one with --split",
                         kind="usage")
    if split not in by_split or not by_split[split]:
        raise SniffError(f"{where}: no split {split!r} in config {config!r} (its splits: {', '.join(splits)})",
                         kind="not_found")
    chosen = by_split[split]
    readable = [f for f in chosen if f.lower().endswith(FORMATS)]
    if not readable:
        kinds = ", ".join(sorted({Path(f).suffix or Path(f).name for f in chosen}))
        raise SniffError(f"{where}: split {split!r} is stored as {kinds}; qkdb sniff reads parquet and jsonl data "
                         "files: use the Hub's parquet conversion (--dataset-revision refs/convert/parquet)")
    return config, split, readable


# --------------------------------------------------------------------------- reading the rows


class HubDataset:
    """One split of a Hub dataset at a pinned commit: its files (downloaded when read) and its rows.

    Parameters
    ----------
    request
        The repo, config, split, revision and columns.
    endpoint, cache_dir, token
        huggingface_hub's (default: ``HF_ENDPOINT``, the Hugging Face cache, ``HF_TOKEN``).
    """

    def __init__(self, request: DatasetRequest, *, endpoint: str | None = None, cache_dir=None, token=None):
        self.request = request
        self.endpoint, self.cache_dir, self.token = endpoint, cache_dir, token
        self.opened: list[str] = []  # the split's files read so far, in order
        self.commit, files = self._listing()
        card = self._fetch("README.md") if "README.md" in files else None
        self.config, self.split, self.files = split_files(request, files, card)

    # -- the repo at a commit ---------------------------------------------------------------------

    def _listing(self) -> tuple[str, list[str]]:
        """(commit sha, every file of the repo there): listed on the Hub (and the listing kept in the cache), or
        offline from the cache, as an ingest from the Hub lists a branch."""
        from qkdb.ingest.sources.hub import list_files

        commit, files, _ = list_files(self.request.repo, self.request.revision or "main", endpoint=self.endpoint,
                                      cache_dir=self.cache_dir, token=self.token)
        return commit, sorted(files)

    def _fetch(self, path: str) -> Path:
        from qkdb.ingest.sources.hub_repo import fetch

        return fetch(self.request.repo, self.commit, [path], revision=self.request.revision or "main",
                     endpoint=self.endpoint, cache_dir=self.cache_dir, token=self.token)[path]

    # -- rows ---------------------------------------------------------------------------------------

    def _where(self, path: str | None = None) -> str:
        at = f"dataset {self.request.repo} ({self.config}/{self.split})"
        return f"{at} {path}" if path else at

    def rows(self) -> Iterator[tuple[int, object, str]]:
        """(row number, id or None, text) of every row, files in path order; checked as they come."""
        number = 0
        for path in self.files:
            local = self._fetch(path)
            self.opened.append(path)
            reader = self._parquet if path.lower().endswith(".parquet") else self._jsonl
            for ident, text in reader(local, path):
                yield number, ident, text
                number += 1

    def _parquet(self, local: Path, path: str) -> Iterator[tuple[object, str]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(local)
        except (OSError, pa.ArrowException) as exc:
            raise SniffError(f"{self._where(path)}: not a readable parquet file ({exc})") from None
        schema = pf.schema_arrow
        columns = [self.request.text_column] + ([self.request.id_column] if self.request.id_column else [])
        for name in columns:
            if name not in schema.names:
                raise SniffError(f"{self._where(path)}: no column {name!r} (its columns: {', '.join(schema.names)})",
                                 kind="not_found")
        kind = schema.field(self.request.text_column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
            raise SniffError(f"{self._where(path)}: the text column {self.request.text_column!r} holds {kind}, not text "
                             "(choose the column with --text-column)")
        if self.request.id_column:
            ik = schema.field(self.request.id_column).type
            if not (pa.types.is_integer(ik) or pa.types.is_string(ik) or pa.types.is_large_string(ik)):
                raise SniffError(f"{self._where(path)}: the id column {self.request.id_column!r} holds {ik}; "
                                 "ids must be integers or strings")
        for batch in pf.iter_batches(batch_size=64, columns=columns):
            textcol = batch.column(0).to_pylist()
            ids = batch.column(1).to_pylist() if self.request.id_column else [None] * len(textcol)
            yield from zip(ids, textcol)

    def _jsonl(self, local: Path, path: str) -> Iterator[tuple[object, str]]:
        where = self._where(path)
        for lineno, item in json_lines(local, where):
            if not isinstance(item, dict):
                raise SniffError(f"{where}:{lineno}: a line that is not a JSON object")
            for name in [self.request.text_column] + ([self.request.id_column] if self.request.id_column else []):
                if name not in item:
                    raise SniffError(f"{where}:{lineno}: no field {name!r} (its fields: "
                                     f"{', '.join(sorted(item))})", kind="not_found")
            text = item[self.request.text_column]
            if text is not None and not isinstance(text, str):
                raise SniffError(f"{where}:{lineno}: the text field {self.request.text_column!r} holds "
                                 f"{type(text).__name__}, not text (choose the field with --text-column)")
            ident = item[self.request.id_column] if self.request.id_column else None
            if self.request.id_column and (isinstance(ident, bool) or not isinstance(ident, (int, str))):
                raise SniffError(f"{where}:{lineno}: the id field {self.request.id_column!r} holds "
                                 f"{type(ident).__name__}; ids must be integers or strings")
            yield ident, text


def dataset_texts(dataset: HubDataset, encode: Callable[[str], list[int]], max_length: int, *,
                  bos_id: int | None, min_tokens: int = 1, limit: int | None = None) -> DatasetTexts:
    """The first ``limit`` rows of at least ``min_tokens`` tokens, one text each (truncated to ``max_length``).

    Raises
    ------
    SniffError
        No row long enough; or two texts with the same id (naming it).
    """
    head = [] if bos_id is None else [int(bos_id)]
    body = max_length - len(head)
    windows, numbers, idents = [], [], []
    seen: dict = {}
    read = 0
    for number, ident, text in dataset.rows():
        if limit is not None and len(windows) >= limit:
            break
        read += 1
        if text is None or not text.strip():
            continue
        ids = list(encode(text))
        if len(ids) + len(head) < min_tokens:
            continue
        if ident is not None:
            if ident in seen:
                raise SniffError(f"{dataset._where()}: the id column {dataset.request.id_column!r} holds {ident!r} "
                                 f"twice (rows {seen[ident]} and {number}): ids must name one text each")
            seen[ident] = number
        windows.append(np.asarray(head + ids[:body], dtype=np.int64))
        numbers.append(number)
        idents.append(ident)
    if not windows:
        raise SniffError(f"{dataset._where()}: no row of at least {min_tokens} tokens in its {read} rows"
                         + (" (lower --min-tokens)" if min_tokens > 1 else ""))
    ints = dataset.request.id_column is not None and all(isinstance(i, int) and 0 <= i <= INT32_MAX for i in idents)
    if dataset.request.id_column is None:
        if max(numbers) > INT32_MAX:
            raise SniffError(f"{dataset._where()}: row numbers beyond int32; give an --id-column")
        example_ids, ids, meaning = np.asarray(numbers, np.int32), None, "the row number in the split"
    elif ints:
        example_ids, ids, meaning = np.asarray(idents, np.int32), None, f"the {dataset.request.id_column!r} column"
    else:
        example_ids = np.arange(len(windows), dtype=np.int32)
        ids, meaning = list(idents), (f"the text's ordinal in the capture; capture.texts.ids[example_id] is its "
                                      f"{dataset.request.id_column!r}")
    record = {
        "source": "dataset",
        "dataset": dataset.request.repo,
        "config": dataset.config,
        "split": dataset.split,
        "revision": dataset.request.revision or "main",
        "commit": dataset.commit,
        "files": list(dataset.opened),
        "text_column": dataset.request.text_column,
        "id_column": dataset.request.id_column,
        "min_tokens": min_tokens,
        "example_id": meaning,
        "row_numbers": [int(n) for n in numbers],
    }
    if ids is not None:
        record["ids"] = ids
    return DatasetTexts(windows, example_ids, ids, record)


__all__ = ["DatasetRequest", "DatasetTexts", "HubDataset", "dataset_texts", "split_files"]

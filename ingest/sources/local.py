"""A dataset in a local folder (SPEC §3.2 "Local directory"), as a :class:`~qkdb.ingest.sources.Source`."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from qkdb.ingest.sources.layout import discover, read_metadata
from qkdb.ingest.sources.plan import HeadGroup, plan_groups
from qkdb.ingest.sources.registry import ModelSpec
from qkdb.ingest.sources.select import HeadSelection

# What a dataset's qkdb_dataset.json may say about who wrote it, recorded as the run's source.
PRODUCERS = ("simulate", "sniff")


@dataclass
class LocalSource:
    """The head files of a folder in the sniffed-qk layout, planned once; nothing to download."""

    root: Path
    plan: list[HeadGroup]
    ignored: list[str] = field(default_factory=list)
    kind: str = "path"
    revision: str | None = None
    commit: str | None = None

    @property
    def location(self) -> str:
        return str(self.root.resolve())

    @property
    def planned(self) -> list[tuple[int, int]]:
        return [(q.layer, q.head) for g in self.plan for q in g.queries]

    def fingerprint(self) -> str:
        """Identifies the files an ingest reads: path, size and modification time of each."""
        h = hashlib.sha256()
        for g in self.plan:
            for f in (g.key, *g.queries):
                st = f.path.stat()
                h.update(f"{f.path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def groups(self) -> Iterator[HeadGroup]:
        return iter(self.plan)

    def report_to(self, progress: Callable[..., None], model: str) -> None:
        """Nothing to report: the files are already here."""


def open_local(root: str | os.PathLike, spec: ModelSpec, selection: HeadSelection | None = None, *,
               discovery=None) -> LocalSource:
    """Discover a local dataset (unless ``discovery`` is its discovery already) and plan the ingest of the selected heads (:class:`InputError` when it cannot)."""
    root = Path(root)
    discovery = discovery if discovery is not None else discover(root)
    producer = read_metadata(root).get("source") if root.is_dir() else None
    return LocalSource(
        root, plan_groups(discovery, spec.gqa_ratio, selection), discovery.ignored,
        kind=producer if producer in PRODUCERS else "path",
    )

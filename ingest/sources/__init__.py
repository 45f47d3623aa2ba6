"""Where datasets come from: the sniffed-qk layout, the model registry, and the sources an ingest reads.

A source is anything that can say which query heads it holds and hand the engine their files, a
GQA group at a time, as soon as they are local (:class:`Source`). Two exist: a local folder
(:mod:`.local`) and a branch of a Hugging Face dataset (:mod:`.hub`). Adding one is one module
that implements the protocol, plus its case in :func:`open_source`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qkdb.ingest.sources.plan import HeadGroup
    from qkdb.ingest.sources.registry import ModelSpec
    from qkdb.ingest.sources.select import HeadSelection


class Source(Protocol):
    """What the engine needs of a dataset, whichever kind it is."""

    kind: str  # recorded as ingest_runs.source: 'path', 'hub', 'simulate', 'sniff'
    revision: str | None  # asked for (a Hub branch), if any
    commit: str | None  # resolved to, if any

    @property
    def location(self) -> str:
        """A folder or a repo id (ingest_runs.location)."""

    @property
    def planned(self) -> list[tuple[int, int]]:
        """Every (layer, query head) the groups will hold, known before any is read."""

    @property
    def ignored(self) -> list[str]:
        """Folders that are not in the layout (reported as notes)."""

    def fingerprint(self) -> str:
        """Identifies exactly the data an ingest reads: the same fingerprint, the same numbers."""

    def groups(self) -> Iterable[HeadGroup]:
        """The planned groups, each once its files are local (a Hub source downloads meanwhile)."""

    def report_to(self, progress: Callable[..., None], model: str) -> None:
        """Send ``progress`` events about getting the files (download bytes), if there are any."""


def open_source(
    spec: ModelSpec,
    selection: HeadSelection | None = None,
    *,
    path: str | os.PathLike | None = None,
    repo: str | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    discovery=None,
    listing=None,
) -> Source:
    """A local folder when ``path`` is given, else the model's branch of a Hub dataset (listed now, downloaded later).

    ``discovery`` is ``path``'s :func:`~qkdb.ingest.sources.layout.discover` when the caller has it already;
    ``listing`` the Hub branch's :func:`~qkdb.ingest.sources.hub.branch_listing`.
    """
    if path is not None:
        from qkdb.ingest.sources.local import open_local

        return open_local(path, spec, selection, discovery=discovery)
    from qkdb.ingest.sources import hub

    return hub.open_source(repo, revision, spec, selection, endpoint=endpoint, cache_dir=cache_dir, token=token,
                           listing=listing)

"""Planning an ingest of a dataset: its query heads grouped by the key head they read (GQA).

A :class:`HeadGroup` is one key head and the query heads that read it, so that the engine reads
each key file once for the whole group. Every source plans the same way, whether its files are
local or still on the Hub.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkdb.errors import InputError
from qkdb.ingest.sources.layout import Discovery, HeadFile, head_dir_name
from qkdb.ingest.sources.select import HeadSelection


@dataclass(frozen=True)
class HeadGroup:
    layer: int
    kv_head: int
    key: HeadFile
    queries: tuple[HeadFile, ...]


def plan_groups(discovery: Discovery, gqa_ratio: int, selection: HeadSelection | None = None) -> list[HeadGroup]:
    """Group the selected query heads by their key head (``head // gqa_ratio``).

    Raises :class:`InputError` naming the key folders the mapping needs but the dataset lacks.
    """
    if gqa_ratio < 1:
        raise InputError(f"gqa_ratio must be >= 1, got {gqa_ratio}")
    selection = selection or HeadSelection()
    queries = [hf for (l, h), hf in sorted(discovery.queries.items()) if selection.matches(l, h)]
    if not queries:
        raise InputError(f"{discovery.root}: no query heads match the selection")
    groups: dict[tuple[int, int], list[HeadFile]] = {}
    for hf in queries:
        groups.setdefault((hf.layer, hf.head // gqa_ratio), []).append(hf)
    missing = sorted(head_dir_name(l, g, "k") for (l, g) in groups if (l, g) not in discovery.keys)
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise InputError(
            f"{discovery.root}: key head folder(s) missing for the GQA mapping "
            f"(key head = query head // {gqa_ratio}): {shown}; check --gqa-ratio"
        )
    return [HeadGroup(l, g, discovery.keys[(l, g)], tuple(qs)) for (l, g), qs in sorted(groups.items())]

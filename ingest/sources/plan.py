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
    missing = sorted((lg, qs) for lg, qs in groups.items() if lg not in discovery.keys)
    if missing:
        raise InputError(_missing_keys(discovery, missing, gqa_ratio))
    return [HeadGroup(l, g, discovery.keys[(l, g)], tuple(qs)) for (l, g), qs in sorted(groups.items())]


def _missing_keys(discovery: Discovery, missing: list, gqa_ratio: int) -> str:
    """The message for key folders the GQA mapping needs: each missing folder and the query heads that need it, then what to do.

    A wrong ratio and a file missing from the capture look alike from one folder; the message says
    which it is: when another ratio finds a key folder for every query head, it names that ratio,
    else the dataset lacks the file.
    """
    def needs(lg, qs) -> str:
        names = [q.name for q in qs]
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return f"{head_dir_name(lg[0], lg[1], 'k')} (read by {shown})"

    listed = "; ".join(needs(lg, qs) for lg, qs in missing[:6]) + (
        f"; and {len(missing) - 6} more folders" if len(missing) > 6 else "")
    n = len(missing)
    text = (f"{discovery.root}: key head folder{'s' if n > 1 else ''} missing: {listed} "
            f"(query head h reads key head h // {gqa_ratio})")
    # A ratio under which the dataset's query heads read exactly the key folders it holds.
    every = list(discovery.queries)
    fits = [r for r in range(1, max(h for _, h in every) + 2)
            if r != gqa_ratio and {(l, h // r) for l, h in every} == set(discovery.keys)]
    if fits:
        return (text + f"; with --gqa-ratio {fits[0]} the query heads read exactly the key folders there are: is "
                f"the GQA ratio {gqa_ratio} right (--gqa-ratio, the registry, the dataset's facts)?")
    return (text + f"; the dataset lacks {'these files' if n > 1 else 'this file'}: capture "
            f"{'them' if n > 1 else 'it'}, or ingest the other heads with --heads")

"""Captions: what a figure shows on *this* data, with numbers computed from the rows it draws.

A builder attaches its caption to the chart it returns (``usermeta.qkdb.caption``), so the caption
travels with the spec and is computed from the same query results as the marks. The report prints
it under the figure; ``qkdb chart … -o x.json`` keeps it in the spec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import altair as alt


def attach(chart: alt.TopLevelMixin, *sentences: str | None) -> alt.TopLevelMixin:
    """``chart`` with the non-empty ``sentences`` as its caption."""
    text = " ".join(s.strip() for s in sentences if s and s.strip())
    meta = chart.usermeta if isinstance(chart.usermeta, dict) else {}
    # Set in place: .properties() would deep-copy the whole chart (~60 ms for a 30-panel collage).
    chart.usermeta = {**meta, "qkdb": {**meta.get("qkdb", {}), "caption": text}}
    return chart


def text_of(spec: dict) -> str:
    """The caption of a built spec ('' when the builder attached none)."""
    return (spec.get("usermeta") or {}).get("qkdb", {}).get("caption", "")


def span(values: Iterable[float | None], fmt: Callable[[float], str]) -> str:
    """'lo–hi' over the values that exist ('n/a' when none; one number when they agree)."""
    got = [v for v in values if v is not None]
    if not got:
        return "n/a"
    lo, hi = fmt(min(got)), fmt(max(got))
    if lo == hi:
        return lo
    if lo.endswith("%") and hi.endswith("%"):
        lo = lo[:-1]  # "21–55%", not "21%–55%"
    return f"{lo}–{hi}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 head', '3 heads', '6,900 heads'."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def share(k: int, n: int) -> str:
    """'all 4', 'none of the 4', '3 of 4'."""
    if n and k == n:
        return f"all {n}" if n > 2 else ("both" if n == 2 else "the one")
    if k == 0:
        return f"none of the {n}"
    return f"{k} of {n}"

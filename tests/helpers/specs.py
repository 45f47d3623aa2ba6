"""Walking a Vega-Lite spec in tests."""

from __future__ import annotations

from collections.abc import Iterator


def nodes(node) -> Iterator[dict]:
    """Every object of a spec (a dict), depth first, the spec itself first."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from nodes(v)
    elif isinstance(node, list):
        for v in node:
            yield from nodes(v)

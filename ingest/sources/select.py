"""Which heads to ingest: ``--heads 0-3`` (layers), ``--heads 5`` or ``--heads l03h07,l05h01``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from qkdb.errors import InputError

_HEAD = re.compile(r"^l(\d+)h(\d+)q?$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class HeadSelection:
    """A set of layers and/or explicit (layer, head) pairs; empty means every head."""

    layers: frozenset[int] = frozenset()
    heads: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def parse(cls, text: str | None) -> "HeadSelection":
        if text is None or not text.strip():
            return cls()
        layers: set[int] = set()
        heads: set[tuple[int, int]] = set()
        for item in (p.strip().lower() for p in text.split(",")):
            if not item:
                continue
            if m := _HEAD.match(item):
                heads.add((int(m.group(1)), int(m.group(2))))
            elif m := _RANGE.match(item):
                lo = int(m.group(1))
                hi = int(m.group(2)) if m.group(2) is not None else lo
                if hi < lo:
                    raise InputError(f"--heads: empty layer range {item!r}")
                layers.update(range(lo, hi + 1))
            else:
                raise InputError(
                    f"--heads: cannot read {item!r}; use layers like 0-3 or 5, or heads like l03h07"
                )
        return cls(frozenset(layers), frozenset(heads))

    @property
    def everything(self) -> bool:
        return not self.layers and not self.heads

    def matches(self, layer: int, head: int) -> bool:
        return self.everything or layer in self.layers or (layer, head) in self.heads

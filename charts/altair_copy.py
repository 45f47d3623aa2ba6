"""Altair's deep copies of a chart, made without re-running every chart's constructor.

Altair copies a chart each time charts are layered, concatenated, faceted, given properties or
converted to a dict. Its deep copy rebuilds every schema object by calling its class, and the
constructor of a layered or concatenated chart deep-copies its subcharts once more (to lift their
parameters), so each level of nesting copies everything below it again: on the report's figures,
1.6 million copy calls at 140,000 heads, a third of the figures' Python time, none of it changing
a value.

Inside :func:`cheap_copies` a deep copy builds the same objects directly: the same class, the same
arguments and keyword values, copied recursively. Every attribute of an Altair schema object lives in
those two (``SchemaBase.__setattr__`` stores into ``_kwds``), and a chart given to the constructor
of its own class comes out unchanged (its data and parameters are already combined), so the copy
equals Altair's; ``tests/charts/test_altair_copy.py`` compares every figure's spec built both ways.
Where Altair's internals differ from what this expects (another major version), nothing is changed.
"""

from __future__ import annotations

import contextlib
import threading

_LOCK = threading.Lock()
_DEPTH = 0
_ORIGINAL = None


def _schemapi():
    try:
        from altair.utils import schemapi
    except ImportError:  # pragma: no cover - altair is a dependency
        return None
    ok = callable(getattr(schemapi, "_deep_copy", None)) and hasattr(schemapi, "SchemaBase")
    return schemapi if ok else None


def _make_copier(schemapi):
    base = schemapi.SchemaBase
    debug_mode = schemapi.debug_mode
    new = object.__new__
    setattr_ = object.__setattr__

    def copy(obj, by_ref):
        if isinstance(obj, base):
            copier = getattr(obj, "__deepcopy__", None)
            if copier is not None:
                with debug_mode(False):
                    return copier(obj)
            out = new(type(obj))
            setattr_(out, "_args", tuple(copy(a, by_ref) for a in obj._args))
            setattr_(out, "_kwds", {k: (v if k in by_ref else copy(v, by_ref)) for k, v in obj._kwds.items()})
            return out
        if isinstance(obj, list):
            return [copy(v, by_ref) for v in obj]
        if isinstance(obj, dict):
            return {k: (v if k in by_ref else copy(v, by_ref)) for k, v in obj.items()}
        return obj

    return copy


@contextlib.contextmanager
def cheap_copies():
    """Altair's deep copies without constructor calls while inside (nested uses share the outer one)."""
    global _DEPTH, _ORIGINAL
    schemapi = _schemapi()
    if schemapi is None:
        yield
        return
    with _LOCK:
        if _DEPTH == 0:
            _ORIGINAL = schemapi._deep_copy
            schemapi._deep_copy = _make_copier(schemapi)
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                schemapi._deep_copy = _ORIGINAL
                _ORIGINAL = None

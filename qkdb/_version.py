"""qkdb's installed version: a module of its own, so that any layer can record it without importing the API."""

from __future__ import annotations


def version() -> str:
    """The installed distribution's version (``0+unknown`` when running from a bare source tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _v

    try:
        return _v("qkdb")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"

"""Rendering and saving figures: png, svg, pdf (vl-convert), html (self-contained), json (the spec).

Everything renders offline: vl-convert bundles Vega, Vega-Lite and the fonts' layout engine, and
the HTML inlines the JavaScript bundle instead of loading it from a CDN.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import altair as alt

from qkdb.errors import ChartError, os_cause

FORMATS = ("png", "svg", "pdf", "html", "json")
DEFAULT_SCALE = 2.0  # PNG pixels per CSS pixel: sharp on screens and in papers


def vl_version() -> str | None:
    """The Vega-Lite version Altair writes (e.g. '6.4'), if vl-convert has it; else vl-convert's default."""
    import vl_convert as vlc

    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None


def to_spec(chart: alt.TopLevelMixin) -> dict:
    """The Vega-Lite spec.

    Not validated against Altair's JSON schema: that walks the whole spec, rows included (~0.35 s
    of a 4,000-head scatter, more than qkdb's queries and the figure together); the test suite
    validates every figure's spec, static and interactive, and vl-convert refuses a malformed one.
    """
    from qkdb.charts.altair_copy import cheap_copies

    with cheap_copies():
        return chart.to_dict(validate=False)


def format_of(path: str | os.PathLike) -> str:
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ChartError(f"cannot write {str(path)!r}: the extension picks the format, one of .{', .'.join(FORMATS)}")
    return fmt


def render(chart: alt.TopLevelMixin | dict, fmt: str, scale: float = DEFAULT_SCALE, title: str | None = None) -> bytes:
    """The figure in ``fmt`` as bytes."""
    import vl_convert as vlc

    spec = chart if isinstance(chart, dict) else to_spec(chart)
    version = vl_version()
    try:
        if fmt == "png":
            return vlc.vegalite_to_png(spec, vl_version=version, scale=scale)
        if fmt == "svg":
            return vlc.vegalite_to_svg(spec, vl_version=version).encode()
        if fmt == "pdf":
            return vlc.vegalite_to_pdf(spec, vl_version=version)
    except ValueError as exc:  # vl-convert reports spec errors as ValueError
        raise ChartError(f"rendering the figure failed: {exc}") from None
    if fmt == "html":
        from qkdb.charts.report import figure_page

        return figure_page(spec, title=title or title_text(spec)).encode()
    if fmt == "json":
        return (json.dumps(spec, indent=2, allow_nan=False) + "\n").encode()
    raise ChartError(f"unknown figure format {fmt!r}; use one of {', '.join(FORMATS)}")


def title_text(spec: dict, default: str = "qkdb figure") -> str:
    """A spec's title as one line of text (a title object's text, a list's lines joined), else ``default``."""
    t = spec.get("title")
    if isinstance(t, dict):
        t = t.get("text")
    if isinstance(t, list):
        t = " ".join(x for x in t if isinstance(x, str))
    return t if isinstance(t, str) and t else default


def check_output(path: str | os.PathLike) -> Path:
    """``path`` when its folder exists; a "not found" error naming both otherwise (said before any work)."""
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise ChartError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist", kind="not_found")
    return path


def save(chart: alt.TopLevelMixin | dict, path: str | os.PathLike, scale: float = DEFAULT_SCALE) -> Path:
    """Write the figure to ``path``; the extension picks the format."""
    path = check_output(path)  # before the render (seconds): a figure that cannot be written is not worth drawing
    data = render(chart, format_of(path), scale=scale)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # (on a read-only file system even this refuses)
            tmp.unlink(missing_ok=True)
        kind, cause = os_cause(exc)
        raise ChartError(f"cannot write {str(path)!r}: {cause}", kind=kind) from None
    return path

"""Reference lines drawn from the chart's own data, so they also work inside facets.

A layer in a faceted chart inherits the facet's rows; aggregating them to one row first draws
each line once per panel instead of once per data row.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt

from qkdb.charts.data import scalar


def taxonomy_thresholds(con) -> tuple[float, float]:
    """(high, low) from the ``params`` view: the thresholds the taxonomy view is using."""
    high = scalar(con, "select taxonomy_high from params")
    low = scalar(con, "select taxonomy_low from params")
    return float(high), float(low)


def _lines(base: alt.Chart, channel: str, at: Sequence[float], field: str, **mark) -> alt.Chart:
    style = {"color": "#777777", "strokeDash": [4, 3], "strokeWidth": 1, **mark}
    enc = {channel: alt.X(f"{field}:Q") if channel == "x" else alt.Y(f"{field}:Q")}
    return (
        base.transform_aggregate(_n="count()")
        .transform_calculate(**{field: f"[{', '.join(repr(float(v)) for v in at)}]"})
        .transform_flatten([field])
        .mark_rule(**style)
        .encode(**enc)
    )


def vlines(base: alt.Chart, at: Sequence[float], field: str = "_xline", **mark) -> alt.Chart:
    """Vertical rules at the given x values."""
    return _lines(base, "x", at, field, **mark)


def hlines(base: alt.Chart, at: Sequence[float], field: str = "_yline", **mark) -> alt.Chart:
    """Horizontal rules at the given y values."""
    return _lines(base, "y", at, field, **mark)

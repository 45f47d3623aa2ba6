"""The charts layer: one Altair spec per seed figure, built only from warehouse query results, and the report.

Rooms::

    figures/       one module per figure of SPEC §7 (and the parts they share: collages, heatmaps, series)
    registry.py    every figure by name, with its seed figure and one line
    api.py         ``chart(name, con, ...)``: a figure from a warehouse connection
    data.py        the queries figures share (which models, series, heads)
    style.py       fonts, sizes, palettes; caption.py: captions computed from the data
    render.py      PNG, SVG, PDF, HTML, JSON through vl-convert
    report.py      the self-contained HTML report (report_html.py: its page; claims.py: which
                   figures show which claims; explorer.py: the linked head explorer;
                   report_split.py: the second process the CLI forks to build part of it)
    notebook.py    the Altair renderer "qkdb": charts inline in notebooks with their JavaScript (offline)

Charts read the warehouse through SQL on a connection they are given; they never open one.
This package is the layer's facade: the names below are what the rest of qkdb uses, each loaded
on first use (altair and vl-convert only when a figure is asked for).
"""

from qkdb._lazy import facade

__getattr__, __dir__ = facade(__name__, {
    "chart": "qkdb.charts.api",
    "registry": "module:qkdb.charts.registry",
    "render": "module:qkdb.charts.render",
    "build_report": "qkdb.charts.report",
    "report_split": "module:qkdb.charts.report_split",
    "claims": "module:qkdb.charts.claims",
})

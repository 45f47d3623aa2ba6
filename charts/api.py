"""A seed figure as an Altair chart, built from a warehouse connection (``qkdb.chart`` wraps it).

>>> import qkdb
>>> con = qkdb.connect()
>>> qkdb.chart("bias-vs-separation", con)                       # displays inline in Jupyter
>>> qkdb.chart("pca-collage", con, models="llama3.2-3b", head="12.5").save("collage.svg")
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts import registry, style


def chart(
    name: str,
    con: duckdb.DuckDBPyConnection,
    *,
    models: str | list[str] | None = None,
    series: str | None = None,
    head: str | tuple[int, int] | list | None = None,
    configure: bool = True,
    **options,
) -> alt.TopLevelMixin:
    """Build the figure ``name`` (see ``qkdb chart --list``) from the warehouse.

    Parameters
    ----------
    name : str
        Figure name from SPEC §7, e.g. ``"bias-vs-separation"``.
    con : duckdb connection
        A warehouse connection, e.g. :func:`qkdb.connect` (``qkdb.chart`` opens one when not given).
    models : str or list of str, optional
        Models to show (default: every standalone model and the latest checkpoint of each series).
        Per-model figures (the collages) take one.
    series : str, optional
        Training series of the ``series-*`` figures (default: the first ingested).
    head : str or (layer, head), optional
        ``"12.5"`` / ``"l12h05"``: the head(s) of a collage (default: the seeds' random.Random(42) sample).
    configure : bool
        Attach qkdb's font and sizes (a configured chart cannot be placed in another compound chart;
        pass False to compose figures yourself).

    Returns
    -------
    altair chart (``Chart``, ``LayerChart``, ``FacetChart`` or ``ConcatChart``)

    Raises
    ------
    qkdb.errors.ChartError
        Unknown figure, or the ingested data cannot support it (the message says what to ingest).
    """
    figure = registry.get(name)
    built = figure.build(con, models=models, series=series, head=head, **options)
    meta = built.usermeta if isinstance(built.usermeta, dict) else {}
    # In place, keeping the builder's caption: the builder's chart is ours, and a copy costs.
    built.usermeta = {**meta, "qkdb": {**meta.get("qkdb", {}), "figure": figure.name, "seed_figure": figure.seed_figure}}
    return style.configure(built) if configure else built

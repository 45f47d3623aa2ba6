"""qkdb: a DuckDB warehouse of the positional geometry of LLM attention queries and keys.

>>> import qkdb
>>> con = qkdb.connect()            # read-only, every view ready
>>> con.sql("from head_metrics limit 5")
"""

from qkdb.api import IngestResult, connect, info, ingest, remove, version
from qkdb.errors import QkdbError

__all__ = ["IngestResult", "QkdbError", "chart", "connect", "info", "ingest", "remove", "version"]
__version__ = version()


def chart(name: str, con=None, **options):
    """A seed figure as an Altair chart (names: ``qkdb chart --list``); displays inline in notebooks."""
    from qkdb.charts.api import chart as _chart  # altair loads only when a figure is asked for

    return _chart(name, con, **options)

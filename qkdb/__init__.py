"""qkdb: a DuckDB warehouse of the positional geometry of LLM attention queries and keys.

>>> import qkdb
>>> con = qkdb.connect()            # read-only, every view ready
>>> con.sql("from head_metrics limit 5")
"""

from qkdb.api import IngestResult, connect, info, ingest, remove, version
from qkdb.errors import QkdbError

__all__ = ["IngestResult", "QkdbError", "connect", "info", "ingest", "remove", "version"]
__version__ = version()

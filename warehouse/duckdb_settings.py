"""DuckDB settings changed for one piece of work and given back after it.

DuckDB keeps one database instance a file and a process: ``threads`` and ``memory_limit`` set on
one connection are every connection's to that file, so whatever sets them must restore them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


def _literal(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


@contextlib.contextmanager
def temporarily(con: duckdb.DuckDBPyConnection, **settings: object) -> Iterator[None]:
    """Set ``settings`` (a value of None leaves that one as it is) on ``con``'s database; the old values back afterwards."""
    wanted = {k: v for k, v in settings.items() if v is not None}
    if not wanted:
        yield
        return
    before = dict(zip(wanted, con.execute(
        "select " + ", ".join(f"current_setting({_literal(n)})" for n in wanted)).fetchall()[0]))
    try:
        for name, value in wanted.items():
            con.execute(f"set {name} = {_literal(value)}")
        yield
    finally:
        for name, value in before.items():
            with contextlib.suppress(Exception):  # (a connection closing under an error: nothing to restore)
                # Back to the default when it was that (a memory limit read back as '18.8 GiB' and
                # set again would lose its last digits every time), else to what it was.
                con.execute(f"reset {name}")
                if con.execute(f"select current_setting({_literal(name)})").fetchall()[0][0] != value:
                    con.execute(f"set {name} = {_literal(value)}")


def spills_to_disk(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether a memory limit on ``con`` makes DuckDB spill to a folder of its database's.

    A database file's temporary folder is ``<file>.tmp``; an in-memory database's is ``.tmp`` in
    the working directory, where a capped query would leave a folder behind.
    """
    from pathlib import PurePath

    folder = con.execute("select current_setting('temp_directory')").fetchall()[0][0]
    return bool(folder) and PurePath(folder).is_absolute()

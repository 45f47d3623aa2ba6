"""Finding views from ``sql/*.sql``: created in dependency order, idempotently.

Each file is one plain DuckDB SELECT; the view's name is the file's stem. Header comments:
``-- <one-line description>`` (first line), ``-- Depends: a, b`` (views it reads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import duckdb

_DEPENDS = re.compile(r"^--\s*Depends:\s*(.*)$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class ViewFile:
    name: str
    sql: str
    description: str
    depends: tuple[str, ...]


def load_view_files() -> list[ViewFile]:
    """Every shipped view, in an order where each comes after the views it depends on."""
    views = {}
    for entry in resources.files("qkdb.sql").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text()
        first = next((ln for ln in text.splitlines() if ln.startswith("--")), "--")
        deps = tuple(d.strip() for m in _DEPENDS.findall(text) for d in m.split(",") if d.strip())
        name = entry.name[:-4]
        views[name] = ViewFile(name, text, first.lstrip("- ").strip(), deps)
    ordered: list[ViewFile] = []
    seen: set[str] = set()

    def visit(name: str, stack: tuple[str, ...] = ()) -> None:
        if name in seen or name not in views:
            return
        if name in stack:
            raise ValueError(f"circular view dependency: {' -> '.join(stack + (name,))}")
        for dep in views[name].depends:
            visit(dep, stack + (name,))
        seen.add(name)
        ordered.append(views[name])

    for name in sorted(views):
        visit(name)
    return ordered


def _body(sql: str) -> str:
    return sql.strip().rstrip(";").strip()


def create_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Create or replace every finding view on a writable connection; returns their names."""
    names = []
    for view in load_view_files():
        con.execute(f'create or replace view "{view.name}" as\n{_body(view.sql)}')
        if view.description:
            con.execute(f"comment on view \"{view.name}\" is '{view.description.replace(chr(39), chr(39) * 2)}'")
        names.append(view.name)
    return names

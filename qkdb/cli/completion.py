"""Tab completion for `qkdb shell`: SQL keywords, functions, tables, views and their columns.

The names come from the open connection's own catalog (``duckdb_keywords()``,
``duckdb_functions()``, ``duckdb_columns()``), read once when Tab is first pressed and again only
after a statement that may have changed them (e.g. a temporary view). DuckDB's
``sql_auto_complete`` would know the grammar better, but it lives in the ``autocomplete``
extension, which the Python wheel does not carry and the read-only shell cannot fetch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

# Word boundaries for readline: not '.' (table.column, .commands), '_' or '"' (quoted names).
DELIMS = " \t\n()[]{},;=<>+-*/%|!^&~:'`"
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")
_WORD = re.compile(r'"[^"]*"|[A-Za-z_][A-Za-z0-9_$]*')
# Words after which only a relation makes sense.
_RELATION_BEFORE = {"from", "join", "table", "describe", "summarize"}
# `from heads h`, `join pca as p`: the relation and its alias.
_ALIAS = re.compile(r'\b(?:from|join)\s+((?:"[^"]+"|\w+)(?:\.(?:"[^"]+"|\w+))*)(?:\s+(?:as\s+)?(\w+))?', re.I)
# Words that may follow a relation in FROM and so are not its alias.
_NOT_ALIAS = {"where", "group", "order", "limit", "join", "left", "right", "inner", "outer", "full", "cross",
              "natural", "positional", "asof", "anti", "semi", "on", "using", "union", "except", "intersect",
              "having", "window", "qualify", "offset", "select", "pivot", "unpivot", "tablesample", "as"}


def _ident(name: str) -> str:
    """``name`` as typed in SQL: quoted unless it is a plain lower-case identifier."""
    return name if _PLAIN.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def _unquote(word: str) -> str:
    return word[1:-1].replace('""', '"') if len(word) > 1 and word[0] == word[-1] == '"' else word.lower()


@dataclass
class Names:
    """What can be completed: keywords, function names, and every relation with its columns."""

    keywords: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    table_functions: list[str] = field(default_factory=list)
    relations: dict[str, list[str]] = field(default_factory=dict)  # name as stored -> its columns

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> Names:
        """Read the names from ``con``'s catalog (a few milliseconds)."""
        keywords = [r[0].lower() for r in con.execute("select keyword_name from duckdb_keywords()").fetchall()]
        funcs = con.execute(
            "select distinct function_name, function_type in ('table', 'table_macro') from duckdb_functions() "
            "where function_type <> 'pragma' and function_name not like '\\_\\_%' escape '\\'"
        ).fetchall()
        relations: dict[str, list[str]] = {}
        # Views and tables of every attached database and the session's temporary ones; the system
        # catalog's own views (duckdb_*) are reached as table functions.
        for table, column in con.execute(
            "select table_name, column_name from duckdb_columns() where not internal "
            "order by database_name, schema_name, table_name, column_index"
        ).fetchall():
            relations.setdefault(table, []).append(column)
        return cls(
            keywords=sorted(set(keywords)),
            functions=sorted({f for f, _ in funcs if _PLAIN.fullmatch(f)}),
            table_functions=sorted({f for f, is_table in funcs if is_table and _PLAIN.fullmatch(f)}),
            relations=relations,
        )

    def columns_of(self, relation: str) -> list[str]:
        key = _unquote(relation.split(".")[-1])
        for name, cols in self.relations.items():
            if name == key or name.lower() == key.lower():
                return cols
        return []


def _aliases(statement: str, names: Names) -> dict[str, str]:
    """Alias (and relation name) -> relation, for the relations named after FROM/JOIN in ``statement``."""
    found: dict[str, str] = {}
    for m in _ALIAS.finditer(statement):
        rel, alias = m.group(1), m.group(2)
        if not names.columns_of(rel):
            continue
        found[_unquote(rel.split(".")[-1])] = rel
        if alias and alias.lower() not in _NOT_ALIAS:
            found[alias.lower()] = rel
    return found


def _cased(words: Sequence[str], typed: str) -> list[str]:
    # A keyword typed in capitals completes in capitals.
    return [w.upper() for w in words] if typed.isupper() else list(words)


def sql_candidates(names: Names, statement: str, word: str, after: str = "") -> list[str]:
    """Completions of ``word``, the word being typed at the end of ``statement`` (the text before it).

    ``after``, the rest of the statement past the word (when the cursor went back into a line),
    helps to know the relations and aliases the statement names.

    After FROM or JOIN: relations and table functions. ``x.`` with ``x`` a relation or an alias
    of one in the statement: ``x.column``. Elsewhere: keywords, functions, relations and columns —
    those of the relations the statement names, or every column when it names none yet.
    """
    low = word.lower()
    if "." in word:
        qualifier, _, part = word.rpartition(".")
        rel = _aliases(f"{statement} {after}", names).get(_unquote(qualifier), qualifier)
        cols = names.columns_of(rel)
        return sorted(f"{qualifier}.{_ident(c)}" for c in cols if _ident(c).lower().startswith(part.lower()))
    words = _WORD.findall(statement)
    relations = [_ident(r) for r in names.relations]
    if words and words[-1].lower() in _RELATION_BEFORE:
        pool = relations + names.table_functions
    else:
        named = set(_aliases(f"{statement} {after}", names).values())
        columns = {_ident(c) for r in named for c in names.columns_of(r)} if named else {
            _ident(c) for cols in names.relations.values() for c in cols
        }
        pool = _cased(names.keywords, word) + names.functions + relations + sorted(columns)
    return sorted({w for w in pool if w.lower().startswith(low)})


class Completer:
    """A readline completer for the shell: dot commands at the start of a statement, SQL elsewhere.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The shell's connection; its catalog provides the names.
    commands : sequence of str
        The dot commands offered at the start of a statement.
    arguments : dict
        Dot command -> the function giving its argument's candidates (given the Names).
    pending : callable
        The lines already entered of the statement being typed (for aliases and context).
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        commands: Sequence[str],
        arguments: dict[str, Callable[[Names], list[str]]],
        pending: Callable[[], list[str]],
    ):
        self.con = con
        self.commands = list(commands)
        self.arguments = arguments
        self.pending = pending
        self._names: Names | None = None
        self._matches: list[str] = []

    @property
    def names(self) -> Names:
        if self._names is None:
            self._names = Names.load(self.con)
        return self._names

    def invalidate(self) -> None:
        """Read the names again at the next Tab (a statement may have created or dropped some)."""
        self._names = None

    def candidates(self, line: str, begidx: int, endidx: int) -> list[str]:
        """Completions of ``line[begidx:endidx]`` in the line being edited."""
        word, before = line[begidx:endidx], line[:begidx]
        pending = self.pending()
        if not pending and not before.strip() and word.startswith("."):
            return [c for c in self.commands if c.startswith(word.lower())]
        if not pending and before.lstrip().startswith("."):
            command = before.split()[0].lower()
            if len(before.split()) == 1 and command in self.arguments:
                return [a for a in self.arguments[command](self.names) if a.lower().startswith(word.lower())]
            return []
        return sql_candidates(self.names, "\n".join([*pending, before]), word, line[endidx:])

    def complete(self, text: str, state: int) -> str | None:
        """readline's completer protocol: the ``state``-th completion of ``text``."""
        if state == 0:
            import readline

            try:
                found = self.candidates(readline.get_line_buffer(), readline.get_begidx(), readline.get_endidx())
            except Exception:  # a failed lookup offers nothing rather than losing the line being typed
                found = []
            # Python's readline appends nothing to a completed word: the space says it is complete.
            self._matches = [f"{m} " for m in found]
        return self._matches[state] if state < len(self._matches) else None


def install(completer: Completer) -> None:
    """Make ``completer`` readline's, with Tab bound to it (GNU readline or libedit)."""
    import readline

    readline.set_completer(completer.complete)
    readline.set_completer_delims(DELIMS)
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")

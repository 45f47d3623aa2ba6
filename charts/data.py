"""Query helpers the figures share: running SQL into chart rows and resolving models, series, heads.

Figures read warehouse tables and finding views only, never raw vectors, and aggregate in SQL,
so a chart's inline data stays far below Altair's 5,000-row limit: per-head scatters sample at
most :data:`MAX_HEAD_ROWS` heads, point scatters at most :data:`POINTS_PER_KIND` points per kind
and head. :func:`rows` enforces the limit so a design mistake fails loudly in tests. Figures with
a row or panel per model draw at most :data:`MAX_MODEL_ROWS` models (:func:`drawn_models`).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import decimal
import math
import random
import re
from dataclasses import dataclass

import altair as alt
import duckdb

from qkdb.charts.style import natural_sorted
from qkdb.errors import ChartError

ROW_LIMIT = 5000  # Altair's MaxRowsError threshold
MAX_HEAD_ROWS = 4000  # per-head scatters sample this many heads at most (deterministically)
POINTS_PER_KIND = 500  # collage points per kind and head
N_COLLAGE = 4  # the seeds' 2x2 collages: random.Random(42).sample(heads, 4)
# Figures with a row or panel per model draw at most this many models by default (:func:`drawn_models`):
# a study of hundreds of checkpoints would otherwise give a figure tens of thousands of pixels tall.
MAX_MODEL_ROWS = 40


def _clean(v):
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v.isoformat()
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


# DuckDB types whose Python values are already JSON-ready.
_CLEAN_TYPES = {"BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                "UINTEGER", "UBIGINT", "VARCHAR"}


_SINGLE: set[int] = set()  # connections inside single_threaded


@contextlib.contextmanager
def single_threaded(con: duckdb.DuckDBPyConnection):
    """Run on one thread without a progress bar, then restore the connection's settings.

    DuckDB's parallel float aggregates differ run to run in the last bits; on one thread the same
    warehouse always gives the same figure, byte for byte (chart queries are small). Nested uses
    of one connection set nothing (the report wraps its ~80 queries in one).
    """
    if id(con) in _SINGLE:
        yield
        return
    threads, bar = con.execute(
        "select current_setting('threads'), current_setting('enable_progress_bar')"
    ).fetchall()[0]
    con.execute("set threads = 1")
    # No progress bar either: DuckDB would draw it on the terminal, into `qkdb chart`'s output.
    _progress_bar(con, False)
    _SINGLE.add(id(con))
    try:
        yield
    finally:
        _SINGLE.discard(id(con))
        con.execute(f"set threads = {int(threads)}")
        _progress_bar(con, bool(bar))


def _progress_bar(con: duckdb.DuckDBPyConnection, on: bool) -> None:
    try:
        con.execute(f"set enable_progress_bar = {'true' if on else 'false'}")
    except duckdb.InvalidInputException:
        # In a Jupyter kernel without ipywidgets DuckDB refuses to change this setting at all, off
        # included ("required package 'ipywidgets' is missing"); it draws no bar there either.
        pass


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None, limit: int = ROW_LIMIT) -> list[dict]:
    """The result of ``sql`` as JSON-ready dicts (NaN/inf become None), computed reproducibly.

    ``limit`` is the most rows the query may return by design (Altair's limit unless the caller
    sends the rows some other way, as the head explorer's CSV text).
    """
    try:
        with single_threaded(con):
            cur = con.execute(sql, params or {})
            names = [d[0] for d in cur.description]
            got = cur.fetchall()
            # Clean only the columns whose type needs it (a report cleans ~0.5 M values otherwise).
            dirty = [i for i, d in enumerate(cur.description) if str(d[1]) not in _CLEAN_TYPES]
            if dirty:
                got = [list(r) for r in got]
                for r in got:
                    for i in dirty:
                        r[i] = _clean(r[i])
            out = [dict(zip(names, r)) for r in got]
    except duckdb.CatalogException as exc:
        raise ChartError(
            f"the warehouse lacks a table or view this figure reads ({str(exc).splitlines()[0]}); "
            "re-open it with this qkdb version (qkdb info) or re-ingest"
        ) from None
    except duckdb.Error as exc:
        raise ChartError(f"the figure's query failed: {str(exc).splitlines()[0]}") from exc
    if len(out) > limit:  # pragma: no cover - a figure design bug, not a user error
        raise AssertionError(f"chart query returned {len(out)} rows (> {limit}); aggregate or sample in SQL")
    return out


# The rows of the figure being built, by name; set by :func:`named_datasets` (Figure.build).
_DATASETS: contextvars.ContextVar[dict[str, list[dict]] | None] = contextvars.ContextVar("qkdb_datasets", default=None)


def values(data: list[dict]) -> dict | alt.Data:
    """Chart data, stored once under the spec's top-level ``datasets``.

    While a figure is built (:func:`named_datasets`), the rows are kept aside and the chart gets
    only their name: Altair deep-copies every subchart each time charts are layered, concatenated
    or given properties, rows included (measured: 1.5 million copy calls, 40% of a report's build
    on 23 models). Outside a build, a plain ``{"values": rows}`` mapping, which Altair moves to
    ``datasets`` without validating the rows value by value, as ``alt.Data(values=...)`` would.
    Not an Arrow table either: pyarrow imports pandas, when installed, on its first conversion of
    Python values (~0.15 s of a `qkdb chart`). :func:`rows` enforces the row limit.
    """
    if not data:
        return alt.Data(values=[])
    store = _DATASETS.get()
    if store is None:
        return {"values": data}
    name = f"qkdb-{len(store)}"
    store[name] = data
    return {"name": name}


class Rows:
    """A dataset's rows as Altair passes them through: neither deep-copied nor converted value by value.

    Altair copies and converts lists and dicts recursively; an object with ``to_dict`` and a
    ``_schema`` (its ``SchemaLike`` protocol) is asked for its value once. The rows are already
    JSON values (:func:`rows` cleans them).
    """

    _schema = {"type": "array"}

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def to_dict(self, *args, **kwargs) -> list[dict]:
        return self.rows


@contextlib.contextmanager
def named_datasets():
    """Collect the rows :func:`values` is given while a figure is built; yields the name → rows dict."""
    store: dict[str, list[dict]] = {}
    token = _DATASETS.set(store)
    try:
        yield store
    finally:
        _DATASETS.reset(token)


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None):
    got = rows(con, sql, params)
    return next(iter(got[0].values())) if got else None


@dataclass(frozen=True)
class ModelInfo:
    model: str
    family: str | None
    series: str | None
    pooled: bool


# Within one build (a figure's, or the report's), the models as first read: a figure asks for them
# two or three times (resolving its models, their families), and each read binds over every model's
# files unless the connection holds a snapshot.
_INGESTED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("qkdb_ingested", default=None)


@contextlib.contextmanager
def one_read_of_models():
    """Let :func:`ingested` read the models once per connection inside (nested uses share the outer one)."""
    if _INGESTED.get() is not None:
        yield
        return
    token = _INGESTED.set({})
    try:
        yield
    finally:
        _INGESTED.reset(token)


def ingested(con: duckdb.DuckDBPyConnection) -> list[ModelInfo]:
    """Every ingested model, ordered by family and by size-aware name."""
    memo = _INGESTED.get()
    if memo is not None and id(con) in memo:
        return list(memo[id(con)])
    got = rows(con, "select model, family, series, pooled from model_pool")
    infos = [ModelInfo(r["model"], r["family"], r["series"], bool(r["pooled"])) for r in got]
    order = {m: i for i, m in enumerate(natural_sorted(i.model for i in infos))}
    infos = sorted(infos, key=lambda i: (i.family or "", order[i.model]))
    if memo is not None:
        memo[id(con)] = infos
    return list(infos)


INGEST_HINT = "ingest one first, e.g. `qkdb ingest --model llama3.2-3b` or `qkdb ingest --path DIR --model NAME`"


def scoped_rows(con: duckdb.DuckDBPyConnection, sql: str, models=None) -> tuple[list[str], list[dict]]:
    """The figure's models and the rows of a finding view: its ``overall`` scope, or those models' own rows.

    ``sql`` has a ``{where}`` placeholder for the scope filter.
    """
    chosen = resolve_models(con, models)
    if models:
        return chosen, rows(con, sql.format(where="scope = 'model' and list_contains($models, model)"), {"models": chosen})
    return chosen, rows(con, sql.format(where="scope = 'overall'"))


def resolve_models(con: duckdb.DuckDBPyConnection, models=None) -> list[str]:
    """The models a cross-model figure shows, in display order.

    Default: the pooled models (every standalone model and the latest checkpoint of each series, as
    the family/overall rows of the finding views count them). Given names must be ingested.
    """
    infos = ingested(con)
    if not infos:
        raise ChartError(f"no model is ingested; {INGEST_HINT}", kind="not_found")
    if not models:
        return [i.model for i in infos if i.pooled]
    if isinstance(models, str):
        models = [models]
    known = {i.model for i in infos}
    missing = [m for m in models if m not in known]
    if missing:
        raise ChartError(
            f"model(s) not ingested: {', '.join(missing)} (ingested: {', '.join(i.model for i in infos)}); "
            "`qkdb models` lists the registry's models, which `qkdb ingest --model NAME` fetches",
            kind="not_found",
        )
    chosen = set(models)
    return [i.model for i in infos if i.model in chosen]


@dataclass(frozen=True)
class Drawn:
    """The models a per-model figure draws, of the ``chosen`` ones its statistics and caption cover."""

    models: list[str]
    chosen: list[str]
    how: str = ""  # which ones, when not all: "the first 8 of each family"

    @property
    def note(self) -> str:
        """The subtitle line saying which models are drawn ('' when all are)."""
        if not self.how:
            return ""
        return (f"{len(self.models)} of {len(self.chosen)} models drawn, {self.how}; "
                "'all models' and the caption cover all (--model NAME draws any).")

    def rows(self, data: list[dict], key: str = "model", keep: tuple = ()) -> list[dict]:
        """The rows of drawn models (and of the ``keep`` labels, e.g. the pooled 'all models' row)."""
        if not self.how:
            return data
        shown = set(self.models) | set(keep)
        return [d for d in data if d[key] in shown]


def drawn_models(con: duckdb.DuckDBPyConnection, chosen: list[str], given=None) -> Drawn:
    """The models a figure with a row or panel per model draws: all of them, or past :data:`MAX_MODEL_ROWS`
    the first k of each family (display order), k as large as the limit allows.

    Models the user names (``given``) are all drawn. Every family keeps a row while there are fewer
    families than the limit (else the first of each of the first families); the figure's statistics
    stay computed over every chosen model.
    """
    limit = MAX_MODEL_ROWS
    if given or len(chosen) <= limit:
        return Drawn(list(chosen), list(chosen))
    family = {i.model: i.family for i in ingested(con)}
    by: dict = {}
    for m in chosen:
        by.setdefault(family.get(m), []).append(m)
    k = 1
    while sum(min(k + 1, len(v)) for v in by.values()) <= limit:
        k += 1
    keep = {m for v in by.values() for m in v[:k]}
    shown = [m for m in chosen if m in keep][:limit]
    how = (f"the first {k} of each family" if len(keep) <= limit
           else f"the first of each of the first {limit} families")
    return Drawn(shown, list(chosen), how)


def resolve_one_model(con: duckdb.DuckDBPyConnection, models=None, figure: str = "this figure") -> str:
    """The single model of a per-model figure: the one given, else the first pooled model."""
    if models and not isinstance(models, str) and len(models) > 1:
        raise ChartError(f"{figure} shows one model; give one --model (got {', '.join(models)})", kind="usage")
    return resolve_models(con, models)[0]


def families_of(con: duckdb.DuckDBPyConnection, models: list[str]) -> list[str]:
    fams = {i.family for i in ingested(con) if i.model in set(models)}
    return sorted(f for f in fams if f is not None)


SERIES_HINT = "ingest the checkpoints of a training series, e.g. `qkdb ingest --series smollm3-3b` (every checkpoint, from the Hub)"


def resolve_series(con: duckdb.DuckDBPyConnection, series: str | None = None, min_checkpoints: int = 2) -> str:
    """The training series a series figure shows: the one given, else the first ingested."""
    got = rows(con, "select series, count(*) as n from models where series is not null group by series order by series")
    counts = {r["series"]: r["n"] for r in got}
    if not counts:
        raise ChartError(f"no training series is ingested; {SERIES_HINT}", kind="not_found")
    if series is None:
        series = next(iter(counts))
    elif series not in counts:
        raise ChartError(
            f"series {series!r} is not ingested (ingested series: {', '.join(counts)}); {SERIES_HINT}", kind="not_found"
        )
    if counts[series] < min_checkpoints:
        raise ChartError(
            f"series {series!r} has {counts[series]} checkpoint ingested; a trajectory needs at least "
            f"{min_checkpoints}: ingest more checkpoints of it (see `qkdb models`)", kind="not_found",
        )
    return series


_HEAD = re.compile(r"^\s*(?:l(?:ayer)?)?(\d+)\s*(?:[.:/,]|h(?:ead)?|\s)\s*(?:h(?:ead)?)?(\d+)\s*$", re.IGNORECASE)


def parse_head(text) -> tuple[int, int]:
    """``"12.5"``, ``"l12h05"`` or ``(12, 5)`` as (layer, head)."""
    if isinstance(text, (tuple, list)) and len(text) == 2:
        return int(text[0]), int(text[1])
    m = _HEAD.match(str(text))
    if not m:
        raise ChartError(f"cannot read head {text!r}: write LAYER.HEAD, e.g. 12.5 or l12h05")
    return int(m.group(1)), int(m.group(2))


def parse_heads(head) -> list[tuple[int, int]] | None:
    if head is None:
        return None
    if isinstance(head, str) or (isinstance(head, tuple) and len(head) == 2 and all(isinstance(x, int) for x in head)):
        return [parse_head(head)]
    return [parse_head(h) for h in head]


_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # (the warehouse's model names)


def model_table(con: duckdb.DuckDBPyConnection, table: str, model: str) -> str:
    """What a query of one model's rows of ``table`` reads: that model's file alone, when it can.

    The catalog's view binds every model's file (~0.1 s a query at 467 models), for the rows of
    one. The catalog keeps the SQL of one model's rows of each table (``qkdb_meta``,
    ``model_source.<table>``: the view's columns, from that model's file); on a connection whose
    view of ``table`` is not shadowed (by ``restrict_models``, an index, a test's table) it gives the
    same rows. Otherwise, or from a catalog without it, the view. Returns SQL usable after ``from``.
    """
    shadowed = con.execute(
        "select count(*) from (select view_name as n from duckdb_views() where temporary "
        "union all select table_name from duckdb_tables() where temporary) where n = ?", [table]
    ).fetchall()[0][0]
    if shadowed or not _MODEL_NAME.fullmatch(model or ""):
        return table
    try:
        got = con.execute("select value from qkdb_meta where key = ?", [f"model_source.{table}"]).fetchall()
    except duckdb.CatalogException:  # (not a catalog: a test's tables)
        return table
    return f"({got[0][0].replace('{model}', model)})" if got else table


def model_heads(con: duckdb.DuckDBPyConnection, model: str) -> list[tuple[int, int]]:
    # head_metrics, not heads: the report holds it in memory (warehouse.snapshot), and a query of the
    # heads table binds over every model's file.
    got = rows(con, "select layer, head from head_metrics where model = $m order by layer, head", {"m": model})
    return [(r["layer"], r["head"]) for r in got]


def seed_sample(heads: list[tuple[int, int]], n: int = N_COLLAGE) -> list[tuple[int, int]]:
    """The seeds' collage heads: ``random.Random(42).sample(heads, n)`` over the sorted head list.

    This is the draw ingest uses to choose the heads whose complement scores it stores, so the
    default collages show exactly the heads with complement points.
    """
    return random.Random(42).sample(sorted(heads), min(n, len(heads)))


def check_heads(con: duckdb.DuckDBPyConnection, model: str, heads: list[tuple[int, int]]) -> None:
    have = set(model_heads(con, model))
    bad = [h for h in heads if h not in have]
    if bad:
        listed = ", ".join(f"{l}.{h}" for l, h in bad)
        raise ChartError(
            f"head(s) {listed} of model {model!r} are not ingested ({len(have)} heads are; "
            f"list them with `qkdb query \"select layer, head from heads where model = '{model}'\"`)",
            kind="not_found",
        )


def head_label(layer: int, head: int) -> str:
    return f"L{layer} H{head}"

"""Every model's ``head_metrics`` rows in one file, so that a query over every head does not open four files per model.

``head_metrics`` joins four tables of each model (``heads``, ``models``, ``pca``, ``rotation``);
through the catalog's views that is four parquet files a model, each footer read when a query is
bound: ~0.6 s and 150 MB at 467 models (140,000 heads), paid by every aggregate query, by the
report's and a chart's snapshot and by the findings' refresh. Each row depends on its own model's
files only, and a published version's files are never rewritten, so the rows can be kept: the
index, ``<home>/.index/head_metrics.parquet``, holds the view's rows with the stamp of what they
were computed from (``_version``: the version ``.store/<model>/current`` links to, the time and
size of the four files, the catalog's fingerprint, which covers the tables' schemas and the view's
SQL). :func:`ensure` compares the stamps with the models' files (a listing and four stats a model)
and computes through the view the rows of the models whose stamp differs only, then writes the
index again (atomically). :func:`shadow_head_metrics` lets one connection read it in place of the view.

The same holds for the ``pca`` table (:data:`PCA`, ``<home>/.index/pca.parquet``): the figures of
the principal components aggregate every head's components, ~0.2 s a query at 467 models of reading
one file each; :func:`shadow_pca` lets a connection read them from one. So do the per-head tables
of :data:`TABLES` (plasticity, the recency term, the rotation planes, the sinks), which the
findings' refresh and the report read for every model (:func:`shadow_tables`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qkdb.warehouse.model_index import FOLDER, VERSION, indexed_stamps, shadow_with, shadowed, version_files, write_index

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class Indexed:
    """A view of per-model rows kept in one file: the view, the model tables it reads, its file and row order."""

    view: str
    tables: tuple[str, ...]
    data: str
    order: str


HEAD_METRICS = Indexed("head_metrics", ("heads", "models", "pca", "rotation"), "head_metrics.parquet",
                       "model, layer, head")  # (what sql/head_metrics.sql reads)
PCA = Indexed("pca", ("pca",), "pca.parquet", "model, layer, head, pc")
# Per-head tables that the findings' refresh and the report's figures read for every model
# (plasticity, the recency term, the rotation planes, the sinks): one file each instead of one a
# model. At 467 models reading them through the views took 2.3 of the 4.25 s of finding_inputs.
TABLES = (
    Indexed("plasticity", ("plasticity",), "plasticity.parquet", "model, layer, head, estimator, context_length"),
    Indexed("recency", ("recency",), "recency.parquet", "model, layer, head"),
    Indexed("complement", ("complement",), "complement.parquet", "model, layer, head, pair"),
    Indexed("rope_planes", ("rope_planes",), "rope_planes.parquet", "model, layer, head, j"),
    Indexed("frequency_usage", ("frequency_usage",), "frequency_usage.parquet", "model, layer, head, j"),
    Indexed("attention_mass", ("attention_mass",), "attention_mass.parquet", "model, layer, head, input_kind, bin"),
    Indexed("attention_mass_text", ("attention_mass_text",), "attention_mass_text.parquet",
            "model, layer, head, input_kind, example_id, bin"),
)
# Read by the report's figures only (plasticity along the context: 5.5 million rows at 140,100 heads,
# read twice by the retention figure, 2.3 s through the views): brought up to date by the first report
# after an ingest (~1.1 s there), not by the refresh, which does not read it.
REPORT_TABLES = (
    Indexed("plasticity_profile", ("plasticity_profile",), "plasticity_profile.parquet",
            "model, layer, head, estimator, bin_kind, bin"),
)


def path(home: Path, which: Indexed = HEAD_METRICS) -> Path:
    return home / FOLDER / which.data


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def stamps(home: Path, catalog: str, which: Indexed = HEAD_METRICS) -> dict[str, str]:
    """Model -> the stamp its rows are computed from: ``<version>/<mtime ns>.<bytes> of each table's file>/<catalog>``."""
    # (a table the model lacks stamps as '-': the view's left join gives NULLs)
    return {m: f"{version}/{'/'.join(f or '-' for f in files)}/{catalog}"
            for m, (version, files) in version_files(home, which.tables).items()}


def ensure(home: Path, con: duckdb.DuckDBPyConnection, which: Indexed = HEAD_METRICS) -> Path | None:
    """The index of ``home``, brought up to date through ``con`` (the catalog's connection); None when it cannot be.

    None when ``con`` reads its own version of a table the view reads (its rows are not the
    warehouse's), when the catalog has no fingerprint, or when the index cannot be written (a
    home this process may only read): the callers then read the view.
    """
    import duckdb

    if shadowed(con, (which.view, *which.tables)):  # (its rows are not the warehouse's)
        return None
    try:
        db = con.execute("select current_database()").fetchall()[0][0]
        got = con.execute(f'select value from "{db}".main.qkdb_meta where key = \'fingerprint\'').fetchall()
    except duckdb.Error:
        return None
    if not got:
        return None
    want = stamps(home, got[0][0], which)
    if not want:
        return None
    target = path(home, which)
    have = indexed_stamps(con, target)
    if have == want:
        return target
    kept = [m for m, v in want.items() if have.get(m) == v]
    new = {m: v for m, v in sorted(want.items()) if have.get(m) != v}
    parts = []
    if kept:
        parts.append(f"select * from read_parquet({_quote(str(target))}) where model in ({', '.join(map(_quote, kept))})")
    if new:
        # Through the catalog's view by its full name, filtered to the models to compute (their
        # files only are scanned); a model's stamp is read before its rows, so that a publish
        # meanwhile leaves an older stamp on newer rows: recomputed next time, never kept stale.
        values = ", ".join(f"({_quote(m)}, {_quote(v)})" for m, v in new.items())
        parts.append(
            f"select h.*, s.{VERSION} from \"{db}\".main.{which.view} h "
            f"join (values {values}) s(model, {VERSION}) on s.model = h.model "
            f"where h.model in ({', '.join(map(_quote, new))})"
        )
    return write_index(con, f"{' union all by name '.join(parts)} order by {which.order}", target, want)


def shadow_head_metrics(con: duckdb.DuckDBPyConnection, home: Path) -> bool:
    """Let ``con`` read ``head_metrics`` from the index: a temporary view over it shadows the catalog's view.

    The view has the catalog view's columns, in its order, and the rows it would give now (in the
    order of model, layer, head). Does nothing (False) when the index cannot be brought up to
    date, or when ``con`` has its own version of a table the view reads (restricted to some models,
    say): the catalog's view serves then.
    """
    index = ensure(home, con)
    return index is not None and shadow_with(con, HEAD_METRICS.view, index, "view")


def shadow_pca(con: duckdb.DuckDBPyConnection, home: Path) -> bool:
    """Let ``con`` read ``pca`` from its index (:data:`PCA`): a temporary view over it shadows the catalog's.

    As :func:`shadow_head_metrics`, which stands aside once ``pca`` is shadowed: call that first.
    """
    index = ensure(home, con, PCA)
    return index is not None and shadow_with(con, PCA.view, index, "view")


def shadow_tables(con: duckdb.DuckDBPyConnection, home: Path, which: tuple[Indexed, ...] = TABLES) -> list[str]:
    """Let ``con`` read the per-head tables ``which`` (default :data:`TABLES`) from their indexes; the names shadowed.

    Each stands aside where it cannot be used, as :func:`shadow_pca` does.
    """
    return [t.view for t in which if (index := ensure(home, con, t)) is not None and shadow_with(con, t.view, index, "view")]


def shadow_indexes(con: duckdb.DuckDBPyConnection, home: Path, pca: bool = False, tables: bool = False) -> None:
    """Let ``con`` read ``head_metrics``, ``models`` (with ``pca``, ``pca``; with ``tables``, :data:`TABLES`) from the indexes of ``home``.

    In the order they need: the index of ``head_metrics`` stands aside once a table it reads is
    shadowed. Each stands aside where it cannot be used (a restricted connection, a home this
    process cannot write): the catalog's views serve then.
    """
    from qkdb.warehouse.model_index import snapshot_models

    shadow_head_metrics(con, home)
    snapshot_models(con, home)
    if pca:
        shadow_pca(con, home)
    if tables:
        shadow_tables(con, home)


def reads_head_metrics(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Whether ``sql`` names a finding view (every one reads ``head_metrics``, most through others).

    A plain test of the text against the catalog's view names: a name in a string or a comment
    only costs the index's check (~20 ms at 467 models), and a query of the tables alone none.
    """
    import re

    db = con.execute("select current_database()").fetchall()[0][0]
    # The finding views: the catalog's views that do not read files themselves (the tables' do).
    names = {r[0] for r in con.execute(
        "select view_name from duckdb_views() where database_name = ? and not internal "
        "and sql not ilike '%read_parquet(%'", [db]).fetchall()}
    if not names:
        return False
    pattern = r"\b(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b"
    return re.search(pattern, sql, flags=re.IGNORECASE) is not None

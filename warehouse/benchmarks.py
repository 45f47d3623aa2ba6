"""Benchmark scores, the model mapping and reference values in the home (SPEC §4.6).

Each table of :data:`~qkdb.warehouse.schema.IMPORTED` has three files::

    .schema/<table>/bundled/bundled.parquet   what qkdb ships, written with the catalog
    .schema/<table>/empty/schema.parquet      zero rows (types the view before any import)
    <table>/imported.parquet                  what `qkdb benchmarks import` / `map` stored

The catalog's view (:func:`view_sql`) is the imported rows plus the shipped rows an import did
not replace. Rows replace rows of the same *unit* (:data:`UNITS`): a LongBench-Pro summary file
(benchmark, model, mode, budget, best-of-k) replaces all of that file's rows, so importing a
file again, or a corrected one, never duplicates and never leaves a slice of the old one behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock

from qkdb.warehouse.schema import IMPORTED, Table

if TYPE_CHECKING:
    import duckdb

BUNDLED, EMPTY, DATA = "bundled", "empty", "imported.parquet"
LOCK = "benchmarks.lock"

# The columns that identify what one import replaces.
UNITS: dict[str, tuple[str, ...]] = {
    "benchmark_scores": ("benchmark", "bench_model", "mode", "context_budget", "best_of"),
    "benchmark_models": ("model", "benchmark"),
    "reference_metrics": ("model", "source", "metric", "lo_tokens", "hi_tokens"),
    "sink_anchors": ("hf_model", "input_kind", "epsilon", "tokens"),
}


def file_schema(table: Table) -> pa.Schema:
    """Every column is in the file (these tables are not partitioned by model)."""
    return pa.schema([pa.field(c.name, c.type) for c in table.columns])


def _empty(table: Table) -> pa.Table:
    return pa.Table.from_batches([], schema=file_schema(table))  # (Schema.empty_table imports pandas)


def to_table(table: Table, rows: list[dict], origin: str) -> pa.Table:
    """``rows`` (dicts of the table's columns; missing ones NULL) as an Arrow table of its file schema."""
    from qkdb.warehouse.batches import arrow_array

    # (arrow_array builds from buffers: pa.array on Python values would import pandas, ~0.3 s of
    # every ingest that builds a catalog)
    schema = file_schema(table)
    cols = {f.name: [origin if f.name == "origin" else r.get(f.name) for r in rows] for f in schema}
    if "truncated" in cols:  # derived here, never taken from a file: whatever the source, one rule
        cols["truncated"] = [truncated(r) for r in rows]
    return pa.Table.from_arrays([arrow_array(cols[f.name], f.type) for f in schema], schema=schema)


def truncated(row: dict) -> bool:
    """Whether a score slice is longer than its run's context budget (its inputs were cut to the budget)."""
    length, budget = row.get("length_tokens"), row.get("context_budget")
    return row.get("slice_kind") == "token_length" and length is not None and budget is not None and length > budget


def write_bundled(home: Path) -> None:
    """Write what qkdb ships (and the zero-row files) under ``.schema/`` (with the catalog's build)."""
    from qkdb.warehouse.benchmark_files import bundled_rows
    from qkdb.warehouse.store import write_file

    rows = bundled_rows()
    for name, table in IMPORTED.items():
        folder = home / ".schema" / name
        write_file(folder / BUNDLED, "bundled.parquet", to_table(table, rows[name], "bundled"))
        write_file(folder / EMPTY, "schema.parquet", _empty(table))


def view_sql(home: Path, table: Table, quote) -> str:
    """The catalog's select of ``table``: the imported rows, then the shipped rows no import replaced."""
    cols = ", ".join(f'"{c.name}"' for c in table.columns)
    folder = home / ".schema" / table.name
    imported = (f"read_parquet([{quote(str(folder / EMPTY / '*.parquet'))}, {quote(str(home / table.name / '*.parquet'))}], "
                "union_by_name = true, allow_empty = true)")
    bundled = f"read_parquet({quote(str(folder / BUNDLED / '*.parquet'))}, union_by_name = true)"
    # IS NOT DISTINCT FROM: a unit's NULL (RULER has no context budget) matches NULL.
    same = " and ".join(f'i."{k}" is not distinct from b."{k}"' for k in UNITS[table.name])
    return (f"select {cols} from {imported} union all by name "
            f"select {cols} from {bundled} b where not exists (select 1 from {imported} i where {same})")


def _keys(data: pa.Table, unit: tuple[str, ...]) -> list[tuple]:
    return list(zip(*(data.column(k).to_pylist() for k in unit))) if data.num_rows else []


def store_benchmarks(home: Path, rows: dict[str, list[dict]], wait: float = 30.0) -> dict[str, tuple[int, int]]:
    """Store imported rows, replacing stored rows of the same units; per table (rows added, rows replaced).

    Everything was parsed before this is called; each table's file is replaced atomically.
    """
    from qkdb.warehouse.batches import arrow_array
    from qkdb.warehouse.store import LOCKS, write_file

    (home / LOCKS).mkdir(parents=True, exist_ok=True)
    done: dict[str, tuple[int, int]] = {}
    with FileLock(str(home / LOCKS / LOCK), timeout=wait):
        for name, new_rows in rows.items():
            if not new_rows:
                continue
            table = IMPORTED[name]
            new = to_table(table, new_rows, "imported")
            unit = UNITS[name]
            path = home / name / DATA
            old = pq.read_table(path, schema=file_schema(table)) if path.exists() else _empty(table)
            replaced = set(_keys(new, unit))
            keep = arrow_array([k not in replaced for k in _keys(old, unit)], pa.bool_())
            kept = old.filter(keep) if old.num_rows else old
            write_file(home / name, DATA, pa.concat_tables([kept, new]))
            done[name] = (new.num_rows, old.num_rows - kept.num_rows)
    return done


def imported_count(home: Path, name: str) -> int:
    path = home / name / DATA
    return pq.read_metadata(path).num_rows if path.exists() else 0


def bundled_tables() -> dict[str, pa.Table]:
    """The shipped benchmark tables (scores, the registry's mapping, the author's values), as Arrow."""
    from qkdb.warehouse.benchmark_files import bundled_rows

    rows = bundled_rows()
    return {name: to_table(t, rows[name], "bundled") for name, t in IMPORTED.items()}


def benchmarks_memory_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory database with the shipped benchmark tables, empty model tables and every view.

    What a reader sees of a home that has no catalog yet: the shipped scores, without writing one
    (a reading command never creates a warehouse).
    """
    import duckdb

    from qkdb.warehouse.schema import TABLES
    from qkdb.warehouse.views import create_views

    con = duckdb.connect()
    tables = {name: _empty(t) for name, t in TABLES.items()}
    tables.update(bundled_tables())
    for name, data in tables.items():
        con.register("_qkdb_src", data)
        con.execute(f'create table "{name}" as select * from _qkdb_src')
        con.unregister("_qkdb_src")
    create_views(con)
    return con

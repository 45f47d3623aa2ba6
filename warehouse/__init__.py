"""The warehouse layer: parquet tables on disk, the DuckDB catalog and its views, publishing, intervals.

Rooms::

    home.py       where the warehouse lives
    schema.py     every table and column, with its description (the data dictionary's source)
    batches.py    rows into Arrow batches of a table's schema, buffered per table (RowBuffer: Staging's and ArrowRows'); packed for the wire
    store.py      the parquet files: staging, atomic publish per model, locks, removal
    catalog.py    qk.duckdb: a view per table and per finding (sql/), the findings' intervals
    views.py      the finding views: parsing sql/*.sql, creating them, describing them
    inference.py  interval statistics (Wilson, Fisher z, Rao-Wu's stratified bootstrap, the jackknife)
    intervals.py  the finding_intervals table computed from finding_inputs
    results.py    the findings' rows stored at publish, and whether a connection may use them
    model_index.py  every model's ``models`` row in one file, for the commands that read them all
    head_index.py   every head's ``head_metrics`` (and ``pca``) rows in one file, for the queries that read them all
    benchmark_files.py  long-context benchmark scores read (LongBench-Pro summaries, CSVs) and the files qkdb ships (reference/)
    benchmarks.py   the benchmark tables in the home: shipped rows written with the catalog, imports replacing by run

This package is the layer's facade: the names below are what the rest of qkdb uses, each loaded
on first use.
"""

from qkdb._lazy import facade

__getattr__, __dir__ = facade(__name__, {
    "resolve_home": "qkdb.warehouse.home",
    "catalog_path": "qkdb.warehouse.home",
    "ensure_writable": "qkdb.warehouse.home",
    "ingested_models": "qkdb.warehouse.home",
    "open_catalog": "qkdb.warehouse.catalog",
    "ensure_catalog": "qkdb.warehouse.catalog",
    "refresh_intervals": "qkdb.warehouse.catalog",
    "ensure_current": "qkdb.warehouse.intervals",
    "intervals_current": "qkdb.warehouse.results",
    "findings_source": "qkdb.warehouse.results",
    "snapshot_models": "qkdb.warehouse.model_index",
    "model_rows": "qkdb.warehouse.model_index",
    "published_model_rows": "qkdb.warehouse.model_index",
    "shadow_head_metrics": "qkdb.warehouse.head_index",
    "shadow_pca": "qkdb.warehouse.head_index",
    "shadow_indexes": "qkdb.warehouse.head_index",
    "reads_head_metrics": "qkdb.warehouse.head_index",
    "TABLES": "qkdb.warehouse.schema",
    "DERIVED": "qkdb.warehouse.schema",
    "IMPORTED": "qkdb.warehouse.schema",
    "STORED": "qkdb.warehouse.schema",
    "MODELS": "qkdb.warehouse.schema",
    "INGEST_RUNS": "qkdb.warehouse.schema",
    "to_batch": "qkdb.warehouse.batches",
    "ArrowRows": "qkdb.warehouse.batches",
    "pack_tables": "qkdb.warehouse.batches",
    "unpack_tables": "qkdb.warehouse.batches",
    "store": "module:qkdb.warehouse.store",
    "describe": "qkdb.warehouse.views",
    "load_view_files": "qkdb.warehouse.views",
    "restrict_models": "qkdb.warehouse.views",
    "snapshot": "qkdb.warehouse.views",
    "select_models": "qkdb.warehouse.views",
    "read_benchmark_files": "qkdb.warehouse.benchmark_files",
    "benchmark_model_row": "qkdb.warehouse.benchmark_files",
    "check_mapping": "qkdb.warehouse.benchmark_mapping",
    "unmapped_notes": "qkdb.warehouse.benchmark_mapping",
    "check_benchmark": "qkdb.warehouse.benchmark_mapping",
    "store_benchmarks": "qkdb.warehouse.benchmarks",
    "benchmarks_memory_connection": "qkdb.warehouse.benchmarks",
})

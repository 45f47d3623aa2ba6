"""The on-disk warehouse: parquet tables, the DuckDB catalog, locking and atomic publish."""

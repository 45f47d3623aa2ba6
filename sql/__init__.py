"""Finding views: one plain DuckDB ``.sql`` file per view (shipped as package data)."""

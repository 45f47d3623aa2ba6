"""Where a published warehouse keeps each thing in its Hub dataset repo (docs/sharing.md, "What is uploaded").

The tables keep the home's own layout, so the repo reads like a warehouse home: ``<table>/model=<m>/``
holds a model's file of each table, byte for byte the file the home published (``data.parquet``; for
the run log ``ingest_runs``, ``<run_id>.parquet``). Next to them: the manifest, the card, the findings
as computed by the publisher (for readers without qkdb, and for ``qkdb pull`` to check its own against),
and the card's figures.
"""

from __future__ import annotations

MANIFEST = "qkdb_warehouse.json"
CARD = "README.md"
FINDINGS = "findings/findings.parquet"
INTERVALS = "findings/finding_intervals.parquet"
FIGURES = "figures"
FORMAT = 1  # of the manifest and the repo's layout; a pull refuses a newer one


def model_folder(table: str, model: str) -> str:
    return f"{table}/model={model}"


def table_file(table: str, model: str, name: str = "data.parquet") -> str:
    return f"{model_folder(table, model)}/{name}"


def model_of(path: str) -> str | None:
    """The model a repo path belongs to (``<table>/model=<m>/...``), None for the repo's other files."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[1].startswith("model="):
        return parts[1][len("model="):]
    return None

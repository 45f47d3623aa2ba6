"""The dataset card (``README.md``) of a published warehouse: what it holds, its findings, a few figures, how to use it.

Written from the manifest, the findings' rows and the names of the figures rendered, and nothing
else (no date): the same warehouse gives the same card, so publishing again changes nothing.
"""

from __future__ import annotations

import math

from qkdb.sharing.layout import FINDINGS, INTERVALS, MANIFEST

# The figures on the card, in this order, as many as the data supports (SPEC §7 names).
FIGURES = ("rq-vs-rk", "bias-vs-separation", "pc-roles", "depth-heatmap-rk")


def _num(v) -> str:  # (a count, or a number to three figures)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _cell(text) -> str:
    return ("" if text is None else str(text)).replace("|", "\\|").replace("\n", " ")


def findings_table(rows: list[dict]) -> str:
    """The findings with data as a markdown table (every row and column is in the findings parquet file)."""
    shown = [r for r in rows if r.get("status") != "no data"]
    lines = ["| finding | scope | measured [95% interval] | seed | status |", "|---|---|---|---|---|"]
    for r in shown:  # (``measured`` carries the value and its interval, as `qkdb findings` shows them)
        lines.append(
            f"| `{_cell(r.get('id'))}` {_cell(r.get('statement'))} | {_cell(r.get('scope'))} | "
            f"{_cell(r.get('measured'))} | {_cell(r.get('seed_value'))} | **{_cell(r.get('status'))}** |"
        )
    if len(shown) < len(rows):
        lines.append(f"\n{len(rows) - len(shown)} more findings have no data in these models.")
    return "\n".join(lines)


def warehouse_card(manifest: dict, findings: list[dict], figures: list[tuple[str, str]], repo: str, branch: str) -> str:
    """The card. ``figures``: (figure name, repo path of its PNG) for each one rendered."""
    from qkdb.warehouse import TABLES

    models = manifest["models"]
    revision = "" if branch == "main" else f"@{branch}"
    model_lines = ["| model | family | heads | from | fingerprint |", "|---|---|---|---|---|"]
    for name, m in models.items():
        src = m["source"]
        where = f"{src.get('kind')}: {src.get('dataset')}" + (f"@{src['revision']}" if src.get("revision") else "")
        model_lines.append(
            f"| `{_cell(name)}` | {_cell(m['facts'].get('family'))} | {_num(m.get('heads'))} | {_cell(where)} | "
            f"`{(m.get('fingerprint') or m['content'])[:12]}` |"
        )
    counts: dict[str, int] = {}
    for r in findings:
        counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
    status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: (kv[0] == "no data", kv[0] or "")))
    tables = [n for n in TABLES if n in manifest["tables"]]
    configs = "\n".join(f"- config_name: {t}\n  data_files: \"{t}/*/*.parquet\"" for t in tables)
    figure_md = "\n\n".join(f"![{name}]({path})" for name, path in figures) or "(no figure is supported by these models)"
    return f"""---
tags:
- qkdb
- interpretability
- attention
configs:
{configs}
---

# A qkdb warehouse: the positional geometry of attention heads in {len(models)} model{'' if len(models) == 1 else 's'}

Per-head metrics of post-RoPE queries and keys (combined Q/K PCA, the planar rotation model, RoPE
planes), computed by [qkdb](https://pypi.org/project/qkdb/) {manifest['qkdb_version']} (DuckDB
{manifest['duckdb_version']}). The raw vectors are **not** here: only the tables computed from them,
the findings and the manifest (`{MANIFEST}`: each model's fingerprint, files and their sha256,
source dataset and revision, RoPE facts and ingest parameters).

## Use it

```
pip install qkdb
qkdb pull {repo}{revision}          # into your warehouse (or --home DIR)
qkdb findings                      # the table below, recomputed from the pulled tables
qkdb report -o report.html         # every figure
```

Each table is hive-partitioned parquet, `<table>/model=<name>/data.parquet` (the run log:
`ingest_runs/model=<name>/<run_id>.parquet`), readable by any parquet reader.

## Models

{chr(10).join(model_lines)}

## Findings

{status} (`{FINDINGS}` holds every row and column; the intervals are in `{INTERVALS}`).

{findings_table(findings)}

## Figures

{figure_md}
"""

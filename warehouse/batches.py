"""Turn per-head column dicts into Arrow batches that conform to a table's schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from qkdb.warehouse.schema import Table

_ARRAY_LIKE = (np.ndarray, list, tuple, pa.Array)


def n_rows(columns: dict) -> int:
    """Rows described by a column dict: the length of its first array-like value, else 1."""
    for v in columns.values():
        if isinstance(v, _ARRAY_LIKE):
            return len(v)
    return 1


def check_columns(table: Table, columns: dict) -> None:
    """Raise KeyError naming the columns that ``table`` does not have (``model`` is the partition)."""
    unknown = set(columns) - set(table.arrow_schema.names) - {"model"}
    if unknown:
        raise KeyError(f"columns not in table {table.name}: {sorted(unknown)}")


def to_batch(table: Table, columns: dict) -> pa.RecordBatch:
    """One record batch of ``table`` from column values (scalars are broadcast, absent columns NULL).

    NaN in float columns becomes NULL: SPEC §4 metrics that are undefined are NULL, not NaN.
    """
    check_columns(table, columns)
    n = n_rows(columns)
    arrays = []
    schema = table.arrow_schema
    for field in schema:
        if field.name not in columns:
            arrays.append(pa.nulls(n, field.type))
            continue
        v = columns[field.name]
        if not isinstance(v, _ARRAY_LIKE):
            v = [v] * n
        if pa.types.is_floating(field.type):
            arr = np.asarray(v, dtype=np.float64)
            # NaN -> NULL with an explicit mask (from_pandas=True would import pandas).
            arrays.append(pa.array(arr, type=field.type, mask=np.isnan(arr)))
        elif isinstance(v, np.ndarray) and v.dtype == object:
            arrays.append(pa.array(v.tolist(), type=field.type))
        else:
            arrays.append(pa.array(v, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def merge_columns(table: Table, chunks: list[dict]) -> dict:
    """Several column dicts of ``table`` (one per head) as one, row after row, for one :func:`to_batch`.

    Converting once per row group instead of once per head and table keeps the ingest's parent
    process, which also receives every result, off the workers' cores. Scalars are broadcast to
    their chunk's length; a column absent from a chunk is NULL in its rows.
    """
    lengths = [n_rows(c) for c in chunks]
    merged = {}
    for field in table.arrow_schema:
        name = field.name
        if not any(name in c for c in chunks):
            continue
        values = [c.get(name) for c in chunks]
        if pa.types.is_floating(field.type):
            # One preallocated column, NaN (NULL) where a chunk has no value: e.g. the 60 complement
            # scores of `points`, present only for the few collage heads.
            out = np.full(sum(lengths), np.nan)
            offset = 0
            for v, n in zip(values, lengths):
                if v is not None:
                    out[offset:offset + n] = np.asarray(v.to_pylist() if isinstance(v, pa.Array) else v, dtype=np.float64)
                offset += n
            merged[name] = out
            continue
        if all(n == 1 and not isinstance(v, _ARRAY_LIKE) for v, n in zip(values, lengths)):
            merged[name] = values  # one row per chunk (heads, rotation): a plain list
            continue
        parts = []
        for v, n in zip(values, lengths):
            if isinstance(v, np.ndarray):
                parts.append(v)
            elif isinstance(v, _ARRAY_LIKE):  # list, tuple or Arrow values: one object per row
                part = np.empty(len(v), dtype=object)
                for i, x in enumerate(v.to_pylist() if isinstance(v, pa.Array) else v):
                    part[i] = x
                parts.append(part)
            else:
                parts.append(np.full(n, v, dtype=object if v is None or isinstance(v, str) else None))
        merged[name] = np.concatenate(parts)
    return merged


def warm_up() -> None:
    """Pay pyarrow's one-time costs of converting numpy data now (call while waiting anyway).

    pyarrow imports pandas, when it is installed, on its first such conversion (~0.25 s): an
    ingest does it while its workers start rather than when it publishes.
    """
    pa.array(np.zeros(1))

"""Turn per-head column dicts into Arrow batches that conform to a table's schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from qkdb.warehouse.schema import Table


def to_batch(table: Table, columns: dict) -> pa.RecordBatch:
    """One record batch of ``table`` from column values (scalars are broadcast, absent columns NULL).

    NaN in float columns becomes NULL: SPEC §4 metrics that are undefined are NULL, not NaN.
    """
    n = 1
    for v in columns.values():
        if isinstance(v, (np.ndarray, list, tuple, pa.Array)):
            n = len(v)
            break
    arrays = []
    schema = table.arrow_schema
    unknown = set(columns) - set(schema.names) - {"model"}
    if unknown:
        raise KeyError(f"columns not in table {table.name}: {sorted(unknown)}")
    for field in schema:
        if field.name not in columns:
            arrays.append(pa.nulls(n, field.type))
            continue
        v = columns[field.name]
        if not isinstance(v, (np.ndarray, list, tuple, pa.Array)):
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

"""Turn per-head column dicts into Arrow batches that conform to a table's schema."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

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
    unknown = columns.keys() - table.accepted_columns
    if unknown:
        raise KeyError(f"columns not in table {table.name}: {sorted(unknown)}")


def empty_table(table: Table) -> pa.Table:
    """Zero rows of ``table`` (``Schema.empty_table`` would import pandas, through pyarrow's probe for it)."""
    return pa.Table.from_batches([], schema=table.arrow_schema)


def to_batch(table: Table, columns: dict) -> pa.RecordBatch:
    """One record batch of ``table`` from column values (scalars are broadcast, absent columns NULL).

    NaN in float columns becomes NULL: SPEC §4 metrics that are undefined are NULL, not NaN.
    """
    check_columns(table, columns)
    n = n_rows(columns)
    arrays = []
    schema = table.arrow_schema
    nulls: dict[pa.DataType, pa.Array] = {}  # arrays are immutable: absent columns of a type share one
    for field in schema:
        if field.name not in columns:
            if field.type not in nulls:
                nulls[field.type] = pa.nulls(n, field.type)
            arrays.append(nulls[field.type])
            continue
        v = columns[field.name]
        if not isinstance(v, _ARRAY_LIKE):
            v = [v] * n
        arrays.append(arrow_array(v, field.type))
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
            out = np.empty(sum(lengths))
            offset = 0
            for v, n in zip(values, lengths):
                if v is None:
                    out[offset:offset + n] = np.nan
                else:
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


_NUMPY_TYPES = {pa.float64(): np.float64, pa.float32(): np.float32, pa.int64(): np.int64, pa.int32(): np.int32}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MICROSECOND = dt.timedelta(microseconds=1)


def numpy_of(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """A fixed-width numeric Arrow array as numpy: its values (anything where NULL) and its null mask
    (None without nulls), read from its buffers.

    The inverse of :func:`arrow_array`, for the same reason: pyarrow's ``to_numpy`` and
    ``pc.fill_null`` import pandas (~0.2 s of CPU), which an ingest's parent never does.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise TypeError(f"numpy_of takes an integer or floating array, not {t}")
    kind = "f" if pa.types.is_floating(t) else ("i" if pa.types.is_signed_integer(t) else "u")
    dtype = np.dtype(f"{kind}{t.bit_width // 8}")
    validity, data = arr.buffers()[:2]
    n, off = len(arr), arr.offset
    if not n:  # (an empty array may have no data buffer)
        return np.zeros(0, dtype=dtype), None
    values = np.frombuffer(data, dtype=dtype, count=off + n)[off:]
    if not arr.null_count:
        return values, None
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[off:off + n]
    return values, bits == 0


def arrow_array(values, arrow_type: pa.DataType) -> pa.Array:
    """``values`` (a numpy array or a sequence) as an Arrow array of ``arrow_type``, built from buffers.

    None is NULL; so is NaN in float columns (SPEC §4: undefined metrics are NULL, not NaN).
    Handles the warehouse's column types — float, int, bool, string, ``timestamp[us, tz]`` and
    lists of ints — and hands anything else to ``pa.array``. Why not ``pa.array`` throughout: it
    probes for pandas on every call and imports it on the first (~0.2 s of CPU), which an ingest's
    parent process would take from its workers.
    """
    if isinstance(values, pa.Array):
        return values if values.type == arrow_type else values.cast(arrow_type)
    n = len(values)
    if pa.types.is_floating(arrow_type):
        # np.asarray turns None into NaN for a float dtype: both become NULL.
        data = np.ascontiguousarray(values, dtype=_NUMPY_TYPES[arrow_type])
        return pa.Array.from_buffers(arrow_type, n, [_validity(~np.isnan(data)), pa.py_buffer(data)])
    if pa.types.is_integer(arrow_type) and arrow_type in _NUMPY_TYPES and _only(values, "iu", (int, np.integer)):
        data, valid = _filled(values, _NUMPY_TYPES[arrow_type])
        return pa.Array.from_buffers(arrow_type, n, [_validity(valid), pa.py_buffer(data)])
    if pa.types.is_boolean(arrow_type) and _only(values, "b", (bool, np.bool_)):
        data, valid = _filled(values, np.bool_)
        return pa.Array.from_buffers(arrow_type, n, [_validity(valid), pa.py_buffer(np.packbits(data, bitorder="little"))])
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    kinds = set(map(type, items))  # (builtins through map: ~10x faster than a Python loop per item)
    if pa.types.is_string(arrow_type) and kinds <= {str, type(None)}:
        valid = np.ones(n, dtype=bool)
        if type(None) in kinds:
            valid = np.fromiter((x is not None for x in items), dtype=bool, count=n)
            items = [x if x is not None else "" for x in items]
        encoded = list(map(str.encode, items))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=n), out=offsets[1:])
        if offsets[-1] >= 2**31:
            return pa.array(items, type=arrow_type, mask=~valid)  # beyond a string array's 2 GiB
        return pa.Array.from_buffers(
            arrow_type, n, [_validity(valid), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))]
        )
    if (pa.types.is_timestamp(arrow_type) and arrow_type.unit == "us" and arrow_type.tz is not None
            and all(x is None or isinstance(x, dt.datetime) for x in items)):
        micros = [None if x is None else _micros(x) for x in items]
        return arrow_array(micros, pa.int64()).view(arrow_type)
    if pa.types.is_list(arrow_type) and arrow_type.value_type in _NUMPY_TYPES:
        valid = np.array([x is not None for x in items], dtype=bool)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum([0 if x is None else len(x) for x in items], out=offsets[1:])
        child = arrow_array([v for x in items if x is not None for v in x], arrow_type.value_type)
        return pa.Array.from_buffers(arrow_type, n, [_validity(valid), pa.py_buffer(offsets)], children=[child])
    # Anything else, and values of the wrong kind (pyarrow raises the proper error for those, or
    # converts them as it always has).
    plain = isinstance(values, np.ndarray) and values.dtype != object
    return pa.array(values if plain else items, type=arrow_type)


def _only(values, dtype_kinds: str, py_types: tuple) -> bool:
    """Whether ``values`` holds only values of these kinds (or None); others go to ``pa.array``.

    ``dtype_kinds`` are numpy kind codes for arrays ("iu": integers, "b": booleans); ``py_types``
    the Python types allowed in sequences and object arrays (a bool is not taken for an int).
    """
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values.dtype.kind in dtype_kinds
    bool_ok = bool in py_types
    return all(x is None or (isinstance(x, py_types) and (bool_ok or not isinstance(x, bool))) for x in values)


def _filled(values, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Values as a contiguous ``dtype`` array with NULLs (None) as zeros, and the validity mask."""
    arr = values if isinstance(values, np.ndarray) else np.asarray(values)
    if arr.dtype != object:
        return np.ascontiguousarray(arr, dtype=dtype), np.ones(len(arr), dtype=bool)
    valid = np.array([x is not None for x in arr], dtype=bool)
    return np.array([x if x is not None else 0 for x in arr], dtype=dtype), valid


def _validity(valid: np.ndarray):
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _micros(x: dt.datetime) -> int:
    if x.tzinfo is None:
        x = x.replace(tzinfo=dt.timezone.utc)  # as pyarrow reads a naive datetime: UTC wall time
    return (x - _EPOCH) // _MICROSECOND


# Rows are converted and handed on in chunks of about this many: one conversion per head would
# cost as much as the head; one for a whole model would hold every head's dicts at once. It is
# also the row-group size of the files Staging writes (queries pay per row group).
CHUNK_ROWS = 65_536


class RowBuffer:
    """Rows of several tables held per table and handed to a sink in chunks of ``chunk_rows`` rows or more.

    The one place that batches a model's rows, for :class:`~qkdb.warehouse.store.Staging` (its sink
    writes a row group) and :class:`ArrowRows` (its sink keeps the batches). Column dicts (one per
    head) are converted together once per chunk (:func:`merge_columns`, :func:`to_batch`); Arrow
    data is kept as given; rows keep the order they came in, in either form.

    Parameters
    ----------
    chunk_rows
        Rows to gather before the sink is called (it gets them all, possibly more).
    sink
        ``sink(table, batches, n)``: a chunk of ``table``, its record batches in order and their
        ``n`` rows. Called from :meth:`add`/:meth:`write` when a chunk is full and from :meth:`flush`.
    """

    def __init__(self, chunk_rows: int, sink: Callable[[Table, list[pa.RecordBatch], int], None]) -> None:
        self.chunk_rows, self._sink = chunk_rows, sink
        self._tables: dict[str, Table] = {}
        self._columns: dict[str, list[dict]] = {}  # column dicts not yet converted
        self._batches: dict[str, list[pa.RecordBatch]] = {}
        self._pending: dict[str, int] = {}  # rows held in either form
        self.rows: dict[str, int] = {}  # rows received, per table name

    @property
    def tables(self) -> list[Table]:
        """Every table that received rows (zero rows included), in the order they first did."""
        return list(self._tables.values())

    def add(self, table: Table, columns: dict) -> None:
        """Rows given as a column dict (scalars broadcast, absent columns NULL; see :func:`to_batch`)."""
        check_columns(table, columns)  # now, not when the chunk is converted
        name = self._open(table)
        self._columns[name].append(columns)
        self._count(name, n_rows(columns))

    def write(self, table: Table, data: pa.RecordBatch | pa.Table) -> None:
        """Rows given as Arrow data that already has the table's schema."""
        name = self._open(table)
        self._convert(name)  # the dicts before it come first
        self._batches[name].extend(data.to_batches() if isinstance(data, pa.Table) else [data])
        self._count(name, data.num_rows)

    def flush(self, table: Table) -> None:
        """Hand what is held of ``table`` to the sink now (nothing when nothing is held)."""
        name = table.name
        self._convert(name)
        if self._batches[name]:
            self._sink(self._tables[name], self._batches[name], self._pending[name])
            self._batches[name] = []
        self._pending[name] = 0

    def clear(self) -> None:
        """Drop what is held, without handing it on (the counts in :attr:`rows` stay)."""
        for held in (self._tables, self._columns, self._batches, self._pending):
            held.clear()

    def _open(self, table: Table) -> str:
        name = table.name
        if name not in self._tables:
            self._tables[name], self._columns[name], self._batches[name] = table, [], []
            self._pending[name] = self.rows[name] = 0
        return name

    def _count(self, name: str, n: int) -> None:
        self.rows[name] += n
        self._pending[name] += n
        if self._pending[name] >= self.chunk_rows:
            self.flush(self._tables[name])

    def _convert(self, name: str) -> None:
        if self._columns[name]:
            table = self._tables[name]
            self._batches[name].append(to_batch(table, merge_columns(table, self._columns[name])))
            self._columns[name] = []


class ArrowRows:
    """A model's rows held in memory as Arrow tables: what :class:`~qkdb.warehouse.store.Staging` would write.

    Has Staging's ``add`` (and batches rows as it does: a :class:`RowBuffer`), so the code that
    stages a model's heads fills either. A cluster's worker fills one and sends its :meth:`tables`
    to the driver through Ray's object store; the driver writes them into its Staging
    (``Staging.write``) and publishes.
    """

    CHUNK_ROWS = CHUNK_ROWS

    def __init__(self) -> None:
        self._kept: dict[str, list[pa.RecordBatch]] = {}
        self._buffer = RowBuffer(self.CHUNK_ROWS, self._keep)

    def add(self, table: Table, columns: dict) -> None:
        """Rows given as a column dict (scalars broadcast, absent columns NULL; see :func:`to_batch`)."""
        self._buffer.add(table, columns)

    def _keep(self, table: Table, batches: list[pa.RecordBatch], n: int) -> None:
        self._kept.setdefault(table.name, []).extend(batches)

    def tables(self) -> dict[str, pa.Table]:
        """Every table that received rows, with its schema."""
        out = {}
        for table in self._buffer.tables:
            self._buffer.flush(table)
            out[table.name] = pa.Table.from_batches(self._kept.get(table.name, []), schema=table.arrow_schema)
        return out


def pack_tables(tables: dict[str, pa.Table]) -> dict[str, bytes]:
    """Each table as a zstd-compressed Arrow IPC stream: what a cluster's worker sends to the driver.

    Uncompressed, a full model's ``points`` alone is ~170 MB, nearly all of it the data buffers of
    its NULL complement-score columns (60 float64 columns, filled only for collage heads); compressed,
    the whole model is a few MB, and the wire, not the tables' size, stops being what the driver waits for.
    """
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    out = {}
    for name, table in tables.items():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
            writer.write_table(table)
        out[name] = sink.getvalue().to_pybytes()
    return out


def unpack_tables(packed: dict[str, bytes]) -> dict[str, pa.Table]:
    """The tables :func:`pack_tables` packed, schemas included."""
    return {name: pa.ipc.open_stream(pa.py_buffer(data)).read_all() for name, data in packed.items()}

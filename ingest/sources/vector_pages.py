"""The vector column's flat float values straight from its parquet pages (the fast read path).

pyarrow assembles a ``FixedSizeList<float>[d]`` column from one repetition and one definition
level per float (a million of each for an 8,000 × 128 head); on a sniffed-qk file that costs as
much as decompressing it. When the column holds no null at any level the levels carry no
information: every row has exactly ``d`` values, stored one after another. This module walks the
column chunk's pages itself, checks that the definition levels say "no null" (one RLE run at the
maximum level per page, read without decoding a million levels), skips the repetition levels and
copies the values — PLAIN, BYTE_STREAM_SPLIT or dictionary-encoded — straight into one float64
array: one pass from the decompressed page to the result.

It handles what pyarrow and the usual writers produce: data pages v1 and v2, uncompressed,
snappy, gzip, brotli, zstd and lz4_raw. For anything else (a null vector or element, float16,
other encodings, encryption, a header it cannot parse) :func:`read_fixed_size_vectors` returns
None and the caller reads the file with pyarrow, which also raises the proper error on a damaged
file. Correctness never depends on this path being taken.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# Parquet's thrift enums (parquet.thrift).
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY, _BYTE_STREAM_SPLIT = 0, 2, 3, 8, 9
_CODECS = {"SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli", "ZSTD": "zstd", "LZ4_RAW": "lz4_raw"}
_PHYSICAL = {"FLOAT": np.dtype("<f4"), "DOUBLE": np.dtype("<f8")}

# Fields kept from a PageHeader (field id -> nested fields kept, None for a scalar).
_PAGE_HEADER_FIELDS = {
    1: None,  # type
    2: None,  # uncompressed_page_size
    3: None,  # compressed_page_size
    5: {1: None, 2: None, 3: None, 4: None},  # DataPageHeader: num_values, encoding, def/rep level encodings
    7: {1: None, 2: None},  # DictionaryPageHeader: num_values, encoding
    8: {1: None, 2: None, 4: None, 5: None, 6: None, 7: None},  # DataPageHeaderV2
}


class _Unsupported(Exception):
    """The column or file needs pyarrow's general reader."""


def read_fixed_size_vectors(pf: pq.ParquetFile, path, column: str = "vector") -> np.ndarray | None:
    """The ``(num_rows, d)`` float64 values of a null-free FixedSizeList float column, or None.

    Parameters
    ----------
    pf : pyarrow.parquet.ParquetFile
        The open file (its footer is already parsed).
    path : path-like
        The same file, memory-mapped to read the column's pages.
    column : str
        Name of the top-level FixedSizeList column.

    Returns
    -------
    ndarray of shape (num_rows, d), float64, or None
        None when the column is not a FixedSizeList of float32/float64, holds a null at any level,
        or is stored in a way this reader does not handle: read it with pyarrow then.
    """
    try:
        field = pf.schema_arrow.field(column)
        if not pa.types.is_fixed_size_list(field.type):
            return None
        d = field.type.list_size
        md = pf.metadata
        leaves = [j for j in range(md.num_columns) if md.schema.column(j).path.split(".")[0] == column]
        if len(leaves) != 1 or d < 1:
            return None
        leaf = md.schema.column(leaves[0])
        dtype = _PHYSICAL.get(leaf.physical_type)
        if dtype is None:
            return None
        out = np.empty((md.num_rows, d), dtype=np.float64)
        if md.num_rows == 0:
            return out  # (writers leave odd page offsets in empty chunks: nothing to read anyway)
        flat = out.reshape(-1)
        filled = 0
        with pa.memory_map(str(path)) as mm:
            for rg in range(md.num_row_groups):
                chunk = md.row_group(rg).column(leaves[0])
                want = md.row_group(rg).num_rows * d
                got = _read_chunk(mm, chunk, dtype, leaf.max_definition_level, leaf.max_repetition_level,
                                  flat[filled:filled + want])
                if got != want:
                    return None
                filled += want
        return out if filled == flat.size else None
    except (_Unsupported, IndexError, ValueError, KeyError, TypeError, OSError, pa.ArrowException):
        return None


def _read_chunk(mm, chunk, dtype: np.dtype, max_def: int, max_rep: int, out: np.ndarray) -> int:
    """Decode one column chunk into ``out``; returns the number of values written."""
    codec = chunk.compression
    if codec != "UNCOMPRESSED" and codec not in _CODECS:
        raise _Unsupported(codec)
    codec = _CODECS.get(codec)
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and chunk.dictionary_page_offset is not None:
        start = min(start, chunk.dictionary_page_offset)
    size = chunk.total_compressed_size
    mm.seek(start)
    buf = mm.read_buffer(size)
    if buf.size != size:
        raise _Unsupported("short column chunk")
    view = memoryview(buf).cast("B")
    dictionary = None
    filled, i = 0, 0
    while i < size:
        header, i = _struct(view, i, _PAGE_HEADER_FIELDS)
        kind, usize, csize = header[1], header[2], header[3]
        if csize < 0 or usize < 0 or i + csize > size:
            raise _Unsupported("page overruns the column chunk")
        page = view[i:i + csize]
        i += csize
        if kind == _DICTIONARY_PAGE:
            dh = header[7]
            if dh.get(2) not in (_PLAIN, _PLAIN_DICTIONARY):
                raise _Unsupported("dictionary encoding")
            raw = _decompress(page, usize, codec)
            n_dict = dh[1]
            if len(raw) != n_dict * dtype.itemsize:
                raise _Unsupported("dictionary size")
            dictionary = np.frombuffer(raw, dtype).astype(np.float64)
            continue
        if kind == _DATA_PAGE:
            dh = header[5]
            n, encoding = dh[1], dh[2]
            raw = _decompress(page, usize, codec)
            k = 0
            if max_rep > 0:
                k = _skip_prefixed_levels(raw, k, dh.get(4))
            if max_def > 0:
                if dh.get(3) != _RLE:
                    raise _Unsupported("definition level encoding")
                length = int.from_bytes(raw[k:k + 4], "little")
                _check_all_defined(raw[k + 4:k + 4 + length], max_def, n)
                k += 4 + length
            values = raw[k:]
        elif kind == _DATA_PAGE_V2:
            dh = header[8]
            n, encoding = dh[1], dh[4]
            rep_len, def_len = dh[6], dh[5]
            if dh.get(2, 0) != 0:
                raise _Unsupported("nulls")
            if max_def > 0:
                _check_all_defined(page[rep_len:rep_len + def_len], max_def, n)
            body = page[rep_len + def_len:]
            compressed = dh.get(7, True)
            values = _decompress(body, usize - rep_len - def_len, codec if compressed else None)
        else:
            continue  # index pages carry no values
        if filled + n > len(out):
            raise _Unsupported("more values than rows × d")
        _decode_values(values, encoding, n, dtype, dictionary, out[filled:filled + n])
        filled += n
    return filled


def _decompress(data: memoryview, size: int, codec: str | None) -> memoryview:
    if codec is None:
        return data
    raw = memoryview(pa.decompress(data, size, codec=codec, asbytes=False)).cast("B")
    if len(raw) != size:
        raise _Unsupported("decompressed size")
    return raw


def _decode_values(values: memoryview, encoding: int, n: int, dtype: np.dtype, dictionary, out: np.ndarray) -> None:
    """Write the page's ``n`` values into ``out`` (float64), converting on the way."""
    if encoding == _PLAIN:
        # Exactly n values: PLAIN stores only non-null values, so this also rules out nulls.
        if len(values) != n * dtype.itemsize:
            raise _Unsupported("value bytes")
        out[:] = np.frombuffer(values, dtype)
    elif encoding == _BYTE_STREAM_SPLIT:
        if len(values) != n * dtype.itemsize:
            raise _Unsupported("value bytes")
        streams = np.frombuffer(values, np.uint8).reshape(dtype.itemsize, n)
        out[:] = np.ascontiguousarray(streams.T).view(dtype).reshape(n)
    elif encoding in (_RLE_DICTIONARY, _PLAIN_DICTIONARY):
        if dictionary is None or len(values) < 1:
            raise _Unsupported("dictionary indices without a dictionary")
        idx = _hybrid(values, 1, values[0], n)
        if n and int(idx.max()) >= len(dictionary):
            raise _Unsupported("dictionary index out of range")
        np.take(dictionary, idx, out=out, mode="clip")  # indices checked: no buffered bounds check
    else:
        raise _Unsupported(f"value encoding {encoding}")


def _skip_prefixed_levels(raw: memoryview, k: int, encoding) -> int:
    if encoding != _RLE:
        raise _Unsupported("repetition level encoding")
    return k + 4 + int.from_bytes(raw[k:k + 4], "little")


def _check_all_defined(levels: memoryview, max_def: int, n: int) -> None:
    """Raise unless the RLE/bit-packed definition levels are ``n`` times ``max_def`` in RLE runs.

    Writers encode a constant level as RLE runs; a bit-packed run means varying levels (or an
    unusual writer): either way the general reader takes over.
    """
    width_bytes = (max(max_def.bit_length(), 1) + 7) // 8
    i, count = 0, 0
    while count < n:
        header, i = _varint(levels, i)
        if header & 1:
            raise _Unsupported("bit-packed definition levels")
        value = int.from_bytes(levels[i:i + width_bytes], "little")
        i += width_bytes
        if value != max_def or header >> 1 == 0:
            raise _Unsupported("null values")
        count += header >> 1
    if count != n:
        raise _Unsupported("definition level count")


def _hybrid(data: memoryview, start: int, bit_width: int, n: int) -> np.ndarray:
    """Decode ``n`` values of the RLE/bit-packing hybrid encoding (dictionary indices)."""
    if not 0 <= bit_width <= 32:
        raise _Unsupported("bit width")
    width_bytes = (bit_width + 7) // 8
    out = np.empty(n, dtype=np.int64)
    packed: list[tuple[int, int, int, int, int]] = []  # (out start, count, byte start, byte end, groups)
    runs: list[tuple[int, int, int]] = []  # (out start, count, value)
    i, count, n_packed = start, 0, 0
    while count < n:
        header, i = _varint(data, i)
        if header & 1:
            groups = header >> 1
            nbytes = groups * bit_width
            if groups == 0 or i + nbytes > len(data):
                raise _Unsupported("bit-packed run")
            take = min(8 * groups, n - count)
            packed.append((count, take, i, i + nbytes, groups))
            n_packed += 8 * groups
            i += nbytes
        else:
            run = header >> 1
            if run == 0 or i + width_bytes > len(data):
                raise _Unsupported("RLE run")
            take = min(run, n - count)
            runs.append((count, take, int.from_bytes(data[i:i + width_bytes], "little")))
            i += width_bytes
        count += take
    for s, c, v in runs:
        out[s:s + c] = v
    if packed:
        # Consecutive literal runs concatenate into one bit stream (each holds whole groups of 8).
        stream = b"".join(data[b0:b1] for _, _, b0, b1, _ in packed)
        values = _unpack_bits(stream, bit_width, n_packed)
        pos = 0
        for s, c, _, _, groups in packed:
            out[s:s + c] = values[pos:pos + c]
            pos += 8 * groups
    return out


def _unpack_bits(stream: bytes, bit_width: int, n: int) -> np.ndarray:
    """``n`` little-endian ``bit_width``-bit unsigned integers packed back to back (LSB first)."""
    if bit_width == 0:
        return np.zeros(n, dtype=np.int64)
    b = np.frombuffer(stream + bytes(8), dtype=np.uint8)
    bit = np.arange(n, dtype=np.int64) * bit_width
    byte, shift = bit >> 3, (bit & 7).astype(np.uint64)
    word = np.zeros(n, dtype=np.uint64)
    for k in range((bit_width + 7 + 7) // 8):  # bytes spanned by a value starting at any bit
        word |= b[byte + k].astype(np.uint64) << np.uint64(8 * k)
    return ((word >> shift) & np.uint64((1 << bit_width) - 1)).astype(np.int64)


# --- a minimal reader of thrift's compact protocol (the encoding of parquet page headers) ---


def _varint(b, i: int) -> tuple[int, int]:
    out, shift = 0, 0
    while True:
        x = b[i]
        i += 1
        out |= (x & 0x7F) << shift
        if x < 0x80:
            return out, i
        shift += 7
        if shift > 63:
            raise _Unsupported("varint too long")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _struct(b, i: int, keep: dict) -> tuple[dict, int]:
    """Parse a thrift struct at ``i``; integer/bool fields and nested structs named in ``keep``."""
    out: dict = {}
    fid = 0
    while True:
        h = b[i]
        i += 1
        if h == 0:
            return out, i
        t, delta = h & 0x0F, h >> 4
        if delta:
            fid += delta
        else:
            v, i = _varint(b, i)
            fid = _zigzag(v)
        if fid in keep and t in (1, 2):
            out[fid] = t == 1
        elif fid in keep and t in (3, 4, 5, 6):
            if t == 3:
                out[fid] = int.from_bytes(b[i:i + 1], "little", signed=True)
                i += 1
            else:
                v, i = _varint(b, i)
                out[fid] = _zigzag(v)
        elif fid in keep and t == 12:
            out[fid], i = _struct(b, i, keep[fid] or {})
        else:
            i = _skip(b, i, t)


def _skip(b, i: int, t: int) -> int:
    if t in (1, 2):
        return i
    if t == 3:
        return i + 1
    if t in (4, 5, 6):
        return _varint(b, i)[1]
    if t == 7:
        return i + 8
    if t == 8:
        n, i = _varint(b, i)
        return i + n
    if t in (9, 10):
        h = b[i]
        i += 1
        n, et = h >> 4, h & 0x0F
        if n == 15:
            n, i = _varint(b, i)
        for _ in range(n):
            i = i + 1 if et in (1, 2) else _skip(b, i, et)
        return i
    if t == 11:
        n, i = _varint(b, i)
        if n:
            kv = b[i]
            i += 1
            for _ in range(n):
                i = _skip(b, i, kv >> 4)
                i = _skip(b, i, kv & 0x0F)
        return i
    if t == 12:
        return _struct(b, i, {})[1]
    raise _Unsupported(f"thrift type {t}")

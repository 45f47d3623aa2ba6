"""The sniffed-qk on-disk layout (SPEC §3.1): discover, read and write head folders.

A dataset root holds, at any depth, one folder per captured head named ``l{LL}h{HH}{q|k}``
with a ``data.parquet`` inside. Query folders use the query-head index, key folders the
KV-head index. An optional ``qkdb_dataset.json`` at the root records the model facts
(written by ``qkdb simulate`` and ``qkdb sniff``) so that ``qkdb ingest --path`` needs no flags.

Vector values no attention head produces — NaN, ±inf, or a magnitude beyond :data:`VALUE_BOUND` —
mean a damaged or mis-written file. :func:`read_head` decodes without judging them;
:func:`screen_values` finds them exactly and refuses the file (or drops their rows), and
:func:`within_bound` proves a clean file clean from its moments at no extra pass over the vectors.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from qkdb.errors import InputError
from qkdb.ingest.sources.vector_pages import read_fixed_size_vectors

HEAD_DIR = re.compile(r"^l(\d{2,3})h(\d{2,3})([qk])$")
DATA_FILE = "data.parquet"
METADATA_FILE = "qkdb_dataset.json"

# The largest |value| a query or key vector may hold: float16's largest finite number. Real heads
# stay far below it (the bundled SmolLM2-135M capture peaks at 20.25, the simulator at ~19; models
# run in float16 cannot exceed it), while random bytes read as float32 land beyond it 44% of the
# time. The measurements behind it: docs/reliability.md, "Values no attention head produces".
VALUE_BOUND = 65504.0


@dataclass(frozen=True)
class HeadFile:
    """One captured head folder: ``kind`` is ``"q"`` or ``"k"``; ``head`` is the KV index for keys."""

    layer: int
    head: int
    kind: str
    path: Path

    @property
    def name(self) -> str:
        return head_dir_name(self.layer, self.head, self.kind)


@dataclass
class Discovery:
    """What a scan of a dataset root found."""

    root: Path
    queries: dict[tuple[int, int], HeadFile] = field(default_factory=dict)
    keys: dict[tuple[int, int], HeadFile] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


@dataclass
class HeadData:
    """Vectors of one head file in float64 with their positions (rows with a null vector or position dropped).

    Until :func:`screen_values` has run (``screened``), values may be ones no head produces.
    """

    vectors: np.ndarray  # (n, d) float64
    positions: np.ndarray  # (n,) float64
    example_id: np.ndarray | None  # (n,) int64 or None when the file has no such column
    n_dropped: int  # rows dropped: null ones, and bad ones when screen_values dropped them
    sliding_window: int | None = None
    # (d,) column sums of ``vectors``, set only when they and every position are finite: then
    # every vector value is finite too (NaN or ±inf would make its column's sum non-finite).
    vector_sum: np.ndarray | None = None
    screened: bool = False  # every value is known to be finite and within ±VALUE_BOUND
    # (n,) each query row's softmax normaliser (qkdb sniff's column ``lse``), or None when not captured
    lse: np.ndarray | None = None


@dataclass(frozen=True)
class BadValues:
    """Where a file holds values no attention head produces (see :func:`find_bad_values`)."""

    rows: np.ndarray  # (n,) bool: rows with a bad vector value or a non-finite position
    non_finite: int  # vector values that are NaN or ±inf
    beyond: int  # finite vector values beyond ±VALUE_BOUND
    bad_positions: int  # non-finite positions
    largest: float  # the largest finite |value| beyond the bound (NaN when there is none)

    @property
    def n_rows(self) -> int:
        return int(self.rows.sum())

    def describe(self, n: int) -> str:
        """One clause: how many values of which kind, in how many of the ``n`` rows."""
        parts = []
        if self.non_finite or self.beyond:
            kinds = []
            if self.non_finite:
                kinds.append(f"{self.non_finite} NaN or infinite")
            if self.beyond:
                kinds.append(f"{self.beyond} beyond ±{VALUE_BOUND:g} (largest |value| {self.largest:.3g})")
            total = self.non_finite + self.beyond
            parts.append(f"{total} vector value{'s' if total != 1 else ''} no attention head produces "
                         f"({', '.join(kinds)})")
        if self.bad_positions:
            parts.append(f"{self.bad_positions} non-finite position{'s' if self.bad_positions != 1 else ''}")
        return f"{' and '.join(parts)} in {self.n_rows} of {n} rows"


def head_dir_name(layer: int, head: int, kind: str) -> str:
    """The folder name of a head, e.g. ``head_dir_name(3, 7, "q") == "l03h07q"``."""
    if kind not in ("q", "k"):
        raise ValueError(f"kind must be 'q' or 'k', got {kind!r}")
    return f"l{layer:02d}h{head:02d}{kind}"


def discover(root: str | os.PathLike) -> Discovery:
    """Find every head folder below ``root`` (any depth, hidden folders skipped).

    Raises :class:`InputError` when the root is missing, when two folders claim the same
    head, or when nothing at all is found.
    """
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root}: no such dataset directory", kind="not_found")
    if not root.is_dir():
        raise InputError(f"{root}: not a directory (give the dataset's root folder)")
    found = Discovery(root=root)
    # Folders may be symlinks (a dataset assembled from others' head folders): followed, each real
    # folder once, so that a link back up the tree cannot loop.
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        here = Path(dirpath)
        if here == root:
            continue
        m = HEAD_DIR.match(here.name)
        if not m:
            if DATA_FILE in filenames:
                found.ignored.append(str(here.relative_to(root)))
            continue
        dirnames[:] = []  # head folders hold files, not more heads
        if DATA_FILE not in filenames:
            found.ignored.append(str(here.relative_to(root)))
            continue
        layer, head, kind = int(m.group(1)), int(m.group(2)), m.group(3)
        hf = HeadFile(layer, head, kind, here / DATA_FILE)
        table = found.queries if kind == "q" else found.keys
        if (layer, head) in table:
            other = table[(layer, head)].path.parent
            raise InputError(
                f"{root}: head {hf.name} appears twice: {other.relative_to(root)} and {here.relative_to(root)}"
            )
        table[(layer, head)] = hf
    if not found.queries:
        raise InputError(
            f"{root}: no query head folders (l{{LL}}h{{HH}}q/data.parquet) found: not a sniffed-qk dataset "
            "(`qkdb sniff` or `qkdb simulate` write one; docs/hub.md describes the layout)"
        )
    return found


def largest_position(paths) -> int | None:
    """The largest token position in the head files ``paths``, from their parquet footers' statistics.

    Reads no data page (statistics are written by every parquet writer qkdb knows); None when a file
    has no statistics for ``position`` or cannot be read (then the caller has no model-wide answer).
    """
    top = None
    for path in paths:
        try:
            meta = pq.ParquetFile(path).metadata
            col = meta.schema.to_arrow_schema().get_field_index("position")
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(col).statistics
                if stats is None or not stats.has_min_max:
                    return None
                top = int(stats.max) if top is None else max(top, int(stats.max))
        except (OSError, pa.ArrowException, ValueError, KeyError):
            return None
    return top


def read_metadata(root: str | os.PathLike) -> dict:
    """The dataset's ``qkdb_dataset.json`` as a dict, or ``{}`` when there is none."""
    path = Path(root) / METADATA_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def write_metadata(root: str | os.PathLike, facts: dict) -> Path:
    path = Path(root) / METADATA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    return path


def _numpy(arr: pa.Array) -> np.ndarray:
    """The values of a pyarrow array as numpy, zero-copy when it is null-free and fixed-width.

    ``Array.to_numpy`` makes pyarrow import pandas when it is installed (~0.25 s in every worker
    process); reading the value buffer directly does not. Anything else goes through pyarrow.
    """
    t = arr.type
    if arr.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        dtype = np.dtype(t.to_pandas_dtype())
        return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    return arr.to_numpy(zero_copy_only=False)


def _vector_values(col: pa.Array, path: Path) -> tuple[pa.Array, int]:
    """Flat float values and the dimension of a FixedSizeList or list vector column without nulls."""
    t = col.type
    if pa.types.is_fixed_size_list(t):
        d = t.list_size
        values = col.flatten()
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        import pyarrow.compute as pc  # (here: see read_head)

        lengths = _numpy(pc.list_value_length(col))
        if len(lengths) == 0:
            d = 0
        else:
            d = int(lengths[0])
            if not np.all(lengths == d):
                raise InputError(
                    f"{path}: vectors have different lengths ({int(lengths.min())}..{int(lengths.max())})"
                )
        values = col.flatten()
    else:
        raise InputError(f"{path}: column 'vector' has type {t}; expected a list of floats")
    if not (pa.types.is_floating(values.type)):
        raise InputError(f"{path}: column 'vector' holds {values.type}; expected float16/float32/float64")
    return values, d


def read_head(path: str | os.PathLike) -> HeadData:
    """Read one ``data.parquet`` into float64 arrays, once, without Python loops over rows.

    Accepts FixedSizeList or list vectors of float16/32/64. Rows whose vector or position is
    null are dropped and counted in ``n_dropped``; values are not judged here (see
    :func:`screen_values`). A null-free FixedSizeList float32/float64 column (what sniffers write)
    is read straight from its pages into float64 (:mod:`qkdb.ingest.sources.vector_pages`); every other
    column goes through pyarrow's reader. Both paths end in the same arrays and the same column
    sums, so whatever judges the values treats them alike.
    """
    path = Path(path)
    try:
        # Pre-buffering coalesces reads for remote storage; on a memory-mapped local file it only
        # adds a task per column to pyarrow's I/O pool (~0.2 ms a file, half of reading positions).
        pf = pq.ParquetFile(path, memory_map=True, pre_buffer=False)
        names = set(pf.schema_arrow.names)
        missing = {"position", "vector"} - names
        if missing:
            raise InputError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        extra = [c for c in ("example_id", "sliding_window", "lse") if c in names]
        fast = read_fixed_size_vectors(pf, path, "vector")
        cols = ["position"] + extra if fast is not None else ["position", "vector"] + extra
        table = pf.read(columns=cols, use_threads=fast is None)
    except InputError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read parquet ({exc})") from exc

    pos = table.column("position").combine_chunks()
    if not (pa.types.is_integer(pos.type) or pa.types.is_floating(pos.type)):
        raise InputError(f"{path}: column 'position' has type {pos.type}; expected integers")
    # pyarrow.compute is imported only where a file needs it (nulls, plain lists): ~0.06 s of
    # imports that every ingest's parent and fork server would otherwise pay while starting up.
    if fast is not None:
        # The fast path guarantees no null vector; only positions can be null.
        n_null = pos.null_count
        vectors = fast
        if n_null:
            import pyarrow.compute as pc

            keep = pc.is_valid(pos)
            vectors = vectors[_numpy(keep)]
            table = table.filter(keep)
            pos = table.column("position").combine_chunks()
    else:
        import pyarrow.compute as pc

        vec = table.column("vector").combine_chunks()
        n_rows = len(vec)
        keep = pc.and_(pc.is_valid(vec), pc.is_valid(pos))
        n_null = n_rows - pc.sum(keep).as_py() if n_rows else 0
        if n_null:
            table = table.filter(keep)
            vec = table.column("vector").combine_chunks()
            pos = table.column("position").combine_chunks()
        values, d = _vector_values(vec, path)
        n = len(vec)
        if n and d == 0:
            raise InputError(f"{path}: vectors are empty")
        flat = _numpy(values)
        # (float16 inf stays inf, NaN stays NaN: float-to-float widening never warns)
        vectors = flat.reshape(n, d).astype(np.float64, copy=flat.dtype != np.float64)
    positions = _numpy(pos).astype(np.float64)
    example_id = None
    if "example_id" in table.column_names:
        ex = table.column("example_id").combine_chunks()
        example_id = _numpy(ex.fill_null(-1) if ex.null_count else ex).astype(np.int64)
    # Column sums test every value in one pass the moments reuse for the mean: NaN or ±inf anywhere
    # make its column's sum non-finite, so finite sums prove every value finite. When they are not
    # (or a sum of huge finite values overflowed), none is passed on: screen_values tests each row.
    with np.errstate(over="ignore", invalid="ignore"):  # (inf − inf, overflow: said by the None)
        vector_sum = vectors.sum(axis=0)
    if not (np.isfinite(vector_sum).all() and np.isfinite(positions).all()):
        vector_sum = None
    sliding = None
    if "sliding_window" in table.column_names:
        sw = table.column("sliding_window").drop_null()
        if len(sw):
            sliding = int(_numpy(sw.combine_chunks()).max())
    lse = None
    if "lse" in table.column_names:
        col = table.column("lse").combine_chunks()
        lse = _numpy(col.fill_null(float("nan")) if col.null_count else col).astype(np.float64)
    return HeadData(vectors, positions, example_id, int(n_null), sliding, vector_sum, lse=lse)


def find_bad_values(data: HeadData) -> BadValues | None:
    """Every vector value that is NaN, ±inf or beyond ±VALUE_BOUND, and every non-finite position.

    Exact and vectorised (a few passes over the vectors): meant for files that a cheap test
    (:func:`within_bound`, or non-finite column sums) did not prove clean. None when all is well.
    """
    X = data.vectors
    # NaN fails every comparison, so `~(|x| <= bound)` catches NaN, ±inf and the too large at once.
    bad = ~(np.abs(X) <= VALUE_BOUND)
    bad_pos = ~np.isfinite(data.positions)
    rows = bad.any(axis=1) | bad_pos
    if not rows.any():
        return None
    finite = np.isfinite(X)
    beyond = bad & finite
    return BadValues(
        rows=rows,
        non_finite=int(X.size - np.count_nonzero(finite)),
        beyond=int(np.count_nonzero(beyond)),
        bad_positions=int(np.count_nonzero(bad_pos)),
        largest=float(np.abs(X[beyond]).max()) if beyond.any() else float("nan"),
    )


def screen_values(data: HeadData, path: str | os.PathLike, *, drop: bool = False) -> tuple[HeadData, int]:
    """Refuse a file holding values no attention head produces, or drop the rows that hold them.

    Parameters
    ----------
    data : HeadData
        What :func:`read_head` returned for ``path``.
    path : path-like
        The file, for the message.
    drop : bool
        Drop the offending rows (counted in ``n_dropped``) instead of raising.

    Returns
    -------
    (HeadData, int)
        The data with ``screened`` set (and the offending rows gone when ``drop``), and the
        number of rows dropped.

    Raises
    ------
    InputError
        Unless ``drop``: naming the file and how many values are NaN, infinite or beyond
        ±VALUE_BOUND, in how many rows.
    """
    if data.screened:
        return data, 0
    bad = find_bad_values(data)
    if bad is None:
        return replace(data, screened=True), 0
    n = len(data.positions)
    if not drop:
        raise InputError(
            f"{path}: {bad.describe(n)}; the file looks damaged "
            "(--drop-bad-vectors drops those rows, --skip-bad-heads skips the head)"
        )
    keep = ~bad.rows
    example_id = data.example_id[keep] if data.example_id is not None else None
    out = HeadData(data.vectors[keep], data.positions[keep], example_id, data.n_dropped + bad.n_rows,
                   data.sliding_window, None, screened=True, lse=None if data.lse is None else data.lse[keep])
    return out, bad.n_rows


def within_bound(mean: np.ndarray, cov: np.ndarray, n: int) -> bool:
    """Whether moments alone prove every value of their vectors within ±VALUE_BOUND.

    One term of a sum of squares is at most the sum: ``|x_ij − μ_j| ≤ sqrt(n · cov_jj)``, so
    ``|μ_j| + sqrt(n · cov_jj) ≤ VALUE_BOUND`` for every column bounds every value without another
    pass over the vectors. Real heads pass with a wide margin (8,000 vectors of standard deviation
    10 reach ~900); a file that does not pass is not necessarily bad, only not proven clean:
    :func:`screen_values` decides. NaN anywhere fails the test. The bound is shrunk by 1e-6
    (relative) to cover the rounding of the moments.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # (inf or NaN moments fail the test below)
        reach = np.abs(mean) + np.sqrt(n * np.diagonal(cov))
    return bool(np.all(reach <= VALUE_BOUND * (1 - 1e-6)))


def write_head(
    root: str | os.PathLike,
    layer: int,
    head: int,
    kind: str,
    vectors: np.ndarray,
    positions: np.ndarray,
    example_id: np.ndarray | None = None,
    bucket: np.ndarray | None = None,
    sliding_window: int | None = None,
    token_str: list[str] | None = None,
    dtype: str = "float32",
    compression: str = "zstd",
    lse: np.ndarray | None = None,
) -> Path:
    """Write one head folder in the sniffed-qk layout (FixedSizeList vectors, zstd unless told otherwise);
    ``lse``: a query file's softmax normaliser per row (column ``lse``, float64)."""
    vectors = np.ascontiguousarray(vectors, dtype=dtype)
    n, d = vectors.shape
    folder = Path(root) / head_dir_name(layer, head, kind)
    folder.mkdir(parents=True, exist_ok=True)
    cols = {
        "bucket": pa.array(np.zeros(n, np.int32) if bucket is None else np.asarray(bucket, np.int32)),
        "example_id": pa.array(np.zeros(n, np.int32) if example_id is None else np.asarray(example_id, np.int32)),
        "position": pa.array(np.asarray(positions, np.int32)),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), d),
        "sliding_window": pa.array([sliding_window] * n, pa.int32()),
    }
    if token_str is not None:
        cols["token_str"] = pa.array(token_str, pa.string())
    if lse is not None:
        cols["lse"] = pa.array(np.asarray(lse, np.float64))
    path = folder / DATA_FILE
    # Dictionary-encoding full-mantissa floats is wasted work (they never repeat), and so are their
    # min/max statistics: no reader prunes on a vector coordinate, and for float16 they took a third of
    # the write (docs/benchmarks.md, "the capture on a real model").
    others = [c for c in cols if c != "vector"]
    pq.write_table(pa.table(cols), path, compression=compression, use_dictionary=others, write_statistics=others)
    return path

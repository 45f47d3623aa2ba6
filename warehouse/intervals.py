"""The table ``finding_intervals``: a 95% interval for every finding, computed when models are published.

The findings view (``sql/findings.sql``) measures each finding in SQL from the rows of
``finding_inputs``. Its intervals need a bootstrap over models and heads, which is Python's
job: :func:`compute` reads the same rows, recomputes each value (its ``estimate``) and its
interval (:mod:`qkdb.warehouse.inference`), and stamps the result with ``finding_state``'s
fingerprint. The view uses an interval only while fingerprint and estimate still match, so an
interval never outlives the data or the params it was computed for.

On disk the table is one parquet file, ``<home>/finding_intervals/data.parquet``, replaced
atomically under a lock after every publish or removal (:func:`qkdb.warehouse.catalog.refresh_intervals`); a connection whose
view of the data differs (models restricted, params shadowed) gets its own copy as a temporary
table (:func:`install`).
"""

from __future__ import annotations

import datetime as dt
import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from qkdb.warehouse import inference
from qkdb.warehouse.batches import empty_table, to_batch
from qkdb.warehouse.results import intervals_current
from qkdb.warehouse.schema import FINDING_INTERVALS
from qkdb.warehouse.store import write_file

if TYPE_CHECKING:
    import duckdb

FOLDER = FINDING_INTERVALS.name
DATA = "data.parquet"
N_BOOT = 2000  # resamples per interval: the 2.5% tail rests on 50 of them
SEED = 17  # fixed: the same warehouse always gives the same intervals
LEVEL = 0.95
MIN_BOOT = 10  # heads a bootstrap interval needs: below that its percentiles are not an interval
MAX_WEIGHTS = 4_000_000  # replicate × unit weights held at once (32 MB), whatever the warehouse size


@dataclass
class _Finding:
    """The rows of one (finding, scope), aligned to its scope's units."""

    id: str
    scope: str
    stat: str
    cols: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class _Scope:
    """The resampling units of a scope: heads (``unit``) grouped in clusters, in a fixed order."""

    name: str
    clusters: list[str]
    sizes: np.ndarray
    index: dict[tuple[str, str], int]
    findings: list[_Finding] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.sizes.sum())


def _fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("select fingerprint from finding_state").fetchall()[0][0]


def _read_inputs(con: duckdb.DuckDBPyConnection, ids: tuple[str, ...] | None = None) -> list[_Scope]:
    """``finding_inputs`` as resampling groups, each finding's values as arrays over its group's units.

    Findings of one scope that rest on the same clusters share one group (and so the same
    resamples); a finding that reads more or other clusters (Llama's lead over the other seed
    groups, say) gets its own, so that every resample draws exactly its clusters.
    """
    query = "select id, scope, stat, cluster, unit, grp, arm, x, y from finding_inputs"
    if ids is not None:
        query += " where id in (" + ", ".join("'" + i.replace("'", "''") + "'" for i in ids) + ")" if ids else " where false"
    # fetchnumpy, not Arrow: pyarrow's conversions with nulls import pandas (~0.2 s of an ingest).
    got = con.sql(query).fetchnumpy()

    def values(name: str) -> list:
        col = got[name]
        mask = np.ma.getmaskarray(col)
        return [None if m else v for v, m in zip(np.ma.getdata(col).tolist(), mask.tolist())]

    cols = {name: values(name) for name in ("id", "scope", "stat", "cluster", "unit", "grp", "arm")}
    x = np.ma.filled(np.ma.asarray(got["x"], dtype=np.float64), np.nan)
    y = np.ma.filled(np.ma.asarray(got["y"], dtype=np.float64), np.nan)
    rows_of: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, key in enumerate(zip(cols["scope"], cols["id"])):
        rows_of[key].append(i)
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[str, list[int]]]] = defaultdict(list)
    for (scope_name, fid), rows in rows_of.items():
        clusters = tuple(sorted({cols["cluster"][i] for i in rows}))
        groups[(scope_name, clusters)].append((fid, rows))
    scopes = []
    for (name, clusters), members in sorted(groups.items()):
        keys = sorted({(cols["cluster"][i], cols["unit"][i]) for _, rows in members for i in rows})
        sizes = np.array([sum(1 for c, _ in keys if c == k) for k in clusters], dtype=np.int64)
        index = {k: j for j, k in enumerate(keys)}
        scope = _Scope(name, list(clusters), sizes, index)
        for fid, frows in sorted(members):
            f = _Finding(fid, name, cols["stat"][frows[0]])
            pos = np.array([index[(cols["cluster"][i], cols["unit"][i])] for i in frows])
            arm = np.array([-1 if cols["arm"][i] is None else cols["arm"][i] for i in frows])
            _align(f, scope.n, pos, arm, x[frows], y[frows], [cols["grp"][i] for i in frows])
            scope.findings.append(f)
        scopes.append(scope)
    return scopes


def _align(f: _Finding, n: int, pos: np.ndarray, arm: np.ndarray, x: np.ndarray, y: np.ndarray, grp: list) -> None:
    """Put a finding's rows in its scope's unit order (``pos``); units without a row hold NaN."""

    def spread(values: np.ndarray, where: np.ndarray) -> np.ndarray:
        v = np.full(n, np.nan)
        v[where] = values
        return v

    if f.stat.startswith("arm"):
        # A change: the unit's value at each checkpoint (heads paired by layer and head).
        for a in (0, 1):
            f.cols[f"x{a}"] = spread(x[arm == a], pos[arm == a])
        return
    f.cols["x"], f.cols["y"] = spread(x, pos), spread(y, pos)
    if f.stat == "lead":
        f.cols["grp"] = np.full(n, "", dtype=object)
        f.cols["grp"][pos] = grp
        f.cols["target"] = np.zeros(n, dtype=bool)
        f.cols["target"][pos] = arm == 1


def _mean_terms(tag: str, v: np.ndarray) -> dict[str, np.ndarray]:
    ok = np.isfinite(v)
    return {f"{tag}.sum": np.where(ok, v, 0.0), f"{tag}.n": ok.astype(np.float64)}


def _mean(S: dict[str, np.ndarray], tag: str) -> np.ndarray:
    n = S[f"{tag}.n"]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, S[f"{tag}.sum"] / np.where(n > 0, n, 1.0), np.nan)


def _terms(f: _Finding) -> dict[str, np.ndarray]:
    """The vectors over units whose weighted sums give the finding's statistic (none: the median)."""
    c = f.cols
    if f.stat in ("mean", "share", "model_range_mean", "model_range_share"):
        return _mean_terms("x", c["x"])
    if f.stat in ("ratio_of_means", "diff_of_means"):
        return {**_mean_terms("x", c["x"]), **_mean_terms("y", c["y"])}
    if f.stat == "corr":
        return dict(zip(("n", "sx", "sy", "sxx", "syy", "sxy"), inference.corr_terms(c["x"], c["y"]).T))
    if f.stat == "lead":
        x, grp, target = c["x"], c["grp"], c["target"]
        terms = _mean_terms("lead", np.where(target, x, np.nan))
        for k, g in enumerate(sorted(set(grp[~target]) - {""})):
            terms.update(_mean_terms(f"other{k}", np.where((grp == g) & ~target, x, np.nan)))
        return terms
    if f.stat.startswith("arm"):
        return {**_mean_terms("a0", c["x0"]), **_mean_terms("a1", c["x1"])}
    return {}


def _from_sums(f: _Finding, S: dict[str, np.ndarray], W: np.ndarray) -> np.ndarray:
    """The finding's statistic under each row of weights ``W``, from the weighted sums ``S`` of its terms."""
    if f.stat in ("mean", "share", "model_range_mean", "model_range_share"):
        return _mean(S, "x")
    if f.stat == "median":
        return inference.weighted_median(W, f.cols["x"])
    if f.stat in ("max", "exact_max"):
        x = f.cols["x"]
        return np.full(W.shape[0], np.nanmax(x) if np.isfinite(x).any() else np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        if f.stat == "ratio_of_means":
            den = _mean(S, "y")
            return np.where(den != 0, _mean(S, "x") / np.where(den != 0, den, 1.0), np.nan)
        if f.stat == "diff_of_means":
            return _mean(S, "x") - _mean(S, "y")
        if f.stat == "corr":
            return inference.corr_from_sums(np.column_stack([S[k] for k in ("n", "sx", "sy", "sxx", "syy", "sxy")]))
        if f.stat == "lead":
            others = [_mean(S, k[:-4]) for k in S if k.startswith("other") and k.endswith(".sum")]
            if not others:
                return np.full(W.shape[0], np.nan)
            stacked = np.vstack(others)
            seen = np.isfinite(stacked)
            best = np.where(seen.any(axis=0), np.max(np.where(seen, stacked, -np.inf), axis=0), np.nan)
            return _mean(S, "lead") - best
        if f.stat.startswith("arm"):
            m0, m1 = _mean(S, "a0"), _mean(S, "a1")
            if f.stat == "arm_diff":
                return m1 - m0
            safe = np.where(m0 != 0, m0, 1.0)
            if f.stat == "arm_ratio":
                return np.where(m0 != 0, m1 / safe, np.nan)
            if f.stat == "arm_pct":
                return np.where(m0 != 0, 100.0 * (m1 - m0) / np.abs(safe), np.nan)
    raise ValueError(f"unknown statistic {f.stat!r} of finding {f.id}")


class _Evaluator:
    """Every finding of a scope under many weight rows at once: one matrix product per block of rows."""

    def __init__(self, findings: list[_Finding]):
        self.findings = findings
        self.slots: dict[str, dict[str, int]] = {}
        columns: list[np.ndarray] = []
        for f in findings:
            self.slots[f.id] = {}
            for name, v in _terms(f).items():
                self.slots[f.id][name] = len(columns)
                columns.append(v)
        self.M = np.column_stack(columns) if columns else None

    def __call__(self, W: np.ndarray) -> dict[str, np.ndarray]:
        P = W @ self.M if self.M is not None else None
        return {
            f.id: _from_sums(f, {name: P[:, j] for name, j in self.slots[f.id].items()}, W)
            for f in self.findings
        }


def _data_units(f: _Finding) -> np.ndarray:
    """Which units carry a value for this finding."""
    c = f.cols
    if f.stat.startswith("arm"):
        return np.isfinite(c["x0"]) | np.isfinite(c["x1"])
    if f.stat in ("ratio_of_means", "diff_of_means"):
        return np.isfinite(c["x"]) | np.isfinite(c["y"])
    if f.stat == "corr":
        return np.isfinite(c["x"]) & np.isfinite(c["y"])
    return np.isfinite(c["x"])


def _rng(*keys: str) -> np.random.Generator:
    return np.random.default_rng([SEED, *(zlib.crc32(k.encode()) for k in keys)])


_ROW_COLUMNS = ("id", "scope", "stat", "estimate", "ci_low", "ci_high", "low_max", "high_min", "ci_method", "n_units", "n_boot")


def _row(f: _Finding, estimate: float, low=math.nan, high=math.nan, method="", n_units=0, n_boot=None,
         low_max=math.nan, high_min=math.nan) -> dict:
    def num(v):
        return None if v is None or not math.isfinite(v) else float(v)

    return {
        "id": f.id, "scope": f.scope, "stat": f.stat, "estimate": num(estimate), "ci_low": num(low),
        "ci_high": num(high), "low_max": num(low_max), "high_min": num(high_min), "ci_method": method,
        "n_units": n_units, "n_boot": n_boot,
    }


def _model_range(f: _Finding, scope: _Scope, estimate: float, counts: dict[str, np.ndarray]) -> dict:
    """A claim about every model's own value: each model's interval, jointly at 95% (Bonferroni).

    A share: Wilson. A mean: its bootstrap standard error (resampled heads, ``counts[model]``,
    shared by the scope's findings) times Student's t: over a model's hundreds of heads the mean is
    near normal, and the Bonferroni levels lie too far out for a percentile of 2,000 resamples.
    (For these findings the cluster is the model.)
    """
    x = f.cols["x"]
    start = np.concatenate([[0], np.cumsum(scope.sizes)])
    blocks = [(m, slice(start[k], start[k + 1])) for k, m in enumerate(scope.clusters)
              if np.isfinite(x[start[k]:start[k + 1]]).any()]
    if not blocks:
        return _row(f, estimate, method="no data")
    level = 1.0 - (1.0 - LEVEL) / len(blocks)
    lows, highs = [], []
    for m, block in blocks:
        sel = np.isfinite(x[block])
        xm = x[block][sel]
        if f.stat == "model_range_share":
            lo, hi = inference.wilson_interval(float(xm.sum()), xm.size, level)
        elif xm.size < MIN_BOOT:
            lo = hi = math.nan
        else:
            se = float(np.nanstd(inference.weighted_mean(counts[m][:, sel], xm), ddof=1))
            half = -inference.t_quantile((1.0 - level) / 2.0, xm.size - 1) * se
            lo, hi = float(xm.mean()) - half, float(xm.mean()) + half
        lows.append(lo)
        highs.append(hi)
    models = [m for m, _ in blocks]
    lows, highs = np.array(lows), np.array(highs)
    if not (np.isfinite(lows).all() and np.isfinite(highs).all()):
        return _row(f, estimate, method=f"a model has too few heads for a bootstrap interval (needs {MIN_BOOT})",
                    n_units=len(models))
    how = "Wilson score interval of its share" if f.stat == "model_range_share" else (
        f"its mean ± t × the bootstrap standard error over its heads ({N_BOOT} resamples)")
    joint = f", jointly at 95% (Bonferroni over {len(models)} models)" if len(models) > 1 else ""
    return _row(
        f, estimate, lows.min(), highs.max(), f"every model's own interval: {how}{joint}", len(models),
        None if f.stat == "model_range_share" else N_BOOT, low_max=lows.max(), high_min=highs.min(),
    )


def _interval(f: _Finding, scope: _Scope, estimate: float, reps: np.ndarray | None,
              counts: dict[str, np.ndarray]) -> dict:
    units = _data_units(f)
    n = int(units.sum())
    if not math.isfinite(estimate):
        return _row(f, estimate, method="no value")
    if f.stat == "exact_max":
        # The drift lemma is an identity of each head's own float64 arithmetic, not a rate among
        # heads: a head not sampled adds no uncertainty, so the value over the ingested heads is exact.
        return _row(f, estimate, estimate, estimate,
                    f"exact: the largest of {n} ingested heads (an identity of each head's arithmetic, no sampling)", n)
    if f.stat == "max":
        # A maximum of correlations (|r| <= 1) among heads: heads not sampled can only raise it,
        # so what the sample shows is [observed, 1].
        return _row(f, estimate, estimate, max(estimate, 1.0),
                    f"the largest of {n} heads: the largest over all heads lies between it and 1", n)
    if f.stat.startswith("model_range"):
        return _model_range(f, scope, estimate, counts)
    start = np.concatenate([[0], np.cumsum(scope.sizes)])
    m = int(sum(units[start[i]:start[i + 1]].any() for i in range(len(scope.sizes))))
    clustered = m > 1 and not f.stat.startswith("arm")
    top = m if clustered else n
    if f.stat == "share" and not clustered:
        k = float(np.nansum(f.cols["x"]))
        lo, hi = inference.wilson_interval(k, n, LEVEL)
        return _row(f, estimate, lo, hi, f"Wilson score interval over {n} heads", n)
    if f.stat == "corr" and not clustered:
        if n < 4:
            return _row(f, estimate, method=f"too few heads for an interval ({n})", n_units=n)
        lo, hi = inference.fisher_z_interval(max(-1.0, min(1.0, estimate)), n, LEVEL)
        return _row(f, estimate, lo, hi, f"Fisher z over {n} heads", n)
    if n < MIN_BOOT or top < 2:
        # Six heads that all show 100% say little about a seventh: resamples of so few heads do
        # not show the spread that was not sampled.
        what = f"{n} heads" if n < MIN_BOOT else f"{top} models"
        return _row(f, estimate, method=f"too few for a bootstrap interval ({what}; needs {MIN_BOOT} heads)", n_units=top)
    lo, hi = inference.percentile_interval(reps, top, LEVEL)
    if clustered:
        how = f"two-stage bootstrap over {m} models, then their heads ({N_BOOT} resamples, expanded percentile)"
    elif f.stat.startswith("arm"):
        how = f"paired bootstrap over {n} heads of the two checkpoints ({N_BOOT} resamples, expanded percentile)"
    else:
        how = f"bootstrap over {n} heads ({N_BOOT} resamples, expanded percentile)"
    if f.stat == "share":
        # The resampled shares cannot leave the observed range (at 0 of n every resample is 0):
        # the Wilson interval of the pooled heads is the least uncertainty n heads carry.
        k = float(np.nansum(f.cols["x"]))
        w_lo, w_hi = inference.wilson_interval(k, n, LEVEL)
        lo, hi = min(lo, w_lo), max(hi, w_hi)
        how = f"Wilson score interval over {n} heads, widened to a {how}"
    return _row(f, estimate, lo, hi, how, top, N_BOOT)


def _scope_rows(scope: _Scope) -> list[dict]:
    boot = [f for f in scope.findings if f.stat not in ("max", "exact_max") and not f.stat.startswith("model_range")]
    estimates = {f.id: float(v[0]) for f, v in zip(scope.findings, _Evaluator(scope.findings)(np.ones((1, scope.n))).values())}
    reps: dict[str, list[np.ndarray]] = {f.id: [] for f in boot}
    if boot:
        evaluate = _Evaluator(boot)
        rng = _rng(scope.name, *scope.clusters)
        chunk = max(1, min(N_BOOT, MAX_WEIGHTS // max(scope.n, 1)))
        done = 0
        while done < N_BOOT:
            W = inference.bootstrap_counts(scope.sizes, min(chunk, N_BOOT - done), rng)
            for fid, r in evaluate(W).items():
                reps[fid].append(r)
            done += W.shape[0]
    counts: dict[str, np.ndarray] = {}
    if any(f.stat == "model_range_mean" for f in scope.findings):
        # Each model's heads resampled within it, once for all of the scope's per-model findings.
        for k, cluster in enumerate(scope.clusters):
            counts[cluster] = inference.bootstrap_counts(np.array([scope.sizes[k]]), N_BOOT, _rng(scope.name, cluster))
    return [
        _interval(f, scope, estimates[f.id], np.concatenate(reps[f.id]) if f.id in reps else None, counts)
        for f in scope.findings
    ]


def compute(con: duckdb.DuckDBPyConnection, ids: tuple[str, ...] | None = None) -> pa.Table:
    """Every finding's interval for what ``con`` sees (its models, its params), as a ``finding_intervals`` table.

    ``ids`` limits it to those findings (the others then have no interval).
    """
    fingerprint = _fingerprint(con)
    rows: list[dict] = []
    with np.errstate(all="ignore"):
        for scope in _read_inputs(con, ids):
            rows.extend(_scope_rows(scope))
    columns = {c.name: [r[c.name] for r in rows] for c in FINDING_INTERVALS.columns if c.name in _ROW_COLUMNS}
    columns.update(fingerprint=fingerprint, computed_at=dt.datetime.now(dt.timezone.utc))
    if not rows:
        return empty_table(FINDING_INTERVALS)
    return pa.Table.from_batches([to_batch(FINDING_INTERVALS, columns)])


def install(con: duckdb.DuckDBPyConnection, table: pa.Table | None = None) -> None:
    """Give ``con`` its own ``finding_intervals`` (computed for what it sees unless given), for this connection only.

    A temporary table shadows the catalog's view of the same name, as ``restrict_models``
    shadows the base tables; it works on read-only connections.
    """
    table = compute(con) if table is None else table
    con.register("_qkdb_finding_intervals", table)
    try:
        con.execute("create or replace temp table finding_intervals as select * from _qkdb_finding_intervals")
    finally:
        con.unregister("_qkdb_finding_intervals")
    for c in FINDING_INTERVALS.columns:  # described like the catalog's view it shadows
        doc = c.doc.replace("'", "''")
        con.execute(f"comment on column temp.finding_intervals.\"{c.name}\" is '{doc}'")


def ensure_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Recompute ``con``'s intervals for this connection when they are out of date; True when it did."""
    if intervals_current(con):
        return False
    n_inputs = con.execute("select count(*) from finding_inputs").fetchall()[0][0]
    if n_inputs == 0 and con.execute("select count(*) from finding_intervals").fetchall()[0][0] == 0:
        return False  # nothing ingested: nothing to compute
    install(con)
    return True


def path(home: Path) -> Path:
    return home / FOLDER / DATA


def write(home: Path, table: pa.Table) -> Path:
    """Replace the stored table atomically (readers see the old file or the new one)."""
    return write_file(home / FOLDER, DATA, table)

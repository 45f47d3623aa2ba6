"""The table ``finding_intervals``: a 95% interval for every finding, computed when models are published.

The findings view (``sql/findings.sql``) measures each finding in SQL from the rows of
``finding_inputs``. Its intervals need resampling, which is Python's job: :func:`compute` reads
the same rows, recomputes each value (its ``estimate``) and its interval
(:mod:`qkdb.warehouse.inference`), and stamps the result with ``finding_state``'s fingerprint.
The view uses an interval only while fingerprint and estimate still match, so an interval never
outlives the data or the params it was computed for.

What an interval is about (``finding_inputs.estimand``; docs/findings.md, "How each interval is
computed", has the reasons and the calibration behind them):

* **these models**: the ingested models as they are. Each model's heads stand for the heads such a
  model has: its key-head groups (query heads sharing a key head are near-copies) are resampled
  within each layer (layers are strata: a model's layers are its own), Rao and Wu's rescaling
  bootstrap; nothing varies between models.
* **models like these**: the population of models the pooled ones stand for. The models are
  resampled as wholes (a bootstrap over models from their sums) once there are
  :data:`MIN_MODELS` of them; fewer get the jackknife over models with Student's t, which keeps
  its coverage where a bootstrap over a few models cannot.

Shares get a Wilson interval on the effective number of heads (the design effect of the groups),
so that a share at 0 or 100% is not a point; bounded values keep their bounds; a value read off
finitely many vectors is widened by the bias measured for its metric (``finding_inputs.x_bias``).

On disk the table is one parquet file, ``<home>/finding_intervals/data.parquet``, replaced
atomically under a lock after every publish or removal (:func:`qkdb.warehouse.catalog.refresh_intervals`); a connection whose
view of the data differs (models restricted, params shadowed) gets its own copy as a temporary
table (:func:`install`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import uuid
import zlib
from collections.abc import Iterator
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
# Key-head groups an interval inside a model needs: from 4, the stratified jackknife with Student's t
# (benchmarks/calibration.py: groups-8 and groups-16); below JACKKNIFE_UNITS it replaces the bootstrap,
# whose percentiles over few groups are too narrow (0.92 of the truths covered at 16 groups).
MIN_UNITS = 4
JACKKNIFE_UNITS = 40
# Below this many key-head groups an interval inside a model is labelled approximate: calibrated over
# 40 replications (benchmarks/calibration.py, groups-8 and groups-16), all findings together cover
# 0.96-0.97, but single findings 0.88-1.00 (003.F2.fisher 0.88-0.90, shares of heads 0.88 at 16 groups;
# issue 47's own check found 0.82 for 003.F1.pos_var_q at 8), not 0.93 each.
APPROXIMATE_UNITS = 24
# A median's interval still needs a bootstrap (the delete-one jackknife does not estimate a median's
# variance), and a bootstrap's percentiles need this many groups; so does a share's design effect.
MIN_BOOT_UNITS = 10
# Models a bootstrap over models needs; with fewer, the jackknife over models and Student's t.
# benchmarks/calibration.py --compare: the bootstrap over models covered 0.35-0.78 of some findings
# with 2-4 models, its goal from about 6 for means but a correlation only 0.82 at 12; the jackknife-t
# kept its coverage from 2 models to 24, and the two agree from 12 on (docs/findings.md).
MIN_MODELS = 16
# Beyond this many units, a bootstrap inside models draws the resampled sums from their normal
# law (the exact mean and covariance of the weights' sums) instead of weights for every unit: over
# thousands of units their sums are normal to well within the resampling noise.
EXACT_UNITS = 1_000
MAX_WEIGHTS = 4_000_000  # replicate × unit weights held at once (32 MB), whatever the warehouse size
# A set of weights kept for the findings after it (its scope's) only up to this many: a larger one is
# drawn again, a block at a time, by each finding that needs it (in a large warehouse, only medians do).
KEEP_WEIGHTS = MAX_WEIGHTS
THESE, POPULATION = "these models", "models like these"
# snapshot_inputs keeps finding_inputs' rows in an in-memory database named so (and a token: a
# database attached is seen by every connection of the process to the same file, so each snapshot
# has its own, and a connection knows its own by a temporary view, _qkdb_snapshot).
_SNAPSHOT = "qkdb_snapshot"

# The sums read per unit from SQL (corr: centred on the finding's means); `groups`: key-head groups behind them.
_SUMS = ("nx", "sx", "ny", "sy", "xb", "yb", "nxy", "cx", "cy", "cxx", "cyy", "cxy", "groups", "nvec", "tv")


@dataclass
class _Finding:
    """One (finding, scope): its sums per resampling unit, in a fixed order.

    The units are the key-head groups of its clusters (the models, or the series of a change), or,
    for a claim about models like these over several models, the models themselves (``by_model``).
    ``cluster`` indexes ``clusters``; ``stratum`` is a group's stratum (its cluster's layer, layers
    with a single group merged with their neighbour); ``t`` holds each unit's sums by name
    (:data:`_SUMS`, split by arm or group where the statistic has them). A median also has its
    heads' values (``values``, with ``value_unit``, ``value_bias``).
    """

    id: str
    scope: str
    stat: str
    estimand: str
    by_model: bool
    x_min: float
    x_max: float
    clusters: list[str]
    cluster: np.ndarray
    stratum: np.ndarray
    keys: list[str]
    t: dict[str, np.ndarray] = field(default_factory=dict)
    values: np.ndarray | None = None
    value_unit: np.ndarray | None = None
    value_bias: np.ndarray | None = None

    @property
    def n_units(self) -> int:
        return int(self.cluster.size)

    @property
    def n_resampled(self) -> int:
        """Units a resample weights: the models (by model), else the key-head groups."""
        return len(self.clusters) if self.by_model else self.n_units


def _fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("select fingerprint from finding_state").fetchall()[0][0]


def _ids_filter(ids: tuple[str, ...] | None) -> str:
    if ids is None:
        return ""
    if not ids:
        return " where false"
    return " where id in (" + ", ".join("'" + i.replace("'", "''") + "'" for i in ids) + ")"


# What each (finding, scope) is resampled by, and the means a correlation is centred on.
_SHAPE_SQL = f"""
{{create}} as
select
    id, scope,
    any_value(estimand) = '{POPULATION}' and count(distinct cluster) > 1 as by_model,
    avg(x) filter (where stat = 'corr' and y is not null) as mx,
    avg(y) filter (where stat = 'corr' and x is not null) as my
from {{where}}._qkdb_inputs
where x is not null or y is not null
group by id, scope
"""

# Sums per unit: per model (by_model) or per key-head group, sorted so that a finding's rows are
# contiguous and its units in (cluster, layer, group) order.
_SUMS_SQL = """
select
    i.id, i.scope, any_value(i.stat) as stat, any_value(i.estimand) as estimand, i.cluster, {unit} as kv_group,
    min({layer}) as layer, i.grp, i.arm, any_value(i.x_min) as x_min, any_value(i.x_max) as x_max,
    count(i.x) as nx, coalesce(sum(i.x), 0) as sx, count(i.y) as ny, coalesce(sum(i.y), 0) as sy,
    coalesce(sum(i.x_bias) filter (where i.x is not null), 0) as xb,
    coalesce(sum(i.y_bias) filter (where i.y is not null), 0) as yb,
    count(i.x - s.mx + i.y - s.my) as nxy,
    coalesce(sum(i.x - s.mx) filter (where i.y is not null), 0) as cx,
    coalesce(sum(i.y - s.my) filter (where i.x is not null), 0) as cy,
    coalesce(sum((i.x - s.mx) * (i.x - s.mx)) filter (where i.y is not null), 0) as cxx,
    coalesce(sum((i.y - s.my) * (i.y - s.my)) filter (where i.x is not null), 0) as cyy,
    coalesce(sum((i.x - s.mx) * (i.y - s.my)), 0) as cxy,
    {groups} as groups,
    coalesce(avg(i.n_vec) filter (where i.x is not null), 0) * {groups} as nvec,
    coalesce(max(i.x_text_var), 0) as tv,
    max(i.x) as top
from {where}._qkdb_inputs i
join {where}._qkdb_shape s on s.id = i.id and s.scope = i.scope
where {which}
group by i.id, i.scope, i.cluster, {unit}, i.grp, i.arm
having count(i.x) > 0 or count(i.y) > 0
order by i.id, i.scope, i.cluster, layer, kv_group, i.grp, i.arm
"""


def _read(con: duckdb.DuckDBPyConnection, ids: tuple[str, ...] | None) -> list[_Finding]:
    """``finding_inputs`` summed per resampling unit: one :class:`_Finding` per (finding, scope).

    The sums are taken in SQL (one pass over the heads), each query on one thread so that they add
    in one order (the same warehouse gives the same bytes); a claim about models like these is read
    as every model's sums, so what Python holds grows with the models, not the heads. A median
    reads its heads' values as well. Over a snapshot (:func:`snapshot_inputs`) the three queries
    run at once, each on its own connection to the same database: they are independent, and each
    still adds in its one order.
    """
    threads = con.execute("select current_setting('threads')").fetchall()[0][0]
    con.execute("set threads = 1")
    snapshot = _snapshot_of(con) if ids is None else None
    where = f"{snapshot}.main" if snapshot else "temp.main"
    try:
        if snapshot:  # (snapshot_inputs made it: read it as it is)
            con.execute(f"create or replace view {where}._qkdb_inputs as select * replace "
                        f"(coalesce(kv_group, unit) as kv_group) from {where}.finding_inputs")
        else:
            con.execute(
                "create or replace temp table _qkdb_inputs as select id, scope, stat, estimand, cluster, "
                "coalesce(kv_group, unit) as kv_group, layer, grp, arm, x, y, x_min, x_max, x_bias, y_bias, n_vec, "
                "x_text_var "
                f"from finding_inputs{_ids_filter(ids)}"
            )
        create = f"create or replace table {where}._qkdb_shape" if snapshot else "create or replace temp table _qkdb_shape"
        con.execute(_SHAPE_SQL.format(create=create, where=where))
        # (a maximum needs no more than every model's)
        whole = "i.stat in ('max', 'exact_max') or (s.by_model and i.stat <> 'median')"
        queries = [
            _SUMS_SQL.format(where=where, unit="i.cluster", layer="0", which=whole,
                             groups="count(distinct i.kv_group) filter (where i.x is not null or i.y is not null)"),
            _SUMS_SQL.format(where=where, unit="i.kv_group", layer="i.layer", groups="1", which=f"not ({whole})"),
            f"select i.id, i.scope, i.cluster, i.kv_group, i.x, coalesce(i.x_bias, 0) as x_bias from {where}._qkdb_inputs i "
            "where i.stat = 'median' and i.x is not null order by i.id, i.scope, i.cluster, i.kv_group, i.x",
        ]
        per_model, per_unit, medians = _fetch_all(con, queries, at_once=bool(snapshot))
        shape = con.sql(f"select id, scope, by_model from {where}._qkdb_shape").fetchall()
    finally:
        con.execute(f"drop view if exists {where}._qkdb_inputs" if snapshot else "drop table if exists _qkdb_inputs")
        con.execute(f"drop table if exists {where}._qkdb_shape")
        con.execute(f"set threads = {int(threads)}")
    by_model = {(i, s): bool(b) for i, s, b in shape}
    findings = _assemble(per_model, by_model) + _assemble(per_unit, by_model)
    _attach_values(findings, medians)
    return sorted(findings, key=lambda f: (f.scope, f.id))


def _fetch_all(con: duckdb.DuckDBPyConnection, queries: list[str], at_once: bool) -> list[dict]:
    """Every query's rows as numpy columns; ``at_once``: each on its own cursor, concurrently.

    DuckDB leaves the GIL while it runs a query, so the queries use the machine's cores although
    each runs on one thread (the setting is the database's, shared by its cursors).
    """
    if not at_once:
        return [_columns(con.sql(q).to_arrow_table()) for q in queries]
    from concurrent.futures import ThreadPoolExecutor

    cursors = [con.cursor() for _ in queries]
    try:
        with ThreadPoolExecutor(len(queries)) as pool:
            return list(pool.map(lambda cq: _columns(cq[0].sql(cq[1]).to_arrow_table()), zip(cursors, queries)))
    finally:
        for c in cursors:
            c.close()


def _columns(table: pa.Table) -> dict[str, np.ndarray]:
    """A query's rows as numpy columns, as DuckDB's ``fetchnumpy`` gives them: numbers masked where
    NULL, strings as objects.

    Each distinct string is one Python object that every row holding it points to (``fetchnumpy``
    makes one a row: at 140,100 heads the sums' seven string columns were 4.5 million strings, ~300 MB
    of a refresh's peak; shared, ~40 MB of pointers). Read from the Arrow buffers
    (:func:`~qkdb.warehouse.batches.numpy_of`): pyarrow's own conversions import pandas.
    """
    import pyarrow.compute as pc

    from qkdb.warehouse.batches import numpy_of

    out: dict[str, np.ndarray] = {}
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            codes = pc.dictionary_encode(col).combine_chunks()
            idx, null = numpy_of(codes.indices)
            if null is not None:
                idx = np.where(null, len(codes.dictionary), idx)
            out[name] = np.asarray([*codes.dictionary.to_pylist(), None], dtype=object)[idx]
        elif pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_decimal(col.type):
            if pa.types.is_decimal(col.type):  # (as fetchnumpy gives a DECIMAL)
                col = pc.cast(col, pa.float64())
            data, null = numpy_of(col)
            out[name] = data if null is None else np.ma.masked_array(data, mask=null)
        else:  # (none of the sums' queries gives another type)
            out[name] = np.asarray(col.to_pylist(), dtype=object)
    return out


def _strings(got: dict, name: str) -> np.ndarray:
    return np.asarray(np.ma.getdata(got[name]), dtype=object)


def _numbers(got: dict, name: str) -> np.ndarray:
    return np.ma.filled(np.ma.asarray(got[name], dtype=np.float64), np.nan)


def _changes(*cols: np.ndarray) -> np.ndarray:
    """Where a run of equal rows starts (index 0 included), over several sorted columns."""
    n = cols[0].size
    start = np.zeros(n, dtype=bool)
    if n:
        start[0] = True
        for c in cols:
            start[1:] |= c[1:] != c[:-1]
    return start


def _assemble(got: dict, by_model: dict[tuple[str, str], bool]) -> list[_Finding]:
    """The rows of one query (sorted by finding, cluster, layer, group) as findings."""
    n_rows = len(got["id"])
    if n_rows == 0:
        return []
    ids, scopes = _strings(got, "id"), _strings(got, "scope")
    clusters, groups = _strings(got, "cluster"), _strings(got, "kv_group")
    stat, estimand = _strings(got, "stat"), _strings(got, "estimand")
    grp = _strings(got, "grp")
    arm = np.ma.filled(np.ma.asarray(got["arm"], dtype=np.float64), -1).astype(np.int64)
    layer = np.ma.filled(np.ma.asarray(got["layer"], dtype=np.float64), 0).astype(np.int64)
    num = {c: _numbers(got, c) for c in (*_SUMS, "x_min", "x_max", "top")}
    bounds = np.flatnonzero(_changes(ids, scopes))
    out = []
    for a, b in zip(bounds, [*bounds[1:], n_rows]):
        rows = slice(a, b)
        key = (ids[a], scopes[a])
        unit_start = _changes(clusters[rows], groups[rows])
        unit = np.cumsum(unit_start) - 1
        n = int(unit[-1]) + 1
        first = np.flatnonzero(unit_start)
        cluster_names = list(dict.fromkeys(clusters[rows][first]))
        cluster_idx = {c: k for k, c in enumerate(cluster_names)}
        f = _Finding(
            id=key[0], scope=key[1], stat=stat[a], estimand=estimand[a] or THESE, by_model=by_model.get(key, False),
            x_min=num["x_min"][a], x_max=num["x_max"][a], clusters=cluster_names,
            cluster=np.array([cluster_idx[c] for c in clusters[rows][first]], dtype=np.int64),
            stratum=np.zeros(n, dtype=np.int64),
            keys=[f"{c}/{g}" for c, g in zip(clusters[rows][first], groups[rows][first])],
        )
        if f.stat.startswith("arm"):
            arms = arm[rows]
            for c in _SUMS:
                f.t[c] = _spread(n, unit, num[c][rows])
            for k in (0, 1):
                for c in ("nx", "sx", "xb"):
                    f.t[f"a{k}.{c}"] = _spread(n, unit[arms == k], num[c][rows][arms == k])
        elif f.stat == "lead":  # each unit's rows are its seed group's
            arms, seeds = arm[rows], grp[rows]
            for c in _SUMS:
                f.t[c] = _spread(n, unit, num[c][rows])
            lead = arms == 1
            f.t["lead.nx"] = _spread(n, unit[lead], num["nx"][rows][lead])
            f.t["lead.sx"] = _spread(n, unit[lead], num["sx"][rows][lead])
            for k, g in enumerate(sorted({g for g, l in zip(seeds, lead) if not l and g is not None})):
                sel = (seeds == g) & ~lead
                f.t[f"other{k}.nx"] = _spread(n, unit[sel], num["nx"][rows][sel])
                f.t[f"other{k}.sx"] = _spread(n, unit[sel], num["sx"][rows][sel])
        else:  # one row per unit
            for c in _SUMS:
                f.t[c] = np.nan_to_num(num[c][rows])
        if f.stat in ("max", "exact_max"):
            f.t["top"] = np.full(n, -np.inf)
            np.maximum.at(f.t["top"], unit, np.nan_to_num(num["top"][rows], nan=-np.inf))
        if not num["nvec"][rows].any():
            del f.t["nvec"]
        if not num["tv"][rows].any():
            del f.t["tv"]
        if not f.by_model:
            f.stratum = _strata(f.cluster, layer[rows][first])
        out.append(f)
    return out


def _spread(n: int, pos: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(n)
    np.add.at(out, pos, np.nan_to_num(values))
    return out


def _strata(cluster: np.ndarray, layer: np.ndarray) -> np.ndarray:
    """Every unit's stratum: its cluster's layer, a layer with one unit merged with the next one.

    Units come sorted by (cluster, layer). Within a stratum the groups are resampled; a stratum needs
    two units to show their spread, so a layer with one group joins the next layer of its cluster
    (the last joins the one before): neighbouring layers are the most alike (a collapsed stratum, the
    survey practice for strata of one).
    """
    starts = np.flatnonzero(_changes(cluster, layer)).tolist()
    blocks = list(zip(starts, [*starts[1:], cluster.size]))
    out = np.zeros(cluster.size, dtype=np.int64)
    next_id, k = 0, 0
    while k < len(blocks):
        c = cluster[blocks[k][0]]
        strata: list[list[tuple[int, int]]] = []
        current: list[tuple[int, int]] = []
        count = 0
        while k < len(blocks) and cluster[blocks[k][0]] == c:
            a, b = blocks[k]
            current.append((a, b))
            count += b - a
            if count >= 2:
                strata.append(current)
                current, count = [], 0
            k += 1
        if current:
            if strata:
                strata[-1].extend(current)
            else:
                strata.append(current)
        for stratum in strata:
            for a, b in stratum:
                out[a:b] = next_id
            next_id += 1
    return out


def _attach_values(findings: list[_Finding], got: dict) -> None:
    """Give each median its heads' values, each tied to its key-head group."""
    if len(got["id"]) == 0:
        return
    ids, scopes = _strings(got, "id"), _strings(got, "scope")
    clusters, groups = _strings(got, "cluster"), _strings(got, "kv_group")
    x, bias = _numbers(got, "x"), _numbers(got, "x_bias")
    bounds = np.flatnonzero(_changes(ids, scopes))
    where = {(ids[a], scopes[a]): slice(a, b) for a, b in zip(bounds, [*bounds[1:], ids.size])}
    for f in findings:
        rows = where.get((f.id, f.scope))
        if f.stat != "median" or rows is None:
            continue
        unit_of = {k: j for j, k in enumerate(f.keys)}
        f.value_unit = np.array([unit_of[f"{c}/{g}"] for c, g in zip(clusters[rows], groups[rows])])
        f.values = x[rows]
        f.value_bias = np.nan_to_num(bias[rows])


# ----------------------------------------------------------------------------------- statistics


def _mean(S: dict[str, np.ndarray], n: str, s: str) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(S[n] > 0, S[s] / np.where(S[n] > 0, S[n], 1.0), np.nan)


def _terms(f: _Finding, corrected: bool = False) -> dict[str, np.ndarray]:
    """The per-unit columns whose weighted sums give the statistic (``corrected``: less their bias)."""
    t = f.t
    if f.stat in ("mean", "share", "model_range_mean", "model_range_share"):
        return {"nx": t["nx"], "sx": t["sx"] - t["xb"] if corrected else t["sx"]}
    if f.stat in ("ratio_of_means", "diff_of_means"):
        return {"nx": t["nx"], "sx": t["sx"] - t["xb"] if corrected else t["sx"],
                "ny": t["ny"], "sy": t["sy"] - t["yb"] if corrected else t["sy"]}
    if f.stat == "corr":
        return {c: t[c] for c in ("nxy", "cx", "cy", "cxx", "cyy", "cxy")}
    if f.stat == "lead":
        return {k: v for k, v in t.items() if k.startswith(("lead.", "other"))}
    if f.stat.startswith("arm"):
        out = {}
        for a in (0, 1):
            out[f"a{a}.nx"] = t[f"a{a}.nx"]
            out[f"a{a}.sx"] = t[f"a{a}.sx"] - t[f"a{a}.xb"] if corrected else t[f"a{a}.sx"]
        return out
    return {}


def _from_sums(f: _Finding, S: dict[str, np.ndarray]) -> np.ndarray:
    """The statistic from the (weighted) sums ``S`` of its terms, one value per row."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if f.stat in ("mean", "share", "model_range_mean", "model_range_share"):
            return _mean(S, "nx", "sx")
        if f.stat == "ratio_of_means":
            den = _mean(S, "ny", "sy")
            return np.where(den != 0, _mean(S, "nx", "sx") / np.where(den != 0, den, 1.0), np.nan)
        if f.stat == "diff_of_means":
            return _mean(S, "nx", "sx") - _mean(S, "ny", "sy")
        if f.stat == "corr":
            return inference.corr_from_sums(np.column_stack([S[k] for k in ("nxy", "cx", "cy", "cxx", "cyy", "cxy")]))
        if f.stat == "lead":
            others = [_mean(S, k, k[:-2] + "sx") for k in S if k.startswith("other") and k.endswith(".nx")]
            if not others:
                return np.full(len(next(iter(S.values()))), np.nan)
            stacked = np.vstack(others)
            seen = np.isfinite(stacked)
            best = np.where(seen.any(axis=0), np.max(np.where(seen, stacked, -np.inf), axis=0), np.nan)
            return _mean(S, "lead.nx", "lead.sx") - best
        if f.stat.startswith("arm"):
            m0, m1 = _mean(S, "a0.nx", "a0.sx"), _mean(S, "a1.nx", "a1.sx")
            if f.stat == "arm_diff":
                return m1 - m0
            safe = np.where(m0 != 0, m0, 1.0)
            if f.stat == "arm_ratio":
                return np.where(m0 != 0, m1 / safe, np.nan)
            if f.stat == "arm_pct":
                return np.where(m0 != 0, 100.0 * (m1 - m0) / np.abs(safe), np.nan)
    raise ValueError(f"unknown statistic {f.stat!r} of finding {f.id}")


def _evaluate(f: _Finding, W: np.ndarray, corrected: bool = False) -> np.ndarray:
    """The statistic under each row of unit weights ``W``."""
    if f.stat == "median":
        x = f.values - f.value_bias if corrected else f.values
        if f.by_model:
            return inference.grouped_weighted_median(W, x, f.cluster[f.value_unit])
        return inference.weighted_median(W, x, columns=f.value_unit)
    terms = _terms(f, corrected)
    names = list(terms)
    P = W @ np.column_stack([terms[k] for k in names])
    return _from_sums(f, {k: P[:, j] for j, k in enumerate(names)})


def _estimate(f: _Finding) -> float:
    if f.stat in ("max", "exact_max"):
        top = float(f.t["top"].max())
        return top if math.isfinite(top) else math.nan
    return float(_evaluate(f, np.ones((1, f.n_resampled)))[0])


def _bias_shift(f: _Finding, estimate: float) -> float:
    """How far the value moves when each head's value is corrected for its finite-vector bias."""
    if f.stat == "median":
        if f.value_bias is None or not f.value_bias.any():
            return 0.0
    elif not any(f.t.get(k, np.zeros(1)).any() for k in ("xb", "yb", "a0.xb", "a1.xb")):
        return 0.0
    shifted = float(_evaluate(f, np.ones((1, f.n_resampled)), corrected=True)[0])
    return shifted - estimate if math.isfinite(shifted) else 0.0


# ----------------------------------------------------------------------------------- resampling


def _rng(*keys: str) -> np.random.Generator:
    return np.random.default_rng([SEED, *(zlib.crc32(k.encode()) for k in keys)])


class _Replicates:
    """Resampled values of the findings, their weights drawn once per set of units and strata.

    Findings come scope by scope, and those of a scope mostly rest on the same units: the weights
    of the last few sets are kept, when a set's weights fit in :data:`KEEP_WEIGHTS`. A larger set
    (a median over a family's ten thousand key-head groups: 2,000 × 10,811 weights are 173 MB) is
    drawn a block at a time, each block used and let go: the same draws in the same order, so the
    same values, without holding them all (issue 48: at 140,100 heads two such sets kept were a
    refresh's peak).
    """

    KEEP = 2

    def __init__(self) -> None:
        self._weights: dict[tuple, list[np.ndarray]] = {}

    def weights(self, f: _Finding) -> Iterator[np.ndarray]:
        """Rao–Wu weights of ``f``'s resampled units in their strata, in blocks of rows.

        The units are the models for models like these (one stratum), else the key-head groups in
        strata of layers. The same units get the same weights: findings of one scope share them.
        """
        units = f.clusters if f.by_model else f.keys
        strata = np.zeros(len(units), dtype=np.int64) if f.by_model else f.stratum
        signature = zlib.crc32("\n".join([f.scope, f.estimand, *units]).encode())
        key = (signature, len(units), strata.tobytes())
        if key in self._weights:
            return iter(self._weights[key])
        blocks = self._draw(f, signature, strata)
        if N_BOOT * len(units) > KEEP_WEIGHTS:
            return blocks
        if len(self._weights) >= self.KEEP:
            del self._weights[next(iter(self._weights))]
        self._weights[key] = list(blocks)
        return iter(self._weights[key])

    @staticmethod
    def _draw(f: _Finding, signature: int, strata: np.ndarray) -> Iterator[np.ndarray]:
        rng = _rng(f.scope, f.estimand, str(signature))
        chunk = max(1, min(N_BOOT, MAX_WEIGHTS // max(strata.size, 1)))
        done = 0
        while done < N_BOOT:
            block = inference.rao_wu_weights(strata, min(chunk, N_BOOT - done), rng)
            done += block.shape[0]
            yield block

    def __call__(self, f: _Finding) -> np.ndarray:
        if f.n_resampled > EXACT_UNITS and f.stat != "median":
            return self._normal(f)
        return np.concatenate([_evaluate(f, W) for W in self.weights(f)])

    def _normal(self, f: _Finding) -> np.ndarray:
        """Resampled sums drawn from the normal law of the weights' sums (their exact mean and covariance)."""
        terms = _terms(f)
        names = list(terms)
        T = np.column_stack([terms[k] for k in names])
        C = inference.stratified_covariance(T, f.stratum)
        vals, vecs = np.linalg.eigh(C)
        root = vecs * np.sqrt(np.clip(vals, 0.0, None))
        rng = _rng(f.scope, f.estimand, f.id, "normal")
        S = T.sum(axis=0) + rng.standard_normal((N_BOOT, len(names))) @ root.T
        return _from_sums(f, {k: S[:, j] for j, k in enumerate(names)})


def _df(f: _Finding) -> int:
    """Degrees of freedom of a bootstrap inside models: units less strata."""
    return f.n_units - int(np.unique(f.stratum).size)


# ----------------------------------------------------------------------------------- intervals


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


def _bounds(f: _Finding) -> tuple[float, float]:
    """What the statistic can be, from the bounds of its heads' values (NaN: unbounded)."""
    lo, hi = f.x_min, f.x_max
    if f.stat == "corr":
        return (-1.0, 1.0)
    if f.stat in ("mean", "share", "median", "model_range_mean", "model_range_share"):
        return (lo, hi)
    if f.stat in ("diff_of_means", "lead", "arm_diff"):
        return (lo - hi, hi - lo)
    if f.stat in ("ratio_of_means", "arm_ratio"):
        return (0.0 if lo >= 0 else math.nan, math.nan)
    if f.stat == "arm_pct":
        return (-100.0 if lo >= 0 else math.nan, math.nan)
    return (math.nan, math.nan)


def _clip(f: _Finding, lo: float, hi: float) -> tuple[float, float]:
    b_lo, b_hi = _bounds(f)
    if math.isfinite(b_lo):
        lo, hi = max(lo, b_lo), max(hi, b_lo)
    if math.isfinite(b_hi):
        lo, hi = min(lo, b_hi), min(hi, b_hi)
    return lo, hi


def _widen_for_bias(f: _Finding, estimate: float, lo: float, hi: float, how: str) -> tuple[float, float, str]:
    """Widen towards where the value would be with infinitely many vectors (``finding_inputs.x_bias``)."""
    shift = _bias_shift(f, estimate)
    widened = lo + min(0.0, shift), hi + max(0.0, shift)
    if not abs(shift) >= 0.01 * (hi - lo):  # (too small to show in the interval's digits: not worth a word)
        return *widened, how
    return *widened, f"{how}; widened by {abs(shift):.2g} for the finite-vector bias"


def _design_effect(f: _Finding, p: float, variance: float, most: float | None = None) -> float:
    """How many heads count as one for a share: the resampled variance over the binomial one, at most ``most``.

    ``most`` is the design effect of groups whose heads are copies (by default the heads per group);
    1 when every head is its own group (then the share's interval is Wilson's over the heads). At 0
    or 100% no spread is seen, so each group counts once.
    """
    n = f.t["nx"].sum()
    most = float(n / max(f.t["groups"].sum(), 1.0)) if most is None else most
    if most <= 1.0:
        return 1.0
    if not 0.0 < p < 1.0 or not math.isfinite(variance):
        return most
    return min(most, max(1.0, variance / (p * (1.0 - p) / n)))


def _wilson(f: _Finding, deff: float, level: float = LEVEL) -> tuple[float, float]:
    n = float(f.t["nx"].sum())
    k = float(f.t["sx"].sum())
    return inference.wilson_interval(k / deff, n / deff, level)


def _vector_floor(f: _Finding, units: np.ndarray | None = None, level: float = LEVEL) -> tuple[float, float] | None:
    """For a share of vectors (a Q-vs-K accuracy) near 0 or 100 %: the least uncertainty its heads carry.

    Wilson's interval with each key-head group's share counted as a fraction of one success, when
    the shares add up to all or none of the groups (rounded): near 100 % a mean is made by rare heads below it, which a sample of heads
    that are all at 100 % does not show (nor its resamples: zero width), and of which ``n`` groups
    rule out no more than a rate of about 3/n. It is wider than Wilson's on the pooled correct /
    total vectors, which the finitely many vectors behind each head would give.
    """
    if "nvec" not in f.t:
        return None
    sel = slice(None) if units is None else units
    nx, sx, groups = f.t["nx"][sel], f.t["sx"][sel], f.t["groups"][sel]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(nx > 0, sx / np.maximum(nx, 1), 0.0)
    n = float(groups.sum())
    if n <= 0:
        return None
    correct = float(np.clip((share * groups).sum(), 0.0, n))
    # Only near the bound, where the groups' shares round to all or none: a share of vectors well
    # inside (a ring accuracy near 50 %) has heads that vary far less than a success or a failure
    # would, and no rare head makes its mean.
    if round(correct) not in (0, round(n)):
        return None
    return inference.wilson_interval(correct, n, level)


def _these(f: _Finding, estimate: float, reps: _Replicates) -> dict:
    """An interval for these models: their key-head groups resampled in strata of layers.

    From :data:`JACKKNIFE_UNITS` groups a bootstrap (Rao–Wu), its percentiles read at Student's t;
    below, the stratified jackknife's variance with t for groups less strata (a bootstrap's
    percentiles over few groups are too narrow); below :data:`MIN_UNITS` groups, none.
    """
    df = _df(f)
    few = f.n_units < MIN_BOOT_UNITS or df < 1
    arms = " of the two checkpoints (paired)" if f.stat.startswith("arm") else ""
    groups = f"{f.n_units} key-head groups{arms}" + (f" of {len(f.clusters)} models" if len(f.clusters) > 1 else "")
    normal = f.n_units > EXACT_UNITS and f.stat != "median"
    how = (f"bootstrap over {groups}, in strata of layers ({N_BOOT} resamples{', normal sums' if normal else ''}, "
           f"t with {df} df)")
    if f.stat == "share":
        # A closed form over the heads, counted by their groups' design effect: from the resamples'
        # spread when there are enough groups, else each group counted once.
        return _closed_form(f, estimate, None if few else reps(f), how)
    if f.stat == "corr" and len(f.clusters) == 1:
        # Fisher's z is a normal-theory interval: on heavy-tailed heads it is about half as wide as
        # r varies (issue 47: 0.56 of the truths covered). The groups resampled (on the z scale)
        # show that spread; the interval is the wider of the two.
        fisher = _closed_form(f, estimate, None, how)
        if f.n_units < MIN_UNITS or df < 1 or fisher["ci_low"] is None:
            return fisher
        resampled = _resampled(f, estimate, reps, df, groups, how)
        if resampled["ci_low"] is None:
            return fisher
        lo, hi = min(fisher["ci_low"], resampled["ci_low"]), max(fisher["ci_high"], resampled["ci_high"])
        return _row(f, estimate, lo, hi, f"{resampled['ci_method']}; at least {fisher['ci_method']}", f.n_units,
                    resampled["n_boot"])
    return _resampled(f, estimate, reps, df, groups, how)


def _resampled(f: _Finding, estimate: float, reps: _Replicates, df: int, groups: str, how: str) -> dict:
    """The resampling interval inside models: stratified jackknife-t below :data:`JACKKNIFE_UNITS` groups, else the bootstrap."""
    if f.n_units < MIN_UNITS or df < 1:
        k = int(np.unique(f.stratum).size)
        return _row(f, estimate, method=f"too few key-head groups for an interval ({f.n_units} in {k} "
                                        f"{'stratum' if k == 1 else 'strata'} of layers; needs {MIN_UNITS}, and more "
                                        "than one in a stratum)", n_units=f.n_units)
    if f.stat == "median" and f.n_units < MIN_BOOT_UNITS:
        return _row(f, estimate, method=f"too few key-head groups for a median's interval ({f.n_units}; a median "
                                        f"needs a bootstrap, and a bootstrap {MIN_BOOT_UNITS})", n_units=f.n_units)
    if f.n_units < JACKKNIFE_UNITS and f.stat != "median":
        to, back, scale = _scale(f)
        values = _evaluate(f, inference.stratified_jackknife_weights(f.stratum))
        var = inference.stratified_jackknife_variance(to(values), f.stratum)
        if not math.isfinite(var):
            return _row(f, estimate, method=f"no interval: the value is undefined without one of the {groups}",
                        n_units=f.n_units)
        half = -inference.t_quantile((1.0 - LEVEL) / 2.0, df) * math.sqrt(var)
        centre = float(to(np.array([estimate]))[0])
        lo, hi = (float(v) for v in back(np.array([centre - half, centre + half])))
        how = (f"stratified jackknife over {groups}, in strata of layers (t with {df} df{scale}; fewer than "
               f"{JACKKNIFE_UNITS} groups: a bootstrap's percentiles would be too narrow)")
        return _finish(f, estimate, lo, hi, how, None)
    lo, hi = inference.percentile_interval(reps(f), df, LEVEL)
    return _finish(f, estimate, lo, hi, how, N_BOOT)


# Findings whose values are shares of a mean square, near 1 and skewed (issue 47: every sink a bias
# sink gave 0.75 coverage with a symmetric interval): their jackknife works on the logit scale.
LOGIT_SCALE = frozenset({"attn.sink.bias"})


def _scale(f: _Finding):
    """The scale a jackknife-t interval is made on and back: Fisher's z for a correlation, the logit for
    the shares of :data:`LOGIT_SCALE` (an interval that respects the bounds and the skew), else the value's."""
    if f.stat == "corr":
        return (lambda v: np.arctanh(np.clip(v, -1 + 1e-12, 1 - 1e-12)), np.tanh, " on Fisher's z scale")
    if f.id in LOGIT_SCALE:
        def logit(v):
            v = np.clip(v, 1e-9, 1 - 1e-9)
            return np.log(v / (1 - v))
        return (logit, lambda z: 1 / (1 + np.exp(-z)), " on the logit scale")
    return (lambda v: v, lambda v: v, "")


def _finish(f: _Finding, estimate: float, lo: float, hi: float, how: str, n_boot: int | None) -> dict:
    """An interval inside models widened for a share of vectors near its bound and for the finite-vector bias, clipped."""
    floor = _vector_floor(f)
    if floor is not None:
        lo, hi = min(lo, floor[0]), max(hi, floor[1])
        how += ", widened to the Wilson interval of its groups' shares of vectors"
    lo, hi, how = _widen_for_bias(f, estimate, lo, hi, how)
    lo, hi = _clip(f, lo, hi)
    return _row(f, estimate, lo, hi, how, f.n_units, n_boot)


def _closed_form(f: _Finding, estimate: float, r: np.ndarray | None, how: str) -> dict:
    """Wilson (a share) or Fisher z (a correlation in one model) over the heads' effective number.

    Heads that are their own key-head groups count once each: then these are exactly Wilson's and
    Fisher's intervals over the heads. Query heads that share a key head count for less, by the
    design effect the resamples ``r`` show (their variance over the closed form's), between 1 and
    the groups' size (Kish's ``Σ n_g² / Σ n_g``, each group counted once); without resamples, or at
    0 or 100%, where no spread can show, each group counts once.
    """
    corr = f.stat == "corr"
    n_col = f.t["nxy"] if corr else f.t["nx"]
    n = float(n_col.sum())
    most = float((n_col ** 2).sum() / n) if n else 1.0
    deff = 1.0
    if most > 1.0 and not corr:
        deff = _design_effect(f, estimate, math.nan if r is None else float(np.nanvar(r, ddof=1)), most)
    elif most > 1.0:
        # Fisher's 1/(n − 3) is a normal-theory variance: the resamples' would mix the design effect
        # with the heads' departure from normality. Each group counts once (Kish's n² / Σ n_g²).
        deff = most
    n_eff = n / deff
    counted = "" if deff == 1.0 else f" counted as {n_eff:.0f} (their groups' design effect {deff:.2f}" + (
        f", from a {how})" if r is not None and not corr else ", each group once)")
    if corr:
        if n_eff < 4:
            return _row(f, estimate, method=f"too few heads for an interval ({int(n)}{counted})", n_units=f.n_units)
        lo, hi = inference.fisher_z_interval(max(-1.0, min(1.0, estimate)), n_eff, LEVEL)
        return _row(f, estimate, lo, hi, f"Fisher z over {int(n)} heads{counted}", f.n_units)
    lo, hi = inference.wilson_interval(float(f.t["sx"].sum()) / deff, n_eff, LEVEL)
    return _row(f, estimate, lo, hi, f"Wilson score interval over {int(n)} heads{counted}", f.n_units,
                None if r is None or deff == 1.0 else N_BOOT)


def _population(f: _Finding, estimate: float, reps: _Replicates) -> dict:
    """An interval for models like these: the models resampled (or, for few, left out in turn)."""
    m = len(f.clusters)
    if m >= MIN_MODELS:
        r = reps(f)
        lo, hi = inference.percentile_interval(r, m - 1, LEVEL)
        how = f"bootstrap over {m} models ({N_BOOT} resamples of whole models, t with {m - 1} df)"
        n_boot = N_BOOT
    else:
        loo = []
        for j in range(m):
            w = np.ones((1, m))
            w[0, j] = 0.0
            loo.append(float(_evaluate(f, w)[0]))
        lo, hi = inference.jackknife_interval(estimate, np.array(loo), LEVEL)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return _row(f, estimate, method=f"no interval: the value is undefined without one of the {m} models", n_units=m)
        how = (f"jackknife over {m} models, t with {m - 1} df ({m} models are too few for a bootstrap over "
               f"models, which needs {MIN_MODELS}; a claim about models like these rests on their spread)")
        n_boot = None
    if f.stat == "share":
        # Resampled shares cannot leave the models' range (at 0 of n every resample is 0): the
        # Wilson interval of the pooled heads, each key-head group counted once, is the least they carry.
        w_lo, w_hi = _wilson(f, _design_effect(f, estimate, math.nan))
        lo, hi = min(lo, w_lo), max(hi, w_hi)
        how += ", widened to the Wilson interval of the pooled heads"
    floor = _vector_floor(f)
    if floor is not None:
        lo, hi = min(lo, floor[0]), max(hi, floor[1])
        how += ", widened to the Wilson interval of its groups' shares of vectors"
    lo, hi, how = _widen_for_bias(f, estimate, lo, hi, how)
    lo, hi = _clip(f, lo, hi)
    return _row(f, estimate, lo, hi, how, m, n_boot)


def _model_range(f: _Finding, estimate: float) -> dict:
    """A claim about every model's own value: each model's interval, jointly at 95% (Bonferroni).

    A share: Wilson on the model's heads counted by its groups' design effect. A mean: its
    stratified standard error (linearised: the variance Rao–Wu's bootstrap estimates, without
    drawing it) times Student's t: over a model's hundreds of heads the mean is near normal, and
    the Bonferroni levels lie too far out for a percentile of 2,000 resamples. A share of vectors
    (an accuracy) is widened to the Wilson interval of its groups' shares (:func:`_vector_floor`).
    """
    m = len(f.clusters)
    level = 1.0 - (1.0 - LEVEL) / m
    nx, sx = f.t["nx"], f.t["sx"]
    lows, highs, few = [], [], []
    at_bound: list[tuple[int, tuple[float, float]]] = []  # (groups, floor) where rare heads set the interval
    for k in range(m):
        sel = f.cluster == k
        n, s = nx[sel].sum(), sx[sel].sum()
        if n == 0:
            lows.append(math.nan)
            highs.append(math.nan)
            continue
        mean = s / n
        if f.stat == "model_range_share":
            p = float(mean)
            most = float((nx[sel] ** 2).sum() / n)
            deff = 1.0 if most <= 1.0 else (most if p in (0.0, 1.0) else min(most, max(1.0, _linear_var(
                nx[sel], sx[sel], f.stratum[sel]) / (p * (1 - p) / n))))
            lo, hi = inference.wilson_interval(s / deff, n / deff, level)
        else:
            units = int(sel.sum())
            df = units - int(np.unique(f.stratum[sel]).size)
            if units < MIN_UNITS or df < 1:
                few.append(f.clusters[k])
                lo = hi = math.nan
            else:
                # (x of every head measured on the same texts: their spread is a variance of its own,
                # crossed with the heads', finding_inputs.x_text_var)
                texts = float(f.t["tv"][sel].max()) if "tv" in f.t else 0.0
                half = -inference.t_quantile((1.0 - level) / 2.0, df) * math.sqrt(
                    _linear_var(nx[sel], sx[sel], f.stratum[sel]) + texts)
                lo, hi = mean - half, mean + half
                floor = _vector_floor(f, sel, level)
                if floor is not None:
                    if floor[0] < lo or floor[1] > hi:
                        at_bound.append((int(f.t["groups"][sel].sum()), floor))
                    lo, hi = min(lo, floor[0]), max(hi, floor[1])
        lo, hi = _clip(f, lo, hi)
        lows.append(lo)
        highs.append(hi)
    lows, highs = np.array(lows), np.array(highs)
    if few:
        return _row(f, estimate, method=f"too few key-head groups for an interval in a model ({few[0]}; needs {MIN_UNITS})",
                    n_units=m)
    keep = np.isfinite(lows) & np.isfinite(highs)
    if not keep.any():
        return _row(f, estimate, method="no data")
    how = ("Wilson score interval of its share (heads counted by their groups' design effect)"
           if f.stat == "model_range_share" else
           "its mean ± t × its standard error over its key-head groups in strata of layers")
    if "nvec" in f.t and f.stat == "model_range_mean":
        how += ", widened to the Wilson interval of its groups' shares of vectors"
    if "tv" in f.t and f.stat == "model_range_mean":
        how += ", plus the variance between its texts (every head read the same texts: texts and key-head groups crossed)"
    joint = f", jointly at 95% (Bonferroni over {m} models)" if m > 1 else ""
    if at_bound:
        # Why such a claim stays open at this size: its interval is what the groups can rule out.
        groups, (f_lo, f_hi) = min(at_bound)
        share = 1.0 - f_lo if f_lo > 0.5 else f_hi
        how += (f"; near {'100' if f_lo > 0.5 else '0'}% the interval is set by the heads not sampled: {groups} key-head "
                f"groups leave up to {100 * share:.1f}% of a model's heads {'below' if f_lo > 0.5 else 'above'} it unseen, "
                f"and ruling out x% takes about {inference.wilson_groups_for(level):.1f}/x groups per model")
    lo, hi, how = _widen_for_bias(f, estimate, float(lows[keep].min()), float(highs[keep].max()),
                                  f"every model's own interval: {how}{joint}")
    return _row(f, estimate, lo, hi, how, m, None, low_max=float(lows[keep].max()), high_min=float(highs[keep].min()))


def _linear_var(n: np.ndarray, s: np.ndarray, stratum: np.ndarray) -> float:
    """Variance of the ratio mean Σs / Σn over units in strata (Taylor linearisation, unbiased within strata)."""
    N = n.sum()
    r = s.sum() / N
    z = (s - r * n) / N
    return float(inference.stratified_covariance(z[:, None], stratum)[0, 0])


def _interval(f: _Finding, reps: _Replicates) -> dict:
    estimate = _estimate(f)
    if not math.isfinite(estimate):
        return _row(f, estimate, method="no value")
    if f.stat == "exact_max":
        # The drift lemma is an identity of each head's own float64 arithmetic, not a rate among
        # heads: a head not sampled adds no uncertainty, so the value over the ingested heads is exact.
        n = int(f.t["nx"].sum())
        return _row(f, estimate, estimate, estimate,
                    f"exact: the largest of {n} ingested heads (an identity of each head's arithmetic, no sampling)", n)
    if f.stat == "max":
        n = int(f.t["nx"].sum())
        return _row(f, estimate, method=(
            f"none: the largest of {n} heads has no sampling interval (heads not ingested can only raise it, "
            "and the largest of many noisy per-head values reads high)"), n_units=n)
    if f.stat.startswith("model_range"):
        return _model_range(f, estimate)
    if f.by_model:
        return _population(f, estimate, reps)
    return _approximate(f, _these(f, estimate, reps))


def _approximate(f: _Finding, row: dict) -> dict:
    """Say so where an interval rests on fewer than :data:`APPROXIMATE_UNITS` key-head groups."""
    if f.n_units >= APPROXIMATE_UNITS or row["ci_low"] is None:
        return row
    return {**row, "ci_method": f"approximate: {row['ci_method']}; over {f.n_units} key-head groups a finding's "
                               "coverage runs from about 0.88 to 1 around the nominal 95% (docs/findings.md, "
                               "\"Calibration\")"}


def snapshot_inputs(con: duckdb.DuckDBPyConnection, folder: Path | None = None) -> None:
    """Compute ``finding_inputs`` once for this connection: a temporary view of its rows shadows the view.

    The intervals and the findings view both read every row of it (~30 per head); a publish's
    refresh computes it once for both. The rows are kept in a database attached to ``con``'s, which
    its cursors see too (:func:`_read` sums them on several); only ``con`` knows it as its own
    (:func:`_snapshot_of`). That database is in memory, or with ``folder`` a file there (removed by
    :func:`release_snapshot`): DuckDB then keeps in memory only what its memory limit allows, where
    an in-memory database holds every row (~1.8 GB at 140,000 heads). Only for a connection that
    reads, then closes (call :func:`release_snapshot` first): the rows do not follow later changes
    (params shadowed afterwards, say).
    """
    release_snapshot(con)
    db = con.execute("select current_database()").fetchall()[0][0]
    name = f"{_SNAPSHOT}_{uuid.uuid4().hex[:12]}"
    where = None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        where = str(folder / f"{name}.duckdb")
    literal = None if where is None else "'" + where.replace("'", "''") + "'"
    target = literal or "':memory:'"
    con.execute(f"attach {target} as {name} (read_write)")  # (read_write: a read-only catalog's too)
    con.execute(f"create temp view _qkdb_snapshot as select '{name}' as name, {literal or 'null'}::varchar as path")
    con.execute(f'create table {name}.main.finding_inputs as select * from "{db}".main.finding_inputs')
    con.execute(f"create or replace temp view finding_inputs as select * from {name}.main.finding_inputs")


def _snapshot_of(con: duckdb.DuckDBPyConnection) -> str | None:
    """The database of ``con``'s own snapshot (:func:`snapshot_inputs`), None without one."""
    got = _snapshot_row(con)
    if got is None:
        return None
    found = con.execute("select count(*) from duckdb_databases() where database_name = ?", [got[0]]).fetchall()[0][0]
    return got[0] if found else None


def _snapshot_row(con: duckdb.DuckDBPyConnection) -> tuple[str, str | None] | None:
    if not con.execute("select count(*) from duckdb_views() where temporary and view_name = '_qkdb_snapshot'"
                       ).fetchall()[0][0]:
        return None
    return tuple(con.execute("select name, path from temp.main._qkdb_snapshot").fetchall()[0])


def release_snapshot(con: duckdb.DuckDBPyConnection) -> None:
    """Drop ``con``'s snapshot (its database is the process's until detached; its file, if any, is
    removed), and the views that read it."""
    got = _snapshot_row(con)
    name = _snapshot_of(con)
    for view in ("finding_values", "finding_inputs", "_qkdb_snapshot"):
        con.execute(f"drop view if exists temp.main.{view}")
    if name is not None:
        con.execute(f"detach database if exists {name}")
    if got is not None and got[1] is not None:
        for f in (Path(got[1]), Path(got[1] + ".wal")):
            with contextlib.suppress(OSError):
                f.unlink(missing_ok=True)


@contextlib.contextmanager
def values_meanwhile(con: duckdb.DuckDBPyConnection, at_once: bool = True):
    """Compute ``finding_values`` over the snapshot on another cursor while this one goes on (after :func:`snapshot_inputs`).

    Yields a function that waits for it and lets ``con`` read the rows (a temporary view shadows
    the catalog's): the findings view then has only the intervals and the claims to join. The
    measured values are the heavy half of the findings' rows (every head's), the intervals' sums
    and resampling the rest of a refresh: on two cores they run at once. One thread, as every query
    of a refresh: the rows are summed in one order. Not ``at_once``: the function computes them
    then, on ``con`` (the same rows): at 140,100 heads the two at once held 0.87-1.10 GB, one after
    the other 0.73-0.77 GB, in about the same time (the sums already run on several cursors).
    """
    from concurrent.futures import ThreadPoolExecutor

    db = con.execute("select current_database()").fetchall()[0][0]
    name = _snapshot_of(con)
    if name is None:
        raise RuntimeError("values_meanwhile needs the connection's snapshot (snapshot_inputs) first")
    values = f'create or replace table {name}.main.finding_values as select * from "{db}".main.finding_values'
    if not at_once:
        def then() -> None:
            con.execute(values)
            con.execute(f"create or replace temp view finding_values as select * from {name}.main.finding_values")

        yield then
        return
    cur = con.cursor()
    pool = ThreadPoolExecutor(1)
    try:
        # (the cursor's own temporary view: a cursor does not see con's)
        cur.execute(f"create temp view finding_inputs as select * from {name}.main.finding_inputs")
        job = pool.submit(cur.execute, values)

        def ready() -> None:
            job.result()
            con.execute(f"create or replace temp view finding_values as select * from {name}.main.finding_values")

        yield ready
    except BaseException:
        with contextlib.suppress(Exception):  # (a failure or Ctrl-C: the values are not wanted)
            cur.interrupt()
        raise
    finally:
        pool.shutdown(wait=True)  # (never close the connection under a running query)
        cur.close()


def compute(con: duckdb.DuckDBPyConnection, ids: tuple[str, ...] | None = None) -> pa.Table:
    """Every finding's interval for what ``con`` sees (its models, its params), as a ``finding_intervals`` table.

    ``ids`` limits it to those findings (the others then have no interval).
    """
    fingerprint = _fingerprint(con)
    rows: list[dict] = []
    reps = _Replicates()
    with np.errstate(all="ignore"):
        for f in _read(con, ids):
            rows.append(_interval(f, reps))
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

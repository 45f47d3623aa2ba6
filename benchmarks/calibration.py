"""Calibration of the findings' 95% intervals against planted truths (issue 28).

Run from the repository root (the full run takes about 20 minutes on 2 cores, the truths computed
once before and cached in the user cache dir; ``--quick`` under a minute):

    python benchmarks/calibration.py                    # every setting, 40 replications each
    python benchmarks/calibration.py --reps 60 --settings gqa pooled-2
    python benchmarks/calibration.py --compare          # the resampling schemes against each other
    python benchmarks/calibration.py --bias             # the metrics' finite-vector bias (x_bias)
    python benchmarks/calibration.py --quick            # a few replications (the test suite's check)

What it does (docs/findings.md, "Calibration", shows the table of one run):

1. For each setting, draws models from the simulator with planted parameters (``SimSpec``,
   ``Ranges``) and computes their warehouse tables in memory with the ingest's own engine (the
   same per-file preparation and per-head computation as ``qkdb ingest``, without parquet files in
   between), then every finding, its interval and its verdict through the real views
   (``finding_inputs``, ``findings``) and ``qkdb.warehouse.intervals``, as a user's warehouse would.
2. The truth of each finding is its value on the same generative process with 8,192 heads at
   2,048 vectors per file (the value at "infinitely many" heads and vectors, to within a small
   fraction of an interval's width): for a setting about one model, that model's process (its
   layers fixed: 512 heads per layer); for pooled models, the population of models the setting
   draws from (1,024 models of 8 heads: the truth's own error is a tenth of a replication's).
3. Prints, per setting and finding, the coverage of the truth by the 95% interval and the rate of
   wrong verdicts ('holds' where the truth is outside the claim's band or on the null's side,
   'does not hold' where it is inside), each with its own 95% Wilson interval, and the median
   width of the intervals over the width the replications' spread needs (2 × 1.96 × their sd).

Settings (docs/findings.md explains why each is there):

* ``independent``: one model, 16 layers × 16 query heads, each its own key head (MHA), heads drawn
  independently;
* ``gqa``: one model, 16 layers × 16 query heads in GQA-4 groups, every query head of every group
  ingested, the query heads of a group near-copies (``group_likeness`` 0.9);
* ``layers``: as ``gqa`` with heads of one layer alike too (``layer_likeness`` 0.3), the layers
  held fixed (one model's heads drawn again);
* ``pooled-2``, ``pooled-3``, ``pooled-6``, ``pooled-12``, ``pooled-24``: that many models of
  8 layers × 8 query heads (GQA-2), each drawn with its own parameter ranges (a between-model
  spread), the claim about models like them (``--compare`` adds 4 and 8 models);
* ``edge``: one model whose planted slope ratio is 1, the null of the claim "keys drift faster"
  (any verdict on it is wrong);
* ``groups-16``, ``groups-8``: few key-head groups (issue 37): a GQA-4 model of 8 layers × 8 query
  heads (16 groups, two per layer) and of 4 layers (8 groups), near-copies in each group, every
  layer ingested whole;
* ``layer-subset``: the ``layers`` model with 4 of its 16 layers ingested, drawn at random in each
  replication; the findings are then about those layers (docs/findings.md, "A subset of layers"),
  so the truth is the value over the same 4 layers of the truth's model;
* ``layer-effect``: as ``layers`` with a stronger planted layer effect (the heads of a layer
  correlate 0.6), the layers held fixed.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def model_tables(spec, complement: bool = False) -> dict[str, pa.Table]:
    """The warehouse tables of one simulated model, computed in memory by the ingest's own engine.

    What ``qkdb simulate`` + ``qkdb ingest`` would publish for ``spec`` (a :class:`SimSpec`), minus
    the parquet files and worker processes in between: the simulator's files (:func:`generate`) go
    through the engine's per-file preparation and per-head computation, as the ingest's pool does.
    """
    from qkdb.ingest.capture.simulate import generate
    from qkdb.ingest.engine.head import HeadContext, compute_head, prepare
    from qkdb.ingest.engine.plane_layout import RopeLayout
    from qkdb.ingest.metrics.rope_planes import rope_frequencies
    from qkdb.ingest.options import IngestOptions
    from qkdb.ingest.sources.layout import HeadData
    from qkdb.warehouse.batches import ArrowRows, to_batch
    from qkdb.warehouse.schema import MODELS, TABLES

    options = IngestOptions(points=0, complement=complement, plasticity=PLASTICITY)
    rows = ArrowRows()
    key = None
    for f in generate(spec):
        x, t, ex = f.vectors
        # As written and read back: the simulator stores float32.
        data = HeadData(x.astype(np.float32).astype(np.float64), t.astype(np.float64), ex, 0)
        if f.kind == "k":
            key = prepare(data, f"l{f.layer:02d}h{f.head:02d}k", options, (f.layer, f.head, 1))
            continue
        q = prepare(data, f"l{f.layer:02d}h{f.head:02d}q", options, (f.layer, f.head, 0))
        depth = f.layer / (spec.layers - 1) if spec.layers > 1 else 0.0
        # the ingest's layout: the model's frequencies in every layer (its NoPE layers are the control)
        rope = None if spec.rope_theta is None else RopeLayout(
            spec.pairing, 0, spec.head_dim, tuple(rope_frequencies(spec.head_dim, spec.rope_theta)), "derived")
        ctx = HeadContext(
            layer=f.layer, head=f.head, kv_head=f.kv_head, depth=depth, depth_bin=min(9, int(10 * depth)),
            is_nope=spec.layer_theta(f.layer) is None, collage=False, rope_planes=spec.rope_theta is not None,
            rope=rope,
        )
        for name, cols in compute_head(q, key, ctx, options).tables.items():
            rows.add(TABLES[name], cols)
    tables = rows.tables()
    model_row = dict(
        family=spec.family, in_paper=False, n_layers=spec.layers, n_q_heads=spec.q_heads, n_kv_heads=spec.kv_heads,
        gqa_ratio=spec.ratio, head_dim=spec.head_dim, rope_theta=spec.rope_theta, rope_pairing=spec.pairing,
        rope="rotary" if spec.rope_theta is not None else "none", nope_layers=[list(spec.nope_layers)],
        source="simulate", location="memory", n_heads=tables["heads"].num_rows, b_method="eig",
    )
    tables["models"] = pa.Table.from_batches([to_batch(MODELS, model_row)])
    return {name: t.append_column("model", pa.array([spec.model] * t.num_rows, pa.string()))
            if "model" not in t.column_names else t for name, t in tables.items()}


def connect(models: list[dict[str, pa.Table]], intervals: bool = True):
    """An in-memory DuckDB holding ``models`` as the base tables, every finding view, and their intervals."""
    import duckdb

    from qkdb.warehouse import intervals as finding_intervals
    from qkdb.warehouse.batches import empty_table
    from qkdb.warehouse.benchmarks import bundled_tables
    from qkdb.warehouse.schema import TABLES
    from qkdb.warehouse.views import create_views

    con = duckdb.connect()
    for name, table in TABLES.items():
        parts = [m[name].select([c.name for c in table.columns]) for m in models if name in m]
        if not parts:
            empty = empty_table(table)
            parts = [empty.append_column("model", pa.array([], pa.string())).select([c.name for c in table.columns])]
        con.register("_src", pa.concat_tables(parts))
        con.execute(f'create table "{name}" as select * from _src')
        con.unregister("_src")
    # The views over benchmark scores read the shipped tables, as a fresh warehouse's would.
    for name, table in bundled_tables().items():
        con.register("_src", table)
        con.execute(f'create table "{name}" as select * from _src')
        con.unregister("_src")
    create_views(con)
    if intervals:
        finding_intervals.install(con)
    return con


# --------------------------------------------------------------------------------------------
# Settings: the replicates' models and the truth's
# --------------------------------------------------------------------------------------------

D, VECTORS, TRUTH_VECTORS, TRUTH_HEADS = 32, 512, 2048, 8192
# Bumped whenever the findings change (truths cached under an older version lack the new ones):
# 2 = the plasticity and recency findings (issue 38).
TRUTH_VERSION = 2
# Plasticity and the recency check (issue 38) in every model's tables; off in --quick, whose 256
# vectors per file leave every decile of the context below the 32 queries a value needs.
PLASTICITY = True
LAYER_SEED = 777  # the `layers` setting's one model


def _spec(**fields):
    from qkdb.ingest.capture.simulate import SimSpec

    return SimSpec(**{"head_dim": D, "vectors": VECTORS, "family": "Sim", **fields})


def _model_ranges(rng: np.random.Generator):
    """A model's own parameter ranges: the simulator's defaults moved by a between-model spread."""
    from qkdb.ingest.capture.simulate import Ranges

    r = Ranges()
    scale = lambda sd: float(np.exp(sd * rng.standard_normal()))  # noqa: E731
    alpha, sep, noise, mu = scale(0.3), scale(0.2), scale(0.15), scale(0.2)
    return dataclasses.replace(
        r,
        slope_ratio=float(r.slope_ratio * scale(0.25)),
        negative_fraction=float(rng.uniform(0.005, 0.03)),
        alpha_k=(r.alpha_k[0] * alpha, r.alpha_k[1] * alpha),
        sep=(r.sep[0] * sep, r.sep[1] * sep),
        noise=(r.noise[0] * noise, r.noise[1] * noise),
        mu_q_a=(r.mu_q_a[0] * mu, r.mu_q_a[1] * mu),
    )


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    what: str
    models: object  # rep -> list of SimSpec
    truth: object  # () -> list of SimSpec (or a dict of known truths)
    ids: tuple[str, ...] | None = None  # the findings it judges (None: every one with an interval)
    truth_key: str = ""  # settings of the same process share their truth (default: the name)
    layer_subset: bool = False  # each replication ingests subset_layers(rep), its truth is over them


def _one(kv: int, ranges=None, layer_seed=None, layers: int = 16, q_heads: int = 16):
    from qkdb.ingest.capture.simulate import Ranges

    ranges = ranges or Ranges()

    def models(rep: int):
        return [_spec(layers=layers, q_heads=q_heads, kv_heads=kv, seed=10_000 + rep, model="m", ranges=ranges,
                      layer_seed=layer_seed)]

    def truth():
        # The same process with many more heads per layer (the same layers when they are fixed).
        per_layer = TRUTH_HEADS // layers
        return [_spec(layers=layers, q_heads=per_layer, kv_heads=per_layer * kv // q_heads, seed=1, model="truth",
                      ranges=ranges, layer_seed=layer_seed, vectors=TRUTH_VECTORS)]

    return models, truth


SUBSET_LAYERS = 4  # layers of 16 the `layer-subset` setting ingests, drawn in each replication


def subset_layers(rep: int) -> list[int]:
    """The layers replication ``rep`` of ``layer-subset`` ingests (and its truth is over)."""
    return sorted(np.random.default_rng([37, rep]).choice(16, size=SUBSET_LAYERS, replace=False).tolist())


def _pooled(m: int):
    def models(rep: int):
        rng = np.random.default_rng([2026, m, rep])
        return [_spec(layers=8, q_heads=8, kv_heads=4, seed=100 * rep + j, model=f"m{j}", ranges=_model_ranges(rng))
                for j in range(m)]

    def truth():
        # Many models of few heads: the population value rests on the models' spread, and 1,024
        # models put the truth's own error at a tenth of a replicate's with 12 models.
        rng = np.random.default_rng([2026, 0])
        n = TRUTH_HEADS // 8
        return [_spec(layers=8, q_heads=1, kv_heads=1, seed=90_000 + j, model=f"t{j}", ranges=_model_ranges(rng),
                      vectors=TRUTH_VECTORS) for j in range(n)]

    return models, truth


# The table's settings (issue 28, and 24 models: a bootstrap over models); --compare adds 4 and 8 models.
DEFAULT = ("independent", "gqa", "layers", "pooled-2", "pooled-3", "pooled-6", "pooled-12", "pooled-24", "edge",
           "groups-16", "groups-8", "layer-subset", "layer-effect")
COMPARE = ("independent", "gqa", "layers", "pooled-2", "pooled-3", "pooled-4", "pooled-6", "pooled-8", "pooled-12",
           "pooled-24")


def settings() -> dict[str, Setting]:
    from qkdb.ingest.capture.simulate import Ranges

    out = [
        Setting("independent", "one model, independent heads (MHA)", *_one(16)),
        # (head by head the same process as `independent`: its truth, drawn from independent heads)
        Setting("gqa", "one model, whole GQA-4 groups of near-copies", _one(4, Ranges(group_likeness=0.9))[0],
                _one(16)[1], truth_key="independent"),
        Setting("layers", "one model, GQA-4 near-copies, heads of a layer alike",
                *_one(4, Ranges(group_likeness=0.6, layer_likeness=0.3), LAYER_SEED)),
    ]
    for m in (2, 3, 4, 6, 8, 12, 24):
        out.append(Setting(f"pooled-{m}", f"{m} models with a between-model spread, about models like them", *_pooled(m),
                           truth_key="pooled"))
    edge_models, _ = _one(16, Ranges(slope_ratio=1.0))
    out.append(Setting("edge", "one model whose planted slope ratio is the claim's null (1)", edge_models,
                       lambda: {"002.F1.slope_ratio": 1.0}, ids=("002.F1.slope_ratio",)))
    # Few key-head groups (issue 37); head by head the process of `independent`, whose truth they share.
    near = Ranges(group_likeness=0.9)
    out.append(Setting("groups-16", "one GQA-4 model of 8 layers: 16 key-head groups of near-copies",
                       _one(2, near, layers=8, q_heads=8)[0], _one(16)[1], truth_key="independent"))
    out.append(Setting("groups-8", "one GQA-4 model of 4 layers: 8 key-head groups of near-copies",
                       _one(2, near, layers=4, q_heads=8)[0], _one(16)[1], truth_key="independent"))
    layers_models, layers_truth = _one(4, Ranges(group_likeness=0.6, layer_likeness=0.3), LAYER_SEED)
    out.append(Setting("layer-subset", f"the `layers` model, {SUBSET_LAYERS} of its 16 layers drawn in each replication",
                       layers_models, layers_truth, truth_key="layers", layer_subset=True))
    out.append(Setting("layer-effect", "one model, GQA-4 near-copies, heads of a layer strongly alike (0.6)",
                       *_one(4, Ranges(group_likeness=0.3, layer_likeness=0.6), LAYER_SEED + 1)))
    return {s.name: s for s in out}


# --------------------------------------------------------------------------------------------
# One replicate, the truths, and the verdicts
# --------------------------------------------------------------------------------------------

FINDING_COLUMNS = ("id", "estimand", "measured_value", "ci_low", "ci_high", "ci_method", "status", "criterion",
                   "accept_low", "accept_high")


def findings_of(models: list[dict[str, pa.Table]], intervals: bool = True, scheme: str | None = None) -> list[dict]:
    """The findings' rows over ``models``, as a warehouse of them shows them.

    ``scheme`` resamples other units than qkdb does (for ``--compare``): ``heads`` (every query head
    its own unit), ``groups`` (key-head groups, no strata of layers), ``layers`` (whole layers).
    """
    con = connect(models, intervals=False)
    try:
        if scheme is not None:
            unit = {"heads": "unit", "groups": "kv_group", "layers": "layer::varchar"}[scheme]
            strata = "layer" if scheme == "heads" else "0"
            db = con.execute("select current_database()").fetchall()[0][0]
            con.execute(f"create temp view finding_inputs as select * replace ({unit} as kv_group, {strata} as layer) "
                        f'from "{db}".main.finding_inputs')
        if intervals:
            from qkdb.warehouse import intervals as finding_intervals

            finding_intervals.install(con)
        cur = con.execute(f"select {', '.join(FINDING_COLUMNS)} from findings where status <> 'no data'")
        return [dict(zip(FINDING_COLUMNS, r)) for r in cur.fetchall()]
    finally:
        con.close()


def replicate(task: tuple) -> tuple[str, int, str | None, list[dict]]:
    from qkdb.warehouse import intervals

    name, rep, scheme = task
    setting = settings()[name]
    models = [model_tables(spec) for spec in setting.models(rep)]
    if setting.layer_subset:
        models = [only_layers(m, subset_layers(rep)) for m in models]
    kept = intervals.MIN_MODELS
    if scheme in ("boot", "jack"):  # a bootstrap over models at every count, or the jackknife at every count
        intervals.MIN_MODELS = 2 if scheme == "boot" else 10**9
    try:
        rows = findings_of(models, scheme=None if scheme in ("boot", "jack") else scheme)
    finally:
        intervals.MIN_MODELS = kept
    if setting.ids is not None:
        rows = [r for r in rows if r["id"] in setting.ids]
    return name, rep, scheme, rows


def only_layers(tables: dict[str, pa.Table], layers: list[int]) -> dict[str, pa.Table]:
    """A model's tables with the heads of ``layers`` only: what an ingest of those layers publishes."""
    import pyarrow.compute as pc

    keep = pa.array(layers, pa.int32())
    return {name: t.filter(pc.is_in(t.column("layer").cast(pa.int32()), keep)) if "layer" in t.column_names else t
            for name, t in tables.items()}


def truth_cache() -> Path:
    from platformdirs import user_cache_path

    return user_cache_path("qkdb") / "bench" / f"calibration-truth-{TRUTH_VERSION}-{D}x{TRUTH_VECTORS}x{TRUTH_HEADS}"


def truth_tables(name: str) -> dict[str, pa.Table]:
    """The truth's model's tables (one model), cached on disk as parquet (a truth over a subset of layers reads them)."""
    import pyarrow.parquet as pq

    setting = settings()[name]
    folder = truth_cache() / f"{setting.truth_key or name}-tables"
    if not folder.exists():
        t0 = time.perf_counter()
        (spec,) = setting.truth()
        tables = model_tables(spec)
        tmp = folder.with_name(folder.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        for table_name, t in tables.items():
            pq.write_table(t, tmp / f"{table_name}.parquet")
        tmp.rename(folder)
        log(f"  truth tables of {name}: {time.perf_counter() - t0:.0f} s")
    return {p.stem: pq.read_table(p) for p in folder.glob("*.parquet")}


def subset_truth(name: str, rep: int) -> dict[str, float]:
    """Every finding's value over the layers replication ``rep`` ingests, on the truth's model (cached)."""
    import json

    setting = settings()[name]
    layers = subset_layers(rep)
    path = truth_cache() / f"{setting.truth_key or name}-layers-{'-'.join(map(str, layers))}.json"
    if path.exists():
        return json.loads(path.read_text())
    rows = findings_of([only_layers(truth_tables(name), layers)], intervals=False)
    truth = {r["id"]: r["measured_value"] for r in rows if r["measured_value"] is not None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(truth, indent=1, sort_keys=True))
    return truth


def truth_of(name: str) -> dict[str, float]:
    """Every finding's value on the setting's process at many heads and vectors (cached on disk)."""
    import json

    setting = settings()[name]
    if setting.layer_subset:
        return {}  # one per replication (subset_truth)
    made = setting.truth()
    if isinstance(made, dict):
        return made
    path = truth_cache() / f"{setting.truth_key or name}.json"
    if path.exists():
        return json.loads(path.read_text())
    t0 = time.perf_counter()
    rows = findings_of([model_tables(spec) for spec in made], intervals=False)
    truth = {r["id"]: r["measured_value"] for r in rows if r["measured_value"] is not None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(truth, indent=1, sort_keys=True))
    log(f"  truth of {name}: {len(truth)} findings in {time.perf_counter() - t0:.0f} s")
    return truth


def truth_verdict(row: dict, truth: float) -> tuple[bool, bool]:
    """(holds is right, does not hold is right) for the claim of ``row`` at the true value."""
    crit = row["criterion"] or ""
    lo, hi = row["accept_low"], row["accept_high"]
    if "within" in crit:
        inside = lo <= truth <= hi
        return inside, not inside
    if crit.startswith("interval above"):
        return truth > lo, truth < lo
    if crit.startswith("interval below"):
        return truth < hi, truth > hi
    return False, False  # (not a verdict on a sampled value)


def wilson(k: int, n: int) -> tuple[float, float]:
    from qkdb.warehouse.inference import wilson_interval

    return wilson_interval(k, n) if n else (math.nan, math.nan)


@dataclasses.dataclass
class Tally:
    """One finding in one setting over the replications."""

    n: int = 0
    covered: int = 0
    wrong: int = 0
    widths: list = dataclasses.field(default_factory=list)
    values: list = dataclasses.field(default_factory=list)
    estimand: str = ""
    method: str = ""

    def add(self, row: dict, truth: float) -> None:
        lo, hi = row["ci_low"], row["ci_high"]
        if row["ci_method"].startswith("exact:"):  # (the lemma: float64 round-off, no sampling)
            return
        self.values.append(row["measured_value"])
        self.estimand, self.method = row["estimand"], row["ci_method"]
        if lo is None or hi is None:
            return
        self.n += 1
        self.covered += lo <= truth <= hi
        self.widths.append(hi - lo)
        holds_ok, fails_ok = truth_verdict(row, truth)
        self.wrong += (row["status"] == "holds" and not holds_ok) or (row["status"] == "does not hold" and not fails_ok)

    def width_ratio(self) -> float:
        if len(self.values) < 3 or not self.widths:
            return math.nan
        need = 2 * 1.959964 * float(np.std(self.values, ddof=1))
        return float(np.median(self.widths)) / need if need > 0 else math.nan


def method_kind(method: str) -> str:
    """A short name of how an interval was made (for the table)."""
    for key, short in (("every model", "per model"), ("jackknife", "jackknife-t"), ("Wilson", "Wilson"),
                       ("Fisher", "Fisher z"), ("bootstrap over", "bootstrap"), ("too few", "too few")):
        if key in method:
            return short
    return method.split(" ")[0]


# --quick: small models, small truths, no plasticity (see PLASTICITY)
QUICK = {"D": 16, "VECTORS": 256, "TRUTH_VECTORS": 1024, "TRUTH_HEADS": 1024, "PLASTICITY": False}
_SIZES = tuple(QUICK)  # (the module's sizes: those --quick sets, handed to pool workers)


def _set_sizes(sizes: dict) -> None:
    globals().update(sizes)


def pool(workers: int):
    """A pool of ``workers`` processes that replicate at this process's sizes (those ``--quick`` set, if it did).

    (A forkserver worker imports this module afresh: without the sizes handed over, its replications
    would be the full run's models, checked against the quick truths.)
    """
    import multiprocessing as mp

    sizes = {k: globals()[k] for k in _SIZES}
    return mp.get_context("forkserver").Pool(workers, initializer=_set_sizes, initargs=(sizes,))


def run(names: list[str], reps: int, workers: int, scheme: str | None = None) -> dict[str, dict[str, Tally]]:
    truths = {name: truth_of(name) for name in names}  # (in order: a shared truth is computed once)
    tasks = [(name, rep, scheme) for name in names for rep in range(reps)]
    tallies: dict[str, dict[str, Tally]] = {name: {} for name in names}
    t0 = time.perf_counter()
    if workers > 1:
        workers_pool = pool(workers)
        results = workers_pool.imap_unordered(replicate, tasks)
    else:
        workers_pool, results = None, map(replicate, tasks)
    try:
        for done, (name, rep, _, rows) in enumerate(results, 1):
            truth_here = subset_truth(name, rep) if settings()[name].layer_subset else truths[name]
            for row in rows:
                truth = truth_here.get(row["id"])
                if truth is None or row["measured_value"] is None:
                    continue
                tallies[name].setdefault(row["id"], Tally()).add(row, truth)
            if done % 10 == 0 or done == len(tasks):
                log(f"  {done}/{len(tasks)} replications, {time.perf_counter() - t0:.0f} s")
    finally:
        if workers_pool is not None:
            workers_pool.close()
    return tallies


def report(tallies: dict[str, dict[str, Tally]], reps: int, label: str = "") -> list[str]:
    lines = [f"{label}coverage of the true value by the 95% interval, wrong verdicts, width / needed; "
             f"{reps} replications per setting, [95% Wilson intervals]",
             f"{'setting':<12} {'finding':<30} {'estimand':<17} {'interval':<11} {'coverage':>18} "
             f"{'wrong verdicts':>18} {'width':>6}"]
    for name, by_id in tallies.items():
        for fid in sorted(by_id):
            t = by_id[fid]
            if t.n == 0:
                continue
            c_lo, c_hi = wilson(t.covered, t.n)
            w_lo, w_hi = wilson(t.wrong, t.n)
            lines.append(
                f"{name:<12} {fid:<30} {t.estimand:<17} {method_kind(t.method):<11} "
                f"{t.covered / t.n:5.2f} [{c_lo:.2f}, {c_hi:.2f}] {t.wrong / t.n:5.2f} [{w_lo:.2f}, {w_hi:.2f}] "
                f"{t.width_ratio():6.2f}"
            )
    return lines


def summary(tallies: dict[str, dict[str, Tally]]) -> list[str]:
    """Per setting: the lowest coverage, the highest wrong-verdict rate, the median width ratio; then all pooled."""
    lines = [f"{'setting':<12} {'findings':>8} {'coverage':>9} {'lowest':>7} {'wrong':>6} {'most wrong':>11} "
             f"{'width (median)':>15}"]
    every = [t for by_id in tallies.values() for t in by_id.values() if t.n]
    n, covered, wrong = sum(t.n for t in every), sum(t.covered for t in every), sum(t.wrong for t in every)
    for name, by_id in tallies.items():
        ts = [t for t in by_id.values() if t.n]
        if not ts:
            continue
        low = min(ts, key=lambda t: t.covered / t.n)
        worst = max(ts, key=lambda t: t.wrong / t.n)
        ratios = [t.width_ratio() for t in ts if math.isfinite(t.width_ratio())]
        cov = sum(t.covered for t in ts) / sum(t.n for t in ts)
        wrong_all = sum(t.wrong for t in ts) / sum(t.n for t in ts)
        lines.append(f"{name:<12} {len(ts):8d} {cov:9.3f} {low.covered / low.n:7.2f} {wrong_all:6.3f} "
                     f"{worst.wrong / worst.n:11.2f} {float(np.median(ratios)) if ratios else math.nan:15.2f}")
    if n:
        lines.append(f"all: coverage {covered}/{n} = {covered / n:.3f}, wrong verdicts {wrong}/{n} = {wrong / n:.3f}")
    return lines


# --------------------------------------------------------------------------------------------
# The finite-vector bias of each finding's value (finding_inputs.x_bias)
# --------------------------------------------------------------------------------------------


def bias_table(reps: int, dims=(32, 64), counts=(256, 512, 1024, 2048, 4096), reference: int = 16_384) -> list[str]:
    """Each finding's value at n vectors per file minus its value at ``reference`` vectors, same heads.

    The same planted heads (seeds) at every count, so the difference is the bias of the finite
    vector count, not the heads' spread. Prints the mean difference (its standard error) per finding,
    and c = the largest |bias| × n / d: finding_inputs.x_bias is −c · d / n for the metric behind it.
    """
    lines = []
    for d in dims:
        diffs: dict[str, dict[int, list[float]]] = {}
        for rep in range(reps):
            values = {}
            for n in (*counts, reference):
                spec = _spec(layers=8, q_heads=8, kv_heads=8, seed=500 + rep, model="m")
                spec = dataclasses.replace(spec, head_dim=d, vectors=n)
                values[n] = {r["id"]: r["measured_value"] for r in findings_of([model_tables(spec)], intervals=False)}
            for fid, ref in values[reference].items():
                for n in counts:
                    v = values[n].get(fid)
                    if v is not None and ref is not None:
                        diffs.setdefault(fid, {}).setdefault(n, []).append(v - ref)
            log(f"  bias, d = {d}: replication {rep + 1}/{reps}")
        lines.append(f"d = {d}: value at n vectors per file minus at {reference} (same heads), mean over {reps} models "
                     "of 64 heads (standard error); c = max |bias| n / d")
        lines.append(f"{'finding':<30} " + " ".join(f"{n:>16}" for n in counts) + f" {'c':>7}")
        for fid in sorted(diffs):
            cells, c = [], 0.0
            for n in counts:
                a = np.array(diffs[fid].get(n, [np.nan]))
                mean, se = float(np.mean(a)), float(np.std(a, ddof=1) / math.sqrt(a.size)) if a.size > 1 else math.nan
                cells.append(f"{mean:+9.4f}({se:.4f})")
                if abs(mean) > 2 * se:  # a bias the replications show, not their noise
                    c = max(c, abs(mean) * n / d)
            lines.append(f"{fid:<30} " + " ".join(cells) + f" {c:7.3f}")
    return lines


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=40, help="replications per setting (default 40)")
    ap.add_argument("--settings", nargs="+", help="only these settings (default: all)")
    ap.add_argument("--workers", type=int, default=1, help="processes running replications (default 1)")
    ap.add_argument("--compare", action="store_true",
                    help="the resampling schemes against each other (heads, groups, layers; bootstrap or jackknife over models)")
    ap.add_argument("--details", action="store_true", help="with --compare: every finding's line, not only the summary")
    ap.add_argument("--bias", action="store_true", help="the finite-vector bias of every finding's value")
    ap.add_argument("--quick", action="store_true",
                    help="small models, small truths, 4 replications of 3 settings (the test suite's regression check runs 2: --reps 2)")
    ap.add_argument("--cache", type=Path, help="where the truths are kept (default: the user cache dir)")
    args = ap.parse_args(argv)
    if args.quick:
        _set_sizes(QUICK)
        args.reps = min(args.reps, 4)
        args.settings = args.settings or ["gqa", "layers", "pooled-3"]
    if args.cache is not None:
        globals()["truth_cache"] = lambda: args.cache
    t0 = time.perf_counter()
    if args.bias:
        print("\n".join(bias_table(args.reps)))
        log(f"done in {time.perf_counter() - t0:.0f} s")
        return 0
    names = args.settings or list(COMPARE if args.compare else DEFAULT)
    unknown = set(names) - set(settings())
    if unknown:
        ap.error(f"unknown settings {sorted(unknown)}; known: {', '.join(settings())}")
    if args.compare:
        within = [n for n in names if not n.startswith("pooled") and n != "edge"]
        pooled = [n for n in names if n.startswith("pooled")]
        for scheme in ("heads", "groups", "layers", None):
            if within:
                tallies = run(within, args.reps, args.workers, scheme)
                label = f"units inside the model: {scheme or 'key-head groups in strata of layers (qkdb)'}"
                print("\n".join([label, *(report(tallies, args.reps) if args.details else []), *summary(tallies), ""]))
        for scheme in ("boot", "jack"):
            if pooled:
                tallies = run(pooled, args.reps, args.workers, scheme)
                label = f"models like these: {'bootstrap over models' if scheme == 'boot' else 'jackknife-t'} at every number of models"
                print("\n".join([label, *(report(tallies, args.reps) if args.details else []), *summary(tallies), ""]))
        log(f"done in {time.perf_counter() - t0:.0f} s")
        return 0
    tallies = run(names, args.reps, args.workers)
    print("\n".join(report(tallies, args.reps)))
    print()
    print("\n".join(summary(tallies)))
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

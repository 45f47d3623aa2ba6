"""The finding views of ``sql/`` on planted base tables, checked against plain pandas/numpy.

The base tables are built here, in an in-memory DuckDB, with the columns of
``warehouse/schema.py``; the views are created on them with :func:`create_views` exactly as the
catalog does. Every grouped view is compared, row by row, with an independent pandas
computation from the same base tables; planted effects (a head in each taxonomy category, two
families whose within-family correlation has the opposite sign of the pooled one, a series
whose alpha_k falls tenfold) are checked against their planted values.
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from qkdb.warehouse import intervals
from qkdb.warehouse.schema import TABLES
from qkdb.warehouse.views import create_views, load_view_files, parse_view, restrict_models

# ---------------------------------------------------------------------------------------------
# Planted base tables
# ---------------------------------------------------------------------------------------------

# model, family, series, series_order, phase, step
MODELS = [
    ("a1", "Fam A", None, None, None, None),
    ("a2", "Fam A", None, None, None, None),
    ("b1", "Fam B", None, None, None, None),
    ("s1", "Ser", "ser", 1, "stage1", 40_000),
    ("s2", "Ser", "ser", 2, "stage1", 1_200_000),
    ("s3", "Ser", "ser", 3, "stage2", 4_000_000),
    ("s4", "Ser", "ser", 4, "lc-4k-to-32k", 4_000),
]
POOLED = {"a1", "a2", "b1", "s4"}  # standalone models and the series' latest checkpoint
N_LAYERS, N_HEADS, N_PCS, N_PAIRS, N_PLANES = 4, 5, 3, 6, 4
NOPE_LAYER = 3  # in the series models only: the control layer

# PC0 (r_q, r_k) planted per head index: one head in each taxonomy category.
CATEGORY_OF_HEAD = ["position-dominated", "q-positional", "k-positional", "content-focused", "mixed"]
R_OF_HEAD = [(0.9, 0.85), (0.92, 0.1), (0.1, -0.9), (0.05, 0.2), (0.5, 0.5)]
# Family-level bias/separation: within a family separation falls with bias, across families it rises.
FAMILY_ALPHA = {"Fam A": 1.0e-3, "Fam B": 3.0e-3, "Ser": 2.0e-3}
FAMILY_SEP = {"Fam A": 0.30, "Fam B": 0.60, "Ser": 0.45}
SERIES_MU_Q_A = {"s1": 2.0, "s2": 4.0, "s3": 4.0, "s4": 6.0}  # doubles early, +50% in long context
LC_ALPHA_FACTOR = 0.1  # s4's alpha_k is s3's times this: -90%


ALPHA = 0.01  # params.plane_alpha: ingest's complement.active and rope_planes.rotating are p_adjusted < this


def planted_p(rng: np.random.Generator) -> float:
    """A p-value spread over four decades (half of them below ALPHA), NaN now and then (a degenerate plane)."""
    return math.nan if rng.random() < 0.05 else float(10 ** -rng.uniform(0, 4))


def _table(name: str, rows: list[dict]) -> pa.Table:
    schema = pa.schema([pa.field(c.name, c.type) for c in TABLES[name].columns])
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.table(cols, schema=schema)


def build_tables(models=MODELS, seed: int = 7, mu_q_a=None, alpha_factor=None) -> dict[str, pa.Table]:
    """Base tables with planted structure (see the module docstring).

    ``mu_q_a`` (model -> the Q cluster position on a of every head, default 3) and
    ``alpha_factor`` (model -> factor on alpha_k) plant a series' bias decomposition.
    """
    mu_q_a_of = SERIES_MU_Q_A if mu_q_a is None else mu_q_a
    alpha_factor = {"s4": LC_ALPHA_FACTOR} if alpha_factor is None else alpha_factor
    rng = np.random.default_rng(seed)
    rows: dict[str, list[dict]] = {name: [] for name in TABLES}
    # The draws that the series shares across checkpoints (so s4 = s3 with alpha_k x 0.1).
    u_head = rng.uniform(0, 1, size=(N_LAYERS, N_HEADS))
    for model, family, series, order, phase, step in models:
        rows["models"].append(dict(
            model=model, family=family, series=series, series_order=order, phase=phase, step=step,
            n_layers=N_LAYERS, n_q_heads=N_HEADS, n_kv_heads=N_HEADS, gqa_ratio=1, head_dim=16,
            rope_theta=10000.0, rope_pairing="half", nope_layers=[NOPE_LAYER] if series else [],
        ))
        for layer in range(N_LAYERS):
            depth = layer / (N_LAYERS - 1)
            is_nope = bool(series) and layer == NOPE_LAYER
            for head in range(N_HEADS):
                key = dict(model=model, layer=layer, head=head)
                r_q0, r_k0 = R_OF_HEAD[head]
                r_q0 += rng.uniform(-0.04, 0.04)
                r_k0 += rng.uniform(-0.04, 0.04)
                rows["heads"].append(dict(
                    key, kv_head=head, head_dim=16, n_q=100, n_k=100, n_dropped=0,
                    position_min=0, position_max=999, depth=depth, depth_bin=min(9, math.floor(10 * depth)),
                    is_nope=is_nope,
                    pos_var_q=rng.uniform(0.1, 0.4), pos_var_k=rng.uniform(0.05, 0.2),
                    pc0_pos_share_q=rng.uniform(0.7, 1.0), pc0_pos_share_k=rng.uniform(0.5, 0.9),
                    qk_separation_pc0=rng.uniform(20, 70), fisher_pc0=rng.uniform(10, 80),
                    qk_accuracy_pc01=rng.uniform(0.97, 1.0),
                ))
                evs = np.sort(rng.dirichlet(np.ones(N_PCS + 2)))[::-1][:N_PCS]
                for pc in range(N_PCS):
                    r_q = r_q0 if pc == 0 else rng.uniform(-0.2, 0.5)
                    r_k = r_k0 if pc == 0 else rng.uniform(-0.5, 0.5)
                    rows["pca"].append(dict(
                        key, pc=pc, eigenvalue=float(evs[pc]) * 10, explained_variance=float(evs[pc]),
                        r_q=r_q, r_k=r_k, mu_q=rng.normal(20, 5), mu_k=rng.normal(-20, 5),
                        sd_q=rng.uniform(1, 3), sd_k=rng.uniform(1, 3), fisher=rng.uniform(1, 60), sign_anchor="q",
                    ))
                u = u_head[layer, head]
                alpha_k = FAMILY_ALPHA.get(family, 2.0e-3) * (1 + u)
                alpha_k *= alpha_factor.get(model, 1.0)
                mu_q_a = mu_q_a_of.get(model, 3.0)
                alpha_q = alpha_k / rng.uniform(1.2, 3.0) * (1 if head != 2 else -1)
                var_a = rng.uniform(0.05, 0.2)
                var_b = rng.uniform(0.1, 0.3)
                rows["rotation"].append(dict(
                    key, position_r=rng.uniform(0.5, 1), omega=rng.uniform(0.01, 1), omega_r_squared=rng.uniform(0, 1),
                    r_q_a=rng.uniform(-1, 1), r_k_a=rng.uniform(0.5, 1), alpha_q=alpha_q, alpha_k=alpha_k,
                    mu_q_a=mu_q_a, mu_k_a=rng.normal(), mu_q_b=rng.normal(), mu_k_b=rng.normal(),
                    bias_strength=mu_q_a * alpha_k,
                    separation_strength=FAMILY_SEP.get(family, 0.4) - 0.1 * u + rng.normal(0, 0.01),
                    var_frac_a=var_a, var_frac_b=var_b, plane_var_fraction=var_a + var_b,
                    residual_pos_r=rng.uniform(1e-16, 1e-14), content_var_b=rng.uniform(1, 2),
                    drift_norm=rng.uniform(1, 2), b_method="eig",
                ))
                shares = rng.dirichlet(np.ones(N_PAIRS + 1))
                for pair in range(N_PAIRS):
                    angle_r, ring = rng.uniform(0, 1, 2)
                    r2, omega = rng.uniform(0, 0.2), rng.uniform(0.001, 0.02)  # 0.16 to 3.2 turns over 999 tokens
                    p_adj = planted_p(rng)
                    rows["complement"].append(dict(
                        key, pair=pair, var_frac=float(shares[pair]), angle_r=angle_r, ring=ring,
                        omega=omega, omega_r_squared=r2, qk_accuracy=rng.uniform(0.45, 0.6),
                        statistic=rng.uniform(0, 100), p_value=p_adj / 2, p_adjusted=p_adj,
                        active=bool(p_adj < ALPHA),
                    ))
                plane_shares = rng.dirichlet(np.ones(N_PLANES))
                for j in range(N_PLANES):
                    cq, ck = rng.uniform(0, 0.45, 2) if is_nope else rng.uniform(0, 1, 2)
                    turns = rng.uniform(0, 3)
                    # Ingest tests only planes turning at least once; the NoPE control has no ring.
                    p_adj = math.nan if turns < 1 else (rng.uniform(0.05, 1) if is_nope else planted_p(rng))
                    rows["rope_planes"].append(dict(
                        key, j=j, omega=10000.0 ** (-2 * j / 16), omega_source="given", turns=turns,
                        coherence_q=cq, coherence_k=ck, raw_coherence_q=rng.uniform(0, 0.2),
                        raw_coherence_k=rng.uniform(0, 0.2), radius_q=1.0, radius_k=1.0,
                        var_frac=float(plane_shares[j]), statistic=rng.uniform(0, 100), p_value=p_adj / 2,
                        p_adjusted=p_adj, rotating=bool(p_adj < ALPHA),
                    ))
    return {name: _table(name, r) for name, r in rows.items()}


def make_connection(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the base tables as tables and every finding view created."""
    con = duckdb.connect()
    for name, tbl in tables.items():
        con.register(f"_src_{name}", tbl)
        con.execute(f'create table "{name}" as select * from "_src_{name}"')
        con.unregister(f"_src_{name}")
    create_views(con)
    intervals.install(con)  # as the warehouse does when models are published
    return con


def empty_tables() -> dict[str, pa.Table]:
    return {name: _table(name, []) for name in TABLES}


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return build_tables()


@pytest.fixture(scope="module")
def con(tables):
    c = make_connection(tables)
    yield c
    c.close()


@pytest.fixture(scope="module")
def frames(tables) -> dict[str, pd.DataFrame]:
    return {name: t.to_pandas() for name, t in tables.items()}


# ---------------------------------------------------------------------------------------------
# An independent reference in pandas
# ---------------------------------------------------------------------------------------------

HIGH, LOW = 0.7, 0.3


def category(r_q: float, r_k: float) -> str | None:
    if r_q is None or r_k is None or np.isnan(r_q) or np.isnan(r_k):
        return None
    if r_q > HIGH and abs(r_k) > HIGH:
        return "position-dominated"
    if r_q > HIGH and abs(r_k) < LOW:
        return "q-positional"
    if r_q < LOW and abs(r_k) > HIGH:
        return "k-positional"
    if r_q < LOW and abs(r_k) < LOW:
        return "content-focused"
    return "mixed"


def head_frame(frames) -> pd.DataFrame:
    """One row per head: models + heads + PC0 of pca + rotation + taxonomy (like head_metrics)."""
    m = frames["models"][["model", "family", "series", "series_order", "phase", "step"]]
    pc0 = frames["pca"][frames["pca"].pc == 0].drop(columns=["pc"])
    h = frames["heads"].merge(m, on="model").merge(pc0, on=["model", "layer", "head"], how="left")
    h = h.merge(frames["rotation"], on=["model", "layer", "head"], how="left")
    h["category"] = [category(a, b) for a, b in zip(h.r_q, h.r_k)]
    return h


def pooled_models(frames) -> set[str]:
    m = frames["models"]
    out = set(m[m.series.isna()].model)
    for _, g in m[m.series.notna()].groupby("series"):
        out.add(g.sort_values("series_order").model.iloc[-1])
    return out


def scopes(h: pd.DataFrame, pooled: set[str]):
    """(scope, family, model, rows) for every model, pooled family and the pooled overall."""
    for model, g in h.groupby("model"):
        yield "model", g.family.iloc[0], model, g
    hp = h[h.model.isin(pooled)]
    for fam, g in hp.groupby("family"):
        yield "family", fam, None, g
    if len(hp):
        yield "overall", None, None, hp


def _key(v):
    return "<NULL>" if v is None or (isinstance(v, float) and math.isnan(v)) else v


def view_rows(con, view: str, keys: list[str]) -> dict[tuple, dict]:
    df = con.execute(f"select * from {view}").df()
    out = {}
    for rec in df.to_dict("records"):
        k = tuple(_key(rec[c]) for c in keys)
        assert k not in out, f"{view}: duplicate key {k}"
        out[k] = rec
    return out


def assert_rows_match(actual: dict[tuple, dict], expected: dict[tuple, dict], view: str) -> None:
    assert set(actual) == set(expected), f"{view}: keys differ: {set(actual) ^ set(expected)}"
    for k, exp in expected.items():
        got = actual[k]
        for col, want in exp.items():
            have = got[col]
            if want is None or (isinstance(want, float) and math.isnan(want)):
                assert have is None or (isinstance(have, float) and math.isnan(have)), f"{view} {k} {col}: {have} != NULL"
            elif isinstance(want, (str, bool, np.bool_)):
                assert have == want, f"{view} {k} {col}: {have!r} != {want!r}"
            else:
                assert have == pytest.approx(float(want), rel=1e-9, abs=1e-12), f"{view} {k} {col}: {have} != {want}"


def grouped_expected(h, pooled, fn, by: str | None = None) -> dict[tuple, dict]:
    exp = {}
    for scope, fam, model, g in scopes(h, pooled):
        if by is None:
            exp[(scope, _key(fam), _key(model))] = fn(g)
        else:
            for v, gg in g.groupby(by):
                exp[(scope, _key(fam), _key(model), v)] = fn(gg)
    return exp


KEYS = ["scope", "family", "model"]


# ---------------------------------------------------------------------------------------------
# Catalog mechanics
# ---------------------------------------------------------------------------------------------


def test_every_spec_view_has_a_file_with_a_header():
    names = {v.name for v in load_view_files()}
    spec = {
        "taxonomy", "taxonomy_fractions", "pc_roles", "explained_variance", "positional_variance",
        "qk_separability", "drift_correlation", "slope_ratio", "bias_sign", "plane_variance",
        "depth_profile", "bias_separation", "rotation_planes", "lemma_check", "series_trajectory",
        "bias_decomposition", "findings", "head_metrics", "params",
    }
    assert spec <= names
    for v in load_view_files():
        assert v.description and len(v.description.splitlines()) == 1
        if v.name != "head_metrics":  # the lead's file
            assert v.seed, f"{v.name}: no '-- Seed:' line"
            assert v.body.lower().lstrip().startswith(("select", "with")), v.name


def test_dependencies_come_first():
    order = [v.name for v in load_view_files()]
    for v in load_view_files():
        for dep in v.depends:
            if dep in order:
                assert order.index(dep) < order.index(v.name)


def test_parse_view_header():
    v = parse_view("x", "-- What x is.\n-- Seed: 42%\n-- Depends: a, b\n-- Column c: the c.\n-- A note.\nselect 1 as c\n")
    assert (v.description, v.seed, v.depends, v.columns, v.notes) == ("What x is.", "42%", ("a", "b"), {"c": "the c."}, ("A note.",))
    with pytest.raises(ValueError):
        parse_view("y", "select 1")


def test_every_column_of_every_view_is_described(con):
    rows = con.execute(
        "select table_name, column_name, comment from duckdb_columns() "
        "where table_name in (select view_name from duckdb_views() where not internal)"
    ).fetchall()
    undocumented = [(t, c) for t, c, comment in rows if not comment]
    assert rows and not undocumented
    views = dict(con.execute("select view_name, comment from duckdb_views() where not internal").fetchall())
    assert all(views[v.name] == v.description for v in load_view_files())


def test_own_column_lines_name_real_columns(con):
    for v in load_view_files():
        cols = {r[0] for r in con.execute(f"select column_name from duckdb_columns() where table_name = '{v.name}'").fetchall()}
        assert set(v.columns) <= cols, f"{v.name}: documents missing columns {set(v.columns) - cols}"


def test_views_are_empty_on_empty_tables_and_recreation_is_idempotent():
    c = make_connection(empty_tables())
    names = [v.name for v in load_view_files()]
    for name in names:
        n = c.execute(f'select count(*) from "{name}"').fetchall()[0][0]
        if name in ("params", "finding_state"):
            assert n == 1
        elif name == "findings":  # every finding is listed, each without data
            statuses = {r[0] for r in c.execute("select status from findings").fetchall()}
            assert statuses == {"no data"}
        else:
            assert n == 0, name
    before = c.execute("select view_name, sql, comment from duckdb_views() where not internal order by 1").fetchall()
    assert create_views(c) == names
    after = c.execute("select view_name, sql, comment from duckdb_views() where not internal order by 1").fetchall()
    assert before == after


def test_params_table_is_kept_and_thresholds_change_every_view(tables):
    c = make_connection(tables)
    n0 = c.execute("select count(*) from taxonomy where category = 'position-dominated'").fetchall()[0][0]
    c.execute("create table p2 as select * replace (0.95 as taxonomy_high) from params")
    c.execute("drop view params")
    c.execute("alter table p2 rename to params")
    create_views(c)  # must not replace the user's table
    assert float(c.execute("select taxonomy_high from params").fetchall()[0][0]) == 0.95
    n1 = c.execute("select count(*) from taxonomy where category = 'position-dominated'").fetchall()[0][0]
    assert n0 == len(MODELS) * N_LAYERS and n1 == 0


def test_temp_params_override_on_a_session(con):
    # A temp view shadows the catalog's params for every view of this connection only.
    con.execute("create temp view params as select * replace (0.0 as taxonomy_low, 0.0 as taxonomy_high) from memory.main.params")
    try:
        cats = {r[0] for r in con.execute("select distinct category from taxonomy").fetchall()}
        assert cats <= {"position-dominated", "mixed"}
    finally:
        con.execute("drop view temp.main.params")
    assert len({r[0] for r in con.execute("select distinct category from taxonomy").fetchall()}) == 5


# ---------------------------------------------------------------------------------------------
# Each view against pandas
# ---------------------------------------------------------------------------------------------


def test_model_pool(con, frames):
    got = dict(con.execute("select model, pooled from model_pool").fetchall())
    assert {m for m, p in got.items() if p} == POOLED == pooled_models(frames)
    lc = dict(con.execute("select model, long_context from model_pool").fetchall())
    assert [m for m, v in lc.items() if v] == ["s4"]


def test_taxonomy_plants_every_category(con, frames):
    h = head_frame(frames)
    got = {(m, l, hd): c for m, l, hd, c in con.execute("select model, layer, head, category from taxonomy").fetchall()}
    for rec in h.itertuples():
        assert got[(rec.model, rec.layer, rec.head)] == CATEGORY_OF_HEAD[rec.head] == rec.category


def test_taxonomy_fractions(con, frames):
    h = head_frame(frames)
    exp = {}
    for scope, fam, model, g in scopes(h, POOLED):
        for cat in CATEGORY_OF_HEAD:
            n = int((g.category == cat).sum())
            exp[(scope, _key(fam), _key(model), cat)] = dict(
                n_heads=n, n_classified=len(g), fraction=n / len(g), n_models=g.model.nunique()
            )
    assert_rows_match(view_rows(con, "taxonomy_fractions", KEYS + ["category"]), exp, "taxonomy_fractions")
    # Planted: one head in five per category, so every fraction is exactly 1/5.
    fr = con.execute("select distinct fraction from taxonomy_fractions").fetchall()
    assert fr == [(0.2,)]


def test_pc_roles_and_explained_variance(con, frames):
    h = head_frame(frames)[["model", "family", "layer", "head"]]
    p = frames["pca"].merge(h, on=["model", "layer", "head"])

    def roles(g):
        return dict(n_heads=len(g), n_models=g.model.nunique(), mean_r_q=g.r_q.mean(), mean_r_k=g.r_k.mean(),
                    mean_abs_r_k=g.r_k.abs().mean(), sd_r_q=g.r_q.std(ddof=1), sd_r_k=g.r_k.std(ddof=1))

    assert_rows_match(view_rows(con, "pc_roles", KEYS + ["pc"]), grouped_expected(p, POOLED, roles, "pc"), "pc_roles")

    def ev(g):
        return dict(mean_explained_variance=g.explained_variance.mean(),
                    median_explained_variance=g.explained_variance.median(),
                    sd_explained_variance=g.explained_variance.std(ddof=1))

    exp = grouped_expected(p, POOLED, ev, "pc")
    for k in exp:  # cumulative over PCs 0..pc of the group's means
        exp[k]["cumulative_explained_variance"] = sum(
            exp[k[:3] + (pc,)]["mean_explained_variance"] for pc in range(k[3] + 1)
        )
    assert_rows_match(view_rows(con, "explained_variance", KEYS + ["pc"]), exp, "explained_variance")


def test_positional_variance_and_separability(con, frames):
    h = head_frame(frames)

    def pv(g):
        return dict(n_heads=len(g), mean_pos_var_q=g.pos_var_q.mean(), mean_pos_var_k=g.pos_var_k.mean(),
                    median_pos_var_q=g.pos_var_q.median(), median_pos_var_k=g.pos_var_k.median(),
                    mean_pc0_pos_share_q=g.pc0_pos_share_q.mean(), mean_pc0_pos_share_k=g.pc0_pos_share_k.mean())

    assert_rows_match(view_rows(con, "positional_variance", KEYS), grouped_expected(h, POOLED, pv), "positional_variance")

    def sep(g):
        return dict(mean_fisher_pc0=g.fisher_pc0.mean(), median_fisher_pc0=g.fisher_pc0.median(),
                    mean_accuracy_pc01=g.qk_accuracy_pc01.mean(), min_accuracy_pc01=g.qk_accuracy_pc01.min(),
                    max_accuracy_pc01=g.qk_accuracy_pc01.max(), mean_separation_pc0=g.qk_separation_pc0.mean(),
                    median_separation_pc0=g.qk_separation_pc0.median(), mean_abs_mu_q_pc0=g.mu_q.abs().mean())

    assert_rows_match(view_rows(con, "qk_separability", KEYS), grouped_expected(h, POOLED, sep), "qk_separability")


def test_drift_slope_bias_plane_lemma(con, frames):
    h = head_frame(frames)

    def drift(g):
        return dict(mean_abs_r_q_a=g.r_q_a.abs().mean(), mean_abs_r_k_a=g.r_k_a.abs().mean(),
                    share_k_above_q=(g.r_k_a.abs() > g.r_q_a.abs()).mean(), mean_position_r=g.position_r.mean(),
                    mean_pc0_r_q=g.r_q.mean(), mean_pc0_abs_r_k=g.r_k.abs().mean())

    assert_rows_match(view_rows(con, "drift_correlation", KEYS), grouped_expected(h, POOLED, drift), "drift_correlation")

    def slope(g):
        ratio = g.alpha_k.abs() / g.alpha_q.abs()
        return dict(n_heads=len(g), median_ratio=ratio.median(), q25_ratio=np.quantile(ratio, 0.25),
                    q75_ratio=np.quantile(ratio, 0.75), geomean_ratio=float(np.exp(np.log(ratio).mean())),
                    share_k_faster=(ratio > 1).mean())

    assert_rows_match(view_rows(con, "slope_ratio", KEYS), grouped_expected(h, POOLED, slope), "slope_ratio")

    def bias(g):
        b = g.bias_strength
        return dict(n_heads=len(g), n_positive=int((b > 0).sum()), n_negative=int((b < 0).sum()),
                    share_positive=(b > 0).mean(), share_mu_q_a_positive=(g.mu_q_a > 0).mean(),
                    share_alpha_k_positive=(g.alpha_k > 0).mean(), mean_bias_strength=b.mean(),
                    median_bias_strength=b.median())

    assert_rows_match(view_rows(con, "bias_sign", KEYS), grouped_expected(h, POOLED, bias), "bias_sign")

    def plane(g):
        pv = g.plane_var_fraction
        return dict(mean_plane_var_fraction=pv.mean(), median_plane_var_fraction=pv.median(),
                    min_plane_var_fraction=pv.min(), max_plane_var_fraction=pv.max(),
                    mean_var_frac_a=g.var_frac_a.mean(), mean_var_frac_b=g.var_frac_b.mean(),
                    share_b_above_a=(g.var_frac_b > g.var_frac_a).mean(), mean_complement_fraction=1 - pv.mean())

    assert_rows_match(view_rows(con, "plane_variance", KEYS), grouped_expected(h, POOLED, plane), "plane_variance")

    def lemma(g):
        w = g.loc[g.residual_pos_r.idxmax()]
        return dict(max_residual_pos_r=g.residual_pos_r.max(), mean_residual_pos_r=g.residual_pos_r.mean(),
                    n_without_drift=0, worst_head=f"{w['model']} l{w['layer']:02d}.h{w['head']:02d}")

    assert_rows_match(view_rows(con, "lemma_check", KEYS), grouped_expected(h, POOLED, lemma), "lemma_check")


def test_depth_profile(con, frames):
    h = head_frame(frames)

    def depth(g):
        return dict(n_heads=len(g), mean_r_q=g.r_q.mean(), mean_r_k=g.r_k.mean(), mean_abs_r_k=g.r_k.abs().mean(),
                    mean_abs_r_q_a=g.r_q_a.abs().mean(), mean_abs_r_k_a=g.r_k_a.abs().mean(),
                    mean_bias_strength=g.bias_strength.mean(), mean_explained_variance=g.explained_variance.mean())

    exp = grouped_expected(h, POOLED, depth, "depth_bin")
    assert_rows_match(view_rows(con, "depth_profile", KEYS + ["depth_bin"]), exp, "depth_profile")
    assert {k[3] for k in exp} == {0, 3, 6, 9}


def test_bias_separation_simpsons_paradox(con, frames):
    h = head_frame(frames)

    def corr(g):
        return dict(n_heads=len(g), r=float(np.corrcoef(g.bias_strength, g.separation_strength)[0, 1]),
                    mean_bias_strength=g.bias_strength.mean(), mean_separation_strength=g.separation_strength.mean())

    exp = grouped_expected(h, POOLED, corr)
    got = view_rows(con, "bias_separation", KEYS)
    assert_rows_match(got, exp, "bias_separation")
    overall = got[("overall", "<NULL>", "<NULL>")]["r"]
    # Planted: separation falls with bias inside each family, rises across families.
    assert overall > 0.3
    for fam in ("Fam A", "Fam B"):
        row = got[("family", fam, "<NULL>")]
        assert row["r"] < -0.9 and row["reverses"] is True and row["overall_r"] == pytest.approx(overall)
    assert got[("overall", "<NULL>", "<NULL>")]["reverses"] is None


def test_bias_separation_zero_variance_gives_null():
    tables = build_tables(models=[("c1", "Const", None, None, None, None)])
    rot = tables["rotation"].to_pandas()
    rot["bias_strength"] = 1.0  # no variance: corr is NULL, not NaN
    tables["rotation"] = pa.Table.from_pandas(rot, schema=tables["rotation"].schema, preserve_index=False)
    c = make_connection(tables)
    assert c.execute("select r from bias_separation where scope = 'overall'").fetchall() == [(None,)]


def _rotation_expected(frames):
    comp, rope = frames["complement"].copy(), frames["rope_planes"].copy()
    comp["act"] = comp.p_adjusted.fillna(1.0) < ALPHA
    rope["rot"] = rope.p_adjusted.fillna(1.0) < ALPHA
    out = {}
    for (m, l, hd), g in comp.groupby(["model", "layer", "head"]):
        r = rope[(rope["model"] == m) & (rope["layer"] == l) & (rope["head"] == hd)]
        rr = r[r.rot]
        strongest = rr.loc[np.maximum(rr.coherence_q, rr.coherence_k).idxmax()] if len(rr) else None
        out[(m, l, hd)] = dict(
            n_pairs=len(g), n_active=int(g.act.sum()), active_share_of_pairs=g.act.mean(),
            active_var_share=g.var_frac[g.act].sum(), pairs_var_share=g.var_frac.sum(), max_angle_r=g.angle_r.max(),
            mean_active_qk_accuracy=g.qk_accuracy[g.act].mean() if g.act.any() else None,
            n_rope_planes=len(r), n_rotating=int(r.rot.sum()), rotating_var_share=r.var_frac[r.rot].sum(),
            strongest_rope_plane=None if strongest is None else int(strongest.j),
            strongest_rope_omega=None if strongest is None else float(strongest.omega),
        )
    return out


def test_rotation_planes_and_summary(con, frames):
    exp = _rotation_expected(frames)
    assert_rows_match(view_rows(con, "rotation_planes", ["model", "layer", "head"]), exp, "rotation_planes")
    # The stored flags (the ingest's rule) agree with the view's counts under the params defaults.
    stored = frames["complement"].groupby(["model", "layer", "head"]).active.sum()
    assert all(exp[k]["n_active"] == n for k, n in stored.items())
    assert 0 < stored.sum() < len(frames["complement"])
    rot = frames["rope_planes"].groupby(["model", "layer", "head"]).rotating.sum()
    assert all(exp[k]["n_rotating"] == n for k, n in rot.items())

    per_head = pd.DataFrame([dict(model=m, layer=l, head=hd, **v) for (m, l, hd), v in exp.items()])
    h = head_frame(frames)[["model", "family", "layer", "head", "is_nope"]].merge(per_head, on=["model", "layer", "head"])
    h["layers"] = np.where(h.is_nope, "nope", "rope")

    def summary(g):
        return dict(n_heads=len(g), mean_n_active=g.n_active.mean(), min_n_active=g.n_active.min(),
                    max_n_active=g.n_active.max(), mean_active_var_share=g.active_var_share.mean(),
                    mean_n_rotating=g.n_rotating.mean(), mean_rotating_var_share=g.rotating_var_share.mean(),
                    share_heads_rotating=(g.n_rotating > 0).mean(), max_angle_r=g.max_angle_r.max())

    exp_s = grouped_expected(h, POOLED, summary, "layers")
    got = view_rows(con, "rotation_planes_summary", KEYS + ["layers"])
    assert_rows_match(got, exp_s, "rotation_planes_summary")
    # The NoPE control: planted without coherent planes, so no head there rotates.
    assert got[("model", "Ser", "s1", "nope")]["share_heads_rotating"] == 0


def test_series_trajectory(con, frames):
    h = head_frame(frames)
    s = h[h.series.notna()]
    got = view_rows(con, "series_trajectory", ["model"])
    assert list(con.execute("select model from series_trajectory").df().model) == ["s1", "s2", "s3", "s4"]
    exp = {}
    for m, g in s.groupby("model"):
        ak = g.r_k_a.abs()
        exp[(m,)] = dict(
            n_heads=len(g), mean_r_q=g.r_q.mean(), sd_r_q=g.r_q.std(ddof=1), mean_r_k=g.r_k.mean(),
            mean_explained_variance=g.explained_variance.mean(), median_abs_r_k_a=ak.median(),
            p25_abs_r_k_a=np.quantile(ak, 0.25), p75_abs_r_k_a=np.quantile(ak, 0.75),
            median_separation_strength=g.separation_strength.median(), median_bias_strength=g.bias_strength.median(),
            p75_plane_var_fraction=np.quantile(g.plane_var_fraction, 0.75), mean_mu_q_a=g.mu_q_a.mean(),
            mean_alpha_k=g.alpha_k.mean(), frac_position_dominated=(g.category == "position-dominated").mean(),
            frac_mixed=(g.category == "mixed").mean(), long_context=(m == "s4"),
        )
    assert_rows_match(got, exp, "series_trajectory")


def test_bias_decomposition_planted_collapse(con):
    got = view_rows(con, "bias_decomposition", ["model"])
    s4 = got[("s4",)]
    assert s4["baseline_model"] == "s3"
    # Planted: alpha_k x 0.1 (-90%), mu_q_a 4 -> 6 (+50%), so bias x 0.15 (-85%).
    assert s4["pct_alpha_k_vs_baseline"] == pytest.approx(-90.0, abs=1e-9)
    assert s4["pct_mu_q_a_vs_baseline"] == pytest.approx(50.0, abs=1e-9)
    assert s4["pct_bias_vs_baseline"] == pytest.approx(-85.0, abs=1e-9)
    assert got[("s2",)]["pct_mu_q_a_vs_previous"] == pytest.approx(100.0)
    assert got[("s1",)]["pct_bias_vs_previous"] is None or math.isnan(got[("s1",)]["pct_bias_vs_previous"])
    assert got[("s3",)]["pct_bias_vs_baseline"] == pytest.approx(0.0, abs=1e-9)


def test_any_subset_of_models(tables):
    # Restricting the connection to some models gives the same rows as a warehouse holding only them.
    keep = ["a2", "s2"]
    c1 = make_connection(tables)
    restrict_models(c1, keep)
    sub = {}
    for name, t in tables.items():
        sub[name] = t.filter(pa.compute.is_in(t["model"], pa.array(keep))) if "model" in t.column_names else t
    c2 = make_connection(sub)
    for v in load_view_files():
        q = f'select * from "{v.name}"'
        a, b = c1.execute(q).df(), c2.execute(q).df()
        pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=v.name)
    # s2 is the latest ingested checkpoint of its series in that subset, so it is pooled.
    assert c1.execute("select pooled from model_pool where model = 's2'").fetchall() == [(True,)]


def test_data_dictionary_script(tmp_path):
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "data_dictionary.py"))
    text = script["render"]()
    for name in TABLES:
        assert f"\n### {name}\n" in text
    for v in load_view_files():
        assert f"\n### {v.name}\n" in text and f"sql/{v.name}.sql" in text
    assert "| `fraction` | DOUBLE | n_heads / n_classified. |" in text
    out = tmp_path / "dd.md"
    assert script["main"](["-o", str(out), "--check"]) == 1  # missing file: out of date
    assert script["main"](["-o", str(out)]) == 0 and out.read_text() == text
    assert script["main"](["-o", str(out), "--check"]) == 0

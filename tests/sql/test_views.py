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

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from helpers.tables import (  # noqa: F401 (some are used by the tests that import them from here)
    MODELS,
    POOLED,
    N_LAYERS,
    N_HEADS,
    N_PCS,
    N_PAIRS,
    N_PLANES,
    NOPE_LAYER,
    CATEGORY_OF_HEAD,
    R_OF_HEAD,
    FAMILY_ALPHA,
    FAMILY_SEP,
    SERIES_MU_Q_A,
    LC_ALPHA_FACTOR,
    ALPHA,
    planted_p,
    _table,
    build_tables,
    make_connection,
    empty_tables,
    HIGH,
    LOW,
    category,
    head_frame,
    pooled_models,
    scopes,
    _key,
    view_rows,
    assert_rows_match,
    grouped_expected,
    KEYS,
)
from qkdb.warehouse.schema import TABLES
from qkdb.warehouse.views import create_views, load_view_files, parse_view, restrict_models

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


# Views that hold the shipped benchmark scores and reference values in every warehouse.
REFERENCE_VIEWS = ("benchmark_runs", "model_metrics", "plasticity_benchmark", "plasticity_length", "plasticity_benchmark_fit")


def test_views_are_empty_on_empty_tables_and_recreation_is_idempotent():
    c = make_connection(empty_tables())
    names = [v.name for v in load_view_files()]
    for name in names:
        n = c.execute(f'select count(*) from "{name}"').fetchall()[0][0]
        if name in ("params", "finding_state"):
            assert n == 1
        elif name in REFERENCE_VIEWS:  # the shipped scores and the author's values: nothing of this warehouse
            own = c.execute(f"select count(*) from \"{name}\" where source = 'qkdb'").fetchall()[0][0] if name != "benchmark_runs" else 0
            assert n > 0 and own == 0, name
        elif name == "findings":  # every finding is listed, each without data
            statuses = {r[0] for r in c.execute("select status from findings").fetchall()}
            assert statuses == {"no data"}
        else:
            assert n == 0, name
    # (make_connection copies its views from a database create_views made: made here once more first,
    # since DuckDB prints an EXCLUDE list in no fixed order, and a copy may print it in another)
    assert create_views(c) == names
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
        if v.name == "finding_inputs":
            # (no ORDER BY: its rows come as its joins hash them, and sorting them would cost the
            # intervals' refresh its memory cap; its readers sum over them)
            a, b = (f.sort_values(list(f.columns), ignore_index=True) for f in (a, b))
        pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=v.name)
    # s2 is the latest ingested checkpoint of its series in that subset, so it is pooled.
    assert c1.execute("select pooled from model_pool where model = 's2'").fetchall() == [(True,)]


def test_data_dictionary_script(tmp_path):
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "data_dictionary.py"))
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

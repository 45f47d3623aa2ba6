"""Planted warehouse tables in an in-memory DuckDB, and an independent pandas reference for the views.

The base tables have the columns of ``warehouse/schema.py``; the views are created on them with
``create_views`` exactly as the catalog does, and their intervals computed as at publish time.
"""

from __future__ import annotations

import functools
import math
import os

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from qkdb.warehouse import intervals
from qkdb.warehouse.schema import TABLES
from qkdb.warehouse.views import create_views

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
N_LENGTH_BINS = 8  # plasticity_profile's length bins (1k .. 128k tokens of context)

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
    length_rng = np.random.default_rng([seed, 39])
    mass_rng = np.random.default_rng([seed, 41])  # (a stream of its own: the other tables' draws stay as they were)
    text_rng = np.random.default_rng([seed, 42])  # (per-text attention on token 0: one more stream of its own)
    freq_rng = np.random.default_rng([seed, 49])  # (frequency usage: its own stream too)
    for model, family, series, order, phase, step in models:
        rows["models"].append(dict(
            model=model, family=family, series=series, series_order=order, phase=phase, step=step,
            n_layers=N_LAYERS, n_q_heads=N_HEADS, n_kv_heads=N_HEADS, gqa_ratio=1, head_dim=16,
            rope_theta=10000.0, rope_pairing="half", rope="rotary", nope_layers=[NOPE_LAYER] if series else [],
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
                # Plasticity by taxonomy category as seed 003 predicts it (content-focused high, Q-positional
                # between, position-dominated low), falling along the context; the recency slope near bias.
                ap = {"position-dominated": 0.3, "q-positional": 0.5, "k-positional": 0.4, "content-focused": 0.8,
                      "mixed": 0.45}[CATEGORY_OF_HEAD[head]] + rng.uniform(-0.05, 0.05)
                drop = rng.uniform(0.05, 0.2)
                for est, shift in (("empirical", 0.0), ("gaussian", 0.02), ("thesis", -0.03)):
                    rows["plasticity"].append(dict(
                        key, estimator=est, context_length=4096, ap_overall=ap + shift, ap_first20=ap + shift + drop / 2,
                        ap_last20=ap + shift - drop / 2, ap_drop=drop, ap_retention=(ap - drop / 2) / (ap + drop / 2),
                        n_pairs=9 * 1024, gauss_gap=0.02))
                # AP by context length, falling with it (its own draws: the tables above stay as they were).
                for k in range(N_LENGTH_BINS):
                    hi = 1024 * 2**k
                    rows["plasticity_profile"].append(dict(
                        key, estimator="empirical", bin_kind="length", bin=k, lo=0 if k == 0 else hi // 2, hi=hi,
                        tau=0.75 * hi, n_q=64, n_pairs=1024, ap=ap - 0.02 * k + length_rng.uniform(-0.02, 0.02)))
                ratio = rng.uniform(0.9, 1.3)
                rows["recency"].append(dict(
                    key, logit_slope=mu_q_a * alpha_k * ratio, logit_slope_se=1e-4, predicted_slope=mu_q_a * alpha_k,
                    slope_ratio=ratio, n_queries=100, n_texts=4, mean_keys=50.0))
                # Attention mass: even heads are sinks (weight on token 0 above 0.3) whose advantage is
                # mostly a bias every query shares (bias_share = adv^2 / (adv^2 + sd^2) > 0.5).
                # (one advantage and spread per head: a head's bias share is its own, in every bin)
                adv, sd = mass_rng.uniform(4, 8), mass_rng.uniform(1, 3)
                for b, (lo, hi) in enumerate(((0, 4), (4, 16), (16, 64))):
                    m0 = mass_rng.uniform(0.5, 0.9) if head % 2 == 0 else mass_rng.uniform(0.0, 0.2)
                    # four dense 64-token texts, each a little off the head's mean; the first model also on repeated
                    # tokens (Gu et al.'s control), where no head has a sink
                    for text in range(4):
                        rows["attention_mass_text"].append(dict(
                            key, input_kind="natural", example_id=text, bin=b, q_lo=lo, q_hi=hi, n_queries=hi - lo,
                            alpha0=float(np.clip(m0 + text_rng.normal(0, 0.1), 0, 1))))
                        if model == models[0][0]:
                            rows["attention_mass_text"].append(dict(
                                key, input_kind="repeated", example_id=text, bin=b, q_lo=lo, q_hi=hi,
                                n_queries=hi - lo, alpha0=float(text_rng.uniform(0.0, 0.1))))
                    if model == models[0][0]:
                        rows["attention_mass"].append(dict(
                            key, input_kind="repeated", bin=b, q_lo=lo, q_hi=hi, n_queries=10, n_token0=10,
                            mass_token0=0.05, mass_recent_64=1.0, captured_share=1.0, token0_advantage=0.0,
                            token0_advantage_sq=1.0))
                    rows["attention_mass"].append(dict(
                        key, input_kind="natural", bin=b, q_lo=lo, q_hi=hi, n_queries=10, n_token0=10, mass_token0=m0,
                        mass_tokens0_3=min(1.0, m0 + 0.05), mass_recent_64=1.0, mass_recent_256=1.0,
                        mass_recent_1024=1.0, captured_share=1.0, sink_margin=adv - 2, token0_advantage=adv,
                        token0_advantage_sq=adv ** 2 + sd ** 2))
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
                # Frequency usage (SPEC §4.8) in RoPE layers: "trained" over 4,096 tokens, the critical plane is 6
                # of 8, and the two low planes carry about twice their even share (rope.low_band holds).
                if not is_nope:
                    omega = 10000.0 ** (-2 * np.arange(8) / 16)  # (head_dim 16: 8 planes)
                    turns = omega * 4096 / (2 * math.pi)
                    share = freq_rng.dirichlet(np.where(turns < 1, 12.0, 3.0))
                    low = float(share[turns < 1].sum())
                    for j in range(8):
                        rows["frequency_usage"].append(dict(
                            key, j=j, omega=omega[j], omega_trained=omega[j], logit_mean=freq_rng.normal(),
                            logit_abs=float(share[j]) * 10, logit_share=float(share[j]), bound_share=float(share[j]),
                            turns_trained=turns[j], critical_plane=6, low_band=bool(turns[j] < 1),
                            nonrotating_dims=0, nonrotating_share=0.0, low_band_share=low,
                            low_band_excess=low / (2 / 8), n_pairs=4096, trained_context=4096))
    return {name: _table(name, r) for name, r in rows.items()}


def make_connection(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the base tables as tables and every finding view created.

    The views come from a database made once per process and set of table types (``create_views``
    over empty tables of those types: ~2 s, bound and described), copied into each new connection
    (~0.15 s) before the tables are filled: a view is bound again at every query, over the tables
    of the types it was made over.
    """
    tables = {**bundled_imported(), **tables}
    con = duckdb.connect()
    con.execute(f"attach '{_views_database(tables)}' as _qkdb_views (read_only)")
    con.execute("copy from database _qkdb_views to memory")
    con.execute("detach _qkdb_views")
    for name, tbl in tables.items():
        con.register(f"_src_{name}", tbl)
        con.execute(f'create or replace table "{name}" as select * from "_src_{name}"')
        con.unregister(f"_src_{name}")
    intervals.install(con)  # as the warehouse does when models are published
    return con


_VIEWS_DATABASES: dict[tuple, str] = {}


def _views_database(tables: dict[str, pa.Table]) -> str:
    """A database file with empty tables of these tables' types and every finding view over them."""
    key = tuple(sorted((name, str(tbl.schema)) for name, tbl in tables.items()))
    if key not in _VIEWS_DATABASES:
        import tempfile

        path = os.path.join(tempfile.mkdtemp(prefix="qkdb-test-views-"), "views.duckdb")
        con = duckdb.connect(path)
        try:
            for name, tbl in tables.items():
                con.register("_src", tbl.slice(0, 0))
                con.execute(f'create table "{name}" as select * from _src')
                con.unregister("_src")
            create_views(con)
        finally:
            con.close()
        _VIEWS_DATABASES[key] = path
    return _VIEWS_DATABASES[key]


@functools.lru_cache(maxsize=1)
def bundled_imported() -> dict[str, pa.Table]:
    """The benchmark tables as a new warehouse has them: what qkdb ships, nothing imported (tables are immutable)."""
    from qkdb.warehouse.benchmark_files import bundled_rows
    from qkdb.warehouse.benchmarks import to_table
    from qkdb.warehouse.schema import IMPORTED

    rows = bundled_rows()
    return {name: to_table(table, rows[name], "bundled") for name, table in IMPORTED.items()}


def empty_tables() -> dict[str, pa.Table]:
    return {name: _table(name, []) for name in TABLES}


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

"""Verdicts on planted data, through the real pipeline (simulate -> ingest -> findings).

A claim the simulator contradicts does not hold; a handful of heads cannot tell (inconclusive);
the effects the simulator plants as the seeds report them hold once there are enough heads; and
the intervals cover planted values in repeated draws.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from helpers.tables import _table, make_connection

from qkdb import api
from qkdb.cli.app import app
from qkdb.ingest.capture.simulate import Ranges, draw_key_params, draw_query_params, simulate
from qkdb.warehouse import intervals
from qkdb.warehouse.inference import wilson_interval


def _ingest(base, name: str, seed_only: bool = False, **sim) -> object:
    """``seed_only``: without the plasticity estimators and the rotation planes, which no seed-002
    verdict reads (two thirds of the ingest of 3,200 small heads: 19 s against 6 s)."""
    simulate(base / name, model=f"sim-{name}", family="Sim", seed=1, workers=2, **sim)
    home = base / f"home-{name}"
    extra = dict(plasticity=False, complement=False) if seed_only else {}
    api.ingest(base / name, home=home, workers=2, points=0, **extra)
    return home


def _findings(home) -> dict[str, dict]:
    con = api.connect(home)
    try:
        rows = con.sql("select * from findings").df().to_dict("records")
    finally:
        con.close()
    return {r["id"]: r for r in rows}


@pytest.fixture(scope="module")
def contradicted(tmp_path_factory):
    """300 query heads whose planted primacy share (30%) and slope ratio (0.6) contradict seed 002."""
    base = tmp_path_factory.mktemp("contradicted")
    ranges = Ranges(negative_fraction=0.3, slope_ratio=0.6)
    return _ingest(base, "false", seed_only=True, layers=10, q_heads=30, kv_heads=10, head_dim=32, vectors=400, ranges=ranges)


@pytest.fixture(scope="module")
def handful(tmp_path_factory):
    """Six query heads, each with its own key head, with the default (seed-like) planted values."""
    base = tmp_path_factory.mktemp("handful")
    return _ingest(base, "small", layers=1, q_heads=6, kv_heads=6, head_dim=32, vectors=400)


@pytest.mark.slow
def test_six_query_heads_of_two_key_heads_count_as_two(tmp_path):
    # Query heads that share a key head are near-copies: a share over them is a share over their
    # groups, whatever the number of query heads (each group counted once when no spread shows).
    home = _ingest(tmp_path, "gqa", seed_only=True, layers=1, q_heads=6, kv_heads=2, head_dim=32, vectors=400)
    neg = _findings(home)["002.F2.bias_negative"]
    k = round(neg["measured_value"] * 6)
    assert neg["n_heads"] == 6 and neg["ci_method"].startswith("approximate: Wilson score interval over 6 heads counted as 2")
    assert (neg["ci_low"], neg["ci_high"]) == pytest.approx(wilson_interval(k / 3, 2))


@pytest.mark.slow
def test_a_planted_contradiction_does_not_hold(contradicted):
    f = _findings(contradicted)
    for fid in ("002.F2.bias_negative", "002.F2.bias_positive", "002.F2.mu_q_a_positive", "002.F1.slope_ratio"):
        assert f[fid]["status"] == "does not hold", (fid, f[fid]["measured"])
        assert f[fid]["holds"] is False
    neg = f["002.F2.bias_negative"]
    assert neg["ci_low"] <= 0.3 <= neg["ci_high"]  # the planted share is inside its interval
    assert neg["ci_method"].startswith("Wilson")
    ratio = f["002.F1.slope_ratio"]
    assert ratio["ci_high"] < 1 and "bootstrap" in ratio["ci_method"]


@pytest.mark.slow
def test_a_handful_of_heads_is_inconclusive(handful, runner):
    f = _findings(handful)
    neg = f["002.F2.bias_negative"]
    assert neg["n_heads"] == 6 and neg["status"] == "inconclusive" and neg["holds"] is None
    assert neg["measured"] == "0 of 6 heads (0.0%) [0.0, 39.0]"
    # Six heads decide only through intervals valid for so few: Fisher's z (exact for six normal pairs: a
    # strong correlation may decide its sign) and the stratified jackknife with Student's t for groups less
    # strata (issue 37: a t interval on 6 groups of one layer has 5 df, t = 2.57 — wide, but valid, so a
    # value far from the seed's decides). No bootstrap, whose percentiles over six would be too narrow.
    decided = {i: r["ci_method"] for i, r in f.items() if r["status"] in ("holds", "does not hold")}
    for fid, method in decided.items():
        assert fid == "002.lemma" or method.startswith(("Fisher z", "approximate: stratified jackknife over 6 key-head groups",
                                                        "every model's own interval")), (fid, method)
        assert not method.startswith("bootstrap"), (fid, method)
    # The CLI counts the four verdicts and prints values with their intervals.
    res = runner.invoke(app, ["findings", "--home", str(handful)])
    assert res.exit_code == 0, res.output
    assert "0 of 6 heads (0.0%) [0.0, 39.0]" in res.stdout
    assert "inconclusive" in res.stderr and "without data" in res.stderr
    rows = json.loads(runner.invoke(app, ["findings", "--home", str(handful), "-f", "json"]).stdout)
    with_data = [r for r in rows if r["status"] != "no data"]
    assert with_data and all(r["ci_method"] for r in with_data)
    assert all(r["ci_low"] is not None for r in with_data if not r["ci_method"].startswith(("too few", "none:")))


@pytest.mark.slow
def test_planted_seed_effects_hold_with_enough_heads(tmp_path):
    # 3,200 query heads with the simulator's default plants: 1.3% primacy heads (seed: 1.0%),
    # slope ratio 1.8 (seed: 1.83). Rare-rate claims need thousands of heads to be confirmed.
    home = _ingest(tmp_path, "large", seed_only=True, layers=100, q_heads=32, kv_heads=8, head_dim=16, vectors=200)
    f = _findings(home)
    for fid in ("002.F2.bias_positive", "002.F2.mu_q_a_positive", "002.F1.slope_ratio", "002.F1.k_over_q",
                "002.lemma"):
        assert f[fid]["status"] == "holds", (fid, f[fid]["measured"], f[fid]["criterion"])
    # The simulator plants 1.3% primacy heads against the seed's 1.0% (band 0.5-1.9%): near the
    # band's edge, so it may not be decided, but it must not be refuted.
    assert f["002.F2.bias_negative"]["status"] in ("holds", "inconclusive")
    assert f["002.F2.bias_negative"]["ci_low"] <= 0.013 <= f["002.F2.bias_negative"]["ci_high"]


# --------------------------------------------------------------------------------------------
# Coverage by repetition: planted draws of the simulator's per-head parameters
# --------------------------------------------------------------------------------------------


def _planted_tables(rng, fractions: list[float], heads: int, ranges: Ranges) -> dict:
    """Base tables of one model per entry of ``fractions`` (its planted primacy share), from the
    simulator's own parameter draws; only the columns the findings below read are filled."""
    rows: dict[str, list[dict]] = {"models": [], "heads": [], "pca": [], "rotation": []}
    for m, frac in enumerate(fractions):
        model = f"m{m}"
        rows["models"].append(dict(model=model, family="Sim", n_layers=1))
        key_params = draw_key_params(rng, 32, rope_theta=None, max_position=4096, ranges=ranges)
        model_ranges = Ranges(negative_fraction=frac, slope_ratio=ranges.slope_ratio)
        for h in range(heads):
            p = draw_query_params(rng, key_params, ranges=model_ranges)
            key = dict(model=model, layer=0, head=h)
            rows["heads"].append(dict(key, depth=0.0, depth_bin=0, is_nope=False))
            rows["pca"].append(dict(key, pc=0))
            rows["rotation"].append(dict(
                key, mu_q_a=p.mu_q_a, alpha_k=p.alpha_k, alpha_q=p.alpha_q, bias_strength=p.bias_strength,
            ))
    return {name: _table(name, r) for name, r in rows.items()}


def _replace_tables(con, tables: dict) -> None:
    for name, tbl in tables.items():
        con.register("_src", tbl)
        con.execute(f'create or replace table "{name}" as select * from _src')
        con.unregister("_src")


@pytest.mark.slow
@pytest.mark.parametrize(
    "fid, truth, models",
    [
        ("002.F2.bias_negative", 0.3, 1),  # a share of heads in one model: Wilson
        ("002.F1.slope_ratio", 1.8, 1),  # a median over heads: bootstrap
        ("002.F2.bias_negative", 0.3, 8),  # a share pooled over models that differ: the models resampled
    ],
)
def test_intervals_cover_planted_values(fid, truth, models):
    ranges = Ranges(negative_fraction=0.3, slope_ratio=1.8)
    rng = np.random.default_rng(2026)
    reps, hits = 60, 0
    con = None
    for _ in range(reps):
        # Every model has its own primacy share around the planted 0.3 (uniform 0.1-0.5): a head of
        # one model tells about its model more than about the population of models.
        fractions = [0.3] if models == 1 else list(rng.uniform(0.1, 0.5, size=models))
        tables = _planted_tables(rng, fractions, 60 if models == 1 else 30, ranges)
        if con is None:
            con = make_connection({**{n: t.slice(0, 0) for n, t in _empty_base().items()}, **tables})
        else:
            _replace_tables(con, tables)
        row = intervals.compute(con, ids=(fid,)).to_pylist()
        (r,) = [x for x in row if x["id"] == fid]
        hits += r["ci_low"] <= truth <= r["ci_high"]
        if models > 1 and fid == "002.F2.bias_negative":
            # Independently: Student's t on the models' own shares (equal heads per model, so the
            # pooled share is their mean); the interval over models is never narrower than it.
            shares = (np.asarray(tables["rotation"].column("bias_strength")).reshape(models, -1) < 0).mean(axis=1)
            half = stats.t.ppf(0.975, models - 1) * shares.std(ddof=1) / np.sqrt(models)
            assert r["ci_low"] <= shares.mean() - half + 1e-12 and r["ci_high"] >= shares.mean() + half - 1e-12
    # A 95% interval covers 60 draws 57 times on average; fewer than 51 has probability 0.0007 at
    # 95% coverage, 0.41 at 85% and 0.88 at 78% (the narrow intervals of issue 28 covered 62-78%).
    assert hits >= 51, (fid, models, hits)


def _empty_base() -> dict:
    from qkdb.warehouse.schema import TABLES

    return {name: _table(name, []) for name in TABLES}

"""The benchmark figures from the command line: their options, their fit text, and refusals that name the real cause (issue 47)."""

from __future__ import annotations

import json

import pytest

import qkdb
from qkdb.charts.figures.benchmark_join import _fit_line
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES, ChartError


def _spec(res) -> dict:
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def _subtitle(spec: dict) -> list[str]:
    return spec["title"]["subtitle"]


def test_chart_takes_source_metric_and_benchmark(runner, chart_home):
    own = _spec(runner.invoke(app, ["chart", "plasticity-vs-benchmark", "--home", str(chart_home)]))
    assert "toybench" in json.dumps(own["title"])
    thesis = _spec(runner.invoke(app, ["chart", "plasticity-vs-benchmark", "--source", "thesis", "--home", str(chart_home)]))
    assert "the seeds' author" in " ".join(_subtitle(thesis)) and "longbench-pro" in json.dumps(thesis["title"])
    overall = _spec(runner.invoke(app, ["chart", "plasticity-vs-benchmark", "--source", "thesis", "--metric", "ap_overall",
                                        "--home", str(chart_home)]))
    assert "AP over the context" in json.dumps(overall)
    ruler = runner.invoke(app, ["chart", "plasticity-vs-benchmark", "--benchmark", "ruler", "--home", str(chart_home)])
    assert ruler.exit_code == EXIT_CODES["not_found"] and "ruler" in ruler.stderr
    # An option a figure does not take is a usage error, not silently ignored.
    res = runner.invoke(app, ["chart", "rq-vs-rk", "--metric", "ap_drop", "--home", str(chart_home)])
    assert res.exit_code == EXIT_CODES["usage"] and "--metric does not apply to rq-vs-rk" in res.stderr
    res = runner.invoke(app, ["chart", "plasticity-vs-benchmark", "--metric", "nope", "--home", str(chart_home)])
    assert res.exit_code == EXIT_CODES["usage"] and "metric must be one of" in res.stderr


def test_the_fit_text_gives_each_coefficient_its_own_interval_and_p():
    fit = {"pearson_r": -0.675, "spearman_rho": -0.643, "perm_p_pearson": 0.067, "perm_p_spearman": 0.14,
           "ci_low": -0.99, "ci_high": 0.35, "n": 7, "n_exact": 3, "descriptive_only": True, "why": "7 models",
           "n_truncated_left_out": 0}
    assert _fit_line(fit)[0] == "r = −0.68 [−0.99, 0.35], p = 0.067; ρ = −0.64, p = 0.14 (exact permutation p); n = 7 (3 exact)"
    constant = dict(fit, pearson_r=float("nan"), spearman_rho=float("nan"), perm_p_pearson=1.0)
    assert _fit_line(constant) == ["r and ρ undefined: the metric or the score is constant over these models; n = 7"]
    assert any("Left out: 8 length slices" in line for line in _fit_line(dict(fit, n_truncated_left_out=8)))


def test_a_refusal_names_its_real_cause(runner, con, chart_home):
    # One of the chart warehouse's models mapped to LongBench-Pro, whose lengths start at 8k: the
    # captures reach 4k (a temp view: this connection only).
    db = con.execute("select current_database()").fetchall()[0][0]
    model = con.execute("select model from benchmark_models where benchmark = 'toybench' order by model limit 1").fetchall()[0][0]
    con.execute(f"create temp view benchmark_models as select * from \"{db}\".main.benchmark_models union all by name "
                f"select '{model}' as model, 'longbench-pro' as benchmark, 'Qwen3-8B' as bench_model, 'other' as match_kind")
    try:
        with pytest.raises(ChartError, match="your captures reach 4k tokens; longbench-pro starts at 8k") as e:
            qkdb.chart("plasticity-retention", con, benchmark="longbench-pro")
        assert e.value.kind == "not_found"
    finally:
        con.execute("drop view temp.benchmark_models")
    # No mapped model at all: it says so, and how to draw the author's values.
    res = runner.invoke(app, ["chart", "plasticity-vs-benchmark", "--benchmark", "ruler", "--home", str(chart_home)])
    assert "no ingested model stands for a model scored on ruler" in res.stderr and "--source thesis" in res.stderr


def test_a_difference_of_two_categories_prints_each_with_its_head_count(con):
    # issue 47: "0.635 - 0.567 = 0.068" hid that one mean was of 1 head; the counts here are by hand.
    # (This warehouse has no Q-positional head: its mixed ones are relabelled, for this connection only.)
    db = con.execute("select current_database()").fetchall()[0][0]
    con.execute(f"create temp view scoped_heads as select * replace (if(category = 'mixed', 'q-positional', category) "
                f"as category) from \"{db}\".main.scoped_heads")
    try:
        _check_counts(con)
    finally:
        con.execute("drop view temp.scoped_heads")


def _check_counts(con):
    n = dict(con.execute(
        "select s.category, count(p.ap_overall) from scoped_heads s join plasticity p on p.model = s.source_model "
        "and p.layer = s.layer and p.head = s.head where s.scope = 'overall' and p.estimator = 'empirical' "
        "group by all").fetchall())
    rows = dict(con.execute("select id, measured from findings where id like '003.ap.%_vs_%'").fetchall())
    pairs = {"003.ap.content_vs_qpos": ("content-focused", "q-positional"),
             "003.ap.qpos_vs_posdom": ("q-positional", "position-dominated")}
    checked = 0
    for fid, (a, b) in pairs.items():
        if n.get(a) and n.get(b):
            assert f"(n = {n[a]}) - " in rows[fid] and f"(n = {n[b]}) = " in rows[fid], (rows[fid], n)
            checked += 1
    assert checked, n
    q_dominant = con.execute("select measured from findings where id = '003.fig01.q_dominant'").fetchall()[0][0]
    assert "(n = " not in q_dominant  # a difference over the same heads: one n, the row's
    got = con.execute("select n_q_positional, n_position_dominated from plasticity_by_model "
                      "where scope = 'overall' and estimator = 'empirical'").fetchall()[0]
    assert got == (n.get("q-positional", 0), n.get("position-dominated", 0))

"""Plasticity against long-context benchmarks (SPEC §7; docs/benchmarks-join.md).

Sources: views ``plasticity_benchmark``, ``plasticity_length`` and ``plasticity_benchmark_fit``. One
point per model: a model-level metric against the benchmark score of the model it stands for,
coloured by family; a hollow mark is a match that is not exact (a base capture against its instruct
model's score). The fit's r, ρ, exact permutation p and interval come from the view, with the
reason it is descriptive when it is.
"""

from __future__ import annotations

import altair as alt
import duckdb

from qkdb.charts.caption import attach
from qkdb.charts.data import resolve_models, rows, values
from qkdb.charts.style import family_scale, fmt_num, natural_sorted
from qkdb.errors import ChartError

METRICS = {
    "ap_drop": "AP drop (first fifth less last fifth of the context)",
    "ap_overall": "AP over the context",
    "ap_last20": "AP in the last fifth of the context",
    "ap_first20": "AP in the first fifth of the context",
    "ap_retention": "AP retention (last fifth over first fifth)",
    "bias_strength": "bias strength (mean over heads)",
    "abs_r_k_a": "|r_k| on the drift axis a (mean over heads)",
    "pos_var_q": "share of Q variance linear in position",
    "pos_var_k": "share of K variance linear in position",
    "share_position_dominated": "share of position-dominated heads",
}
SOURCES = ("qkdb", "thesis")


def _check(source: str, metric: str | None = None) -> None:
    if source not in SOURCES:
        raise ChartError(f"source must be one of {', '.join(SOURCES)}, got {source!r}", kind="usage")
    if metric is not None and metric not in METRICS:
        raise ChartError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}", kind="usage")


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def _no_points(con, source: str, benchmark: str, what: str, models: list[str], lengths: bool = False) -> ChartError:
    """The refusal with its real cause: no mapping, no plasticity, or captures shorter than the benchmark's lengths."""
    if source != "qkdb":
        return ChartError(f"no {source} values meet a {benchmark} score with {what}", kind="not_found")
    mapped = [r["model"] for r in rows(con, "select distinct model from benchmark_models where benchmark = $b "
                                            "and list_contains($m, model) order by model", {"b": benchmark, "m": models})]
    if not mapped:
        return ChartError(
            f"no ingested model stands for a model scored on {benchmark} ({', '.join(models) or 'no model ingested'}): "
            "ingest one the registry maps (`qkdb benchmarks list --mapped`) or map yours (`qkdb benchmarks map MODEL "
            "BENCH_MODEL --match-kind KIND`); the seeds' author's values are drawn with `--source thesis`", kind="not_found")
    reach = rows(con, "select max(hi) as hi, count(*) as n from plasticity_profile where estimator = 'empirical' "
                      "and bin_kind = 'length' and list_contains($m, model)", {"m": mapped})[0]
    if not reach["n"]:
        return ChartError(f"{', '.join(mapped)} {'is' if len(mapped) == 1 else 'are'} mapped to {benchmark} but "
                          "ingested without plasticity (--no-plasticity?): ingest again with it", kind="not_found")
    if lengths:
        first = rows(con, "select min(s.length_tokens) as lo from benchmark_scores s join benchmark_models bm "
                          "on bm.benchmark = s.benchmark and bm.bench_model = s.bench_model "
                          "where s.benchmark = $b and s.slice_kind = 'token_length' and list_contains($m, bm.model)",
                     {"b": benchmark, "m": mapped})[0]["lo"]
        if first is None:
            return ChartError(f"{benchmark} has no per-length scores for the models {', '.join(mapped)} stand for",
                              kind="not_found")
        if reach["hi"] < first:
            return ChartError(f"your captures reach {_tokens(reach['hi'])} tokens; {benchmark} starts at {_tokens(first)}: "
                              f"capture texts of at least {_tokens(2 * first)} tokens to meet two of its lengths",
                              kind="not_found")
    return ChartError(f"{', '.join(mapped)} meet {benchmark} but not with {what}", kind="not_found")


_FIT_SQL = """
select n, n_exact, pearson_r, spearman_rho, perm_p_pearson, perm_p_spearman, ci_low, ci_high, descriptive_only, why, mode
from plasticity_benchmark_fit
where source = $source and benchmark = $benchmark and x_metric = $x and y_metric = $y
order by n desc
limit 1
"""


def _fit_line(fit: dict | None) -> list[str]:
    """``r = … [lo, hi], p = …; ρ = …, p = …; n = …``: each coefficient with its own interval and p."""
    if not fit:
        return ["too few models for a fit"]
    r, rho = fit["pearson_r"], fit["spearman_rho"]
    if r is None or r != r:  # NaN: one side is the same for every model
        line = f"r and ρ undefined: the metric or the score is constant over these models; n = {fit['n']}"
        return [line]
    p = fit["perm_p_pearson"]
    line = (f"r = {fmt_num(r, 2)}"
            + (f" [{fmt_num(fit['ci_low'], 2)}, {fmt_num(fit['ci_high'], 2)}]" if fit["ci_low"] is not None else "")
            + (f", p = {p:.2g}" if p is not None else "")
            + f"; ρ = {fmt_num(rho, 2)}"
            + (f", p = {fit['perm_p_spearman']:.2g}" if fit["perm_p_spearman"] is not None else "")
            + f" (exact permutation p); n = {fit['n']} ({fit['n_exact']} exact)")
    out = [line]
    if fit.get("n_truncated_left_out"):
        out.append(f"Left out: {fit['n_truncated_left_out']} length slices longer than their run's context budget "
                   "(inputs cut; params.benchmark_truncated includes them).")
    if fit["descriptive_only"]:
        out.append(f"Descriptive only: {fit['why']}; it describes these models, not models in general.")
    return out


def _scatter(data: list[dict], x: str, y: str, x_title: str, y_title: str) -> alt.LayerChart:
    """Filled circles for exact matches, hollow diamonds for the others; every point named."""
    for d in data:
        d["family"] = d["family"] or "unknown"
    fams = natural_sorted({d["family"] for d in data})
    color = alt.Color("family:N", scale=family_scale(fams), title="family", legend=alt.Legend(orient="bottom"))
    base = alt.Chart().encode(
        # Few ticks, and a label dropped rather than touching its neighbour (a narrow span of AP drop
        # gives a tick every 0.01: "0.300.31").
        x=alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(zero=False, padding=24),
                axis=alt.Axis(tickCount=6, labelOverlap="greedy", labelSeparation=6)),
        y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(zero=False, padding=16)),
        tooltip=["model:N", "bench_model:N", "match_kind:N", alt.Tooltip(f"{x}:Q", format=".4g"),
                 alt.Tooltip(f"{y}:Q", format=".4g")],
    )
    exact = base.mark_circle(size=110, opacity=0.9).encode(color=color).transform_filter("datum.match_kind == 'exact'")
    other = base.mark_point(shape="diamond", size=110, strokeWidth=2, filled=False).encode(color=color).transform_filter(
        "datum.match_kind != 'exact'")
    labels = base.mark_text(align="left", dx=8, dy=-7, fontSize=10, color="#444444").encode(text="model:N")
    return alt.layer(exact, other, labels, data=values(data)).properties(width=460, height=320)


MARKS = "Filled circle: the captured checkpoint is the one scored; hollow diamond: it is not (e.g. a base model against its instruct model)."


def _pick_benchmark(con, view: str, where: str, params: dict) -> str | None:
    """LongBench-Pro when it has points here, else the benchmark with the most models."""
    found = rows(con, f"select benchmark, count(distinct model) as n from {view} where {where} group by benchmark "
                      "order by benchmark = 'longbench-pro' desc, n desc, benchmark limit 1", params)
    return found[0]["benchmark"] if found else None


_POINTS_SQL = """
select model, family, bench_model, match_kind, value, score, mode
from plasticity_benchmark
where source = $source and benchmark = $benchmark and metric = $metric
    and ($source <> 'qkdb' or list_contains($models, model))
order by model
"""


def build_vs_benchmark(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, *, metric: str = "ap_drop",
                       benchmark: str | None = None, source: str = "qkdb", **opts) -> alt.LayerChart:
    """A model-level metric (default AP drop) against the benchmark's overall score, by family, exact matches filled.

    ``benchmark`` defaults to LongBench-Pro when some model meets it, else the benchmark most models meet.
    """
    _check(source, metric)
    chosen = resolve_models(con, models) if source == "qkdb" else []
    benchmark = benchmark or _pick_benchmark(
        con, "plasticity_benchmark", "source = $source and metric = $metric and ($source <> 'qkdb' or list_contains($models, model))",
        {"source": source, "metric": metric, "models": chosen}) or "longbench-pro"
    data = rows(con, _POINTS_SQL, {"source": source, "benchmark": benchmark, "metric": metric, "models": chosen})
    if not data:
        raise _no_points(con, source, benchmark, METRICS[metric], chosen)
    fit = next(iter(rows(con, _FIT_SQL, {"source": source, "benchmark": benchmark, "x": metric, "y": "overall"})), None)
    mode = data[0]["mode"]
    who = "this warehouse" if source == "qkdb" else "the seeds' author (msc_thesis)"
    built = _scatter(data, "value", "score", METRICS[metric], f"overall score ({benchmark}, {mode})").properties(
        title=alt.TitleParams(f"{METRICS[metric].split(' (')[0]} against {benchmark}",
                              subtitle=_fit_line(fit) + [f"Metric from {who}; score of the benchmarked model each stands for.", MARKS]))
    return attach(built, "Each point is a model, against the model it stands for.",
                  "plasticity_benchmark_fit has every metric's fit; docs/benchmarks-join.md says what 'descriptive' means.")


_RETENTION_SQL = """
select distinct model, family, bench_model, match_kind, ap_retention, score_retention, first_length, last_length, mode
from plasticity_length
where source = $source and benchmark = $benchmark and ap_retention is not null and score_retention is not null
    and ($source <> 'qkdb' or list_contains($models, model))
order by model
"""


def build_retention(con: duckdb.DuckDBPyConnection, models=None, series=None, head=None, *, benchmark: str | None = None,
                    source: str = "qkdb", **opts) -> alt.LayerChart:
    """AP retention (longest length bin over shortest) against score retention over the same lengths, per model."""
    _check(source)
    chosen = resolve_models(con, models) if source == "qkdb" else []
    benchmark = benchmark or _pick_benchmark(
        con, "plasticity_length", "source = $source and ap_retention is not null and ($source <> 'qkdb' or list_contains($models, model))",
        {"source": source, "models": chosen}) or "longbench-pro"
    data = rows(con, _RETENTION_SQL, {"source": source, "benchmark": benchmark, "models": chosen})
    if not data:
        raise _no_points(con, source, benchmark, "AP and scores at two or more lengths", chosen, lengths=True)
    spans = sorted({(d["first_length"], d["last_length"]) for d in data}, key=lambda s: -sum(
        1 for d in data if (d["first_length"], d["last_length"]) == s))
    first, last = spans[0]
    data = [d for d in data if (d["first_length"], d["last_length"]) == (first, last)]
    span = f"{first // 1024}k-{last // 1024}k"
    fit = next(iter(rows(con, """
        select n, n_exact, pearson_r, spearman_rho, perm_p_pearson, perm_p_spearman, ci_low, ci_high, descriptive_only, why, mode,
            n_truncated_left_out
        from plasticity_benchmark_fit
        where source = $source and benchmark = $benchmark and x_metric = 'ap_length_retention' and span = $span
        """, {"source": source, "benchmark": benchmark, "span": span})), None)
    mode = data[0]["mode"]
    who = "this warehouse" if source == "qkdb" else "the seeds' author (msc_thesis, Table 2)"
    built = _scatter(data, "ap_retention", "score_retention", f"AP retention: AP at {last // 1024}k ÷ at {first // 1024}k tokens of context",
                     f"score at {last // 1024}k ÷ at {first // 1024}k ({benchmark}, {mode})").properties(
        title=alt.TitleParams("Do models that keep their plasticity keep their scores?",
                              subtitle=_fit_line(fit) + [f"AP from {who}, by tokens of context.", MARKS]))
    left_out = " Models over other lengths are left out (a fit never pools spans)." if len(spans) > 1 else ""
    return attach(built, "Each point is a model, against the model it stands for." + left_out,
                  "plasticity_length has every model's AP and score per length.")

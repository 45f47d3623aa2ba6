-- Each model-level metric beside the overall benchmark score of the model it stands for (non-thinking unless params.benchmark_mode asks), with how well the two match.
-- Seed: AP drop against the LongBench-Pro overall score, r = -0.675 over the author's 7 models (msc_thesis, 05_benchmark_connection.md).
-- Depends: model_metrics, benchmark_runs
-- A captured model meets a score only through benchmark_models: its match_kind says whether the
-- scored checkpoint is the one captured ('exact') or not. Every metric of model_metrics is joined,
-- from qkdb and from the reference sources alike (the join does not care which metric).
-- Column source: Where the metric comes from: 'qkdb' (this warehouse) or a reference source ('thesis').
-- Column metric: The model-level metric (model_metrics.metric).
-- Column value: Its value.
-- Column benchmark: The benchmark.
-- Column bench_model: The benchmarked model the captured model stands for.
-- Column match_kind: 'exact', 'base_vs_instruct' or 'other' (benchmark_models).
-- Column mode: The benchmark's mode ('nonthinking' unless params.benchmark_mode asks otherwise).
-- Column context_budget: The run's context budget in tokens (benchmark_runs).
-- Column best_of: The run's k of best-of-k.
-- Column score: The overall score of that run (0-100).
-- Column n_runs: Inference iterations behind the score.
-- Column score_source: Where the score comes from (benchmark_scores.source).
select
    m.source, m.model, m.family, m.metric, m.value, m.n_heads,
    bm.benchmark, bm.bench_model, bm.match_kind,
    r.mode, r.context_budget, r.best_of,
    s.score, s.n_runs, s.source as score_source
from model_metrics m
join benchmark_models bm on bm.model = m.model
join benchmark_runs r on r.benchmark = bm.benchmark and r.bench_model = bm.bench_model
join benchmark_scores s
    on s.benchmark = r.benchmark and s.bench_model = r.bench_model and s.mode = r.mode
    and s.context_budget is not distinct from r.context_budget and s.best_of is not distinct from r.best_of
    and s.slice_kind = 'overall'
order by m.source, bm.benchmark, r.mode, m.metric, m.model

-- The benchmark run whose scores stand for a benchmarked model in a mode: one per benchmark, model and mode (modes as params.benchmark_mode asks).
-- Seed: LongBench-Pro runs each model once per mode (context budget 120k-1M tokens, best of 3); RULER once.
-- Depends: params
-- Where a benchmark lists several runs of a model in one mode (other context budgets or k), the
-- largest budget, then the largest k, stands for it: one run, so that the overall score and the
-- per-length scores of a model always come from the same run.
-- Column n_runs_listed: Runs of this model and mode the benchmark lists (1 nearly always).
select benchmark, bench_model, mode, context_budget, best_of, n_runs_listed
from (
    select s.benchmark, s.bench_model, s.mode, s.context_budget, s.best_of,
        count(*) over (partition by s.benchmark, s.bench_model, s.mode) as n_runs_listed,
        row_number() over (partition by s.benchmark, s.bench_model, s.mode
                           order by s.context_budget desc nulls last, s.best_of desc nulls last) as pick
    from (select distinct benchmark, bench_model, mode, context_budget, best_of from benchmark_scores) s
    cross join params p
    where s.mode like p.benchmark_mode
)
where pick = 1
order by benchmark, bench_model, mode

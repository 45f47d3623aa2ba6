-- Plasticity by context length beside the benchmark's score at that length, per model: AP of the queries with (L/2, L] tokens of context against the score at length L, and both retentions (longest length over shortest).
-- Seed: retention AP(64k-128k) / AP(0-8k) against LongBench-Pro's score(128k) / score(8k): r = 0.943 over the author's 7 models (issue 39, from the author's Table 2).
-- Depends: benchmark_runs, models, params
-- Slices longer than their run's context budget (benchmark_scores.truncated) are left out unless
-- params.benchmark_truncated: LongBench-Pro's 128k and 256k slices of a 120,000-token run scored
-- inputs cut to 120,000 tokens, and a retention to them mixes cut inputs with whole ones.
-- qkdb's AP of length L is the empirical estimator's plasticity_profile bin (L/2, L] (queries at
-- positions [L/2, L)), averaged over the model's heads; a reference source's bins are its own
-- (the author's first one is 0-8k): lo_tokens and hi_tokens say which. Lengths meet by their upper
-- end: the AP of the bin ending at L stands beside the score of the slice of length L.
-- A model's retentions use the shortest and the longest length where both an AP and a score exist;
-- fits never mix models whose lengths differ (plasticity_benchmark_fit.span).
-- Column source: 'qkdb' (this warehouse) or a reference source ('thesis').
-- Column lo_tokens: First query position of the AP's bin.
-- Column length_tokens: The length L: the bin's end and the score slice's length.
-- Column ap: AP of the bin (qkdb: mean over heads, empirical estimator).
-- Column n_heads: Heads behind a qkdb AP.
-- Column score: The benchmark's score at length L (the run of benchmark_runs).
-- Column truncated: The score's slice is longer than its run's context budget (only with params.benchmark_truncated).
-- Column n_truncated_left_out: Length slices of the model's run left out for being longer than its budget.
-- Column first_length: The shortest length of the model with both an AP and a score.
-- Column last_length: The longest such length.
-- Column ap_retention: AP at last_length over AP at first_length.
-- Column score_retention: Score at last_length over score at first_length.
with own as (
    select 'qkdb' as source, pp.model, any_value(md.family) as family, min(pp.lo) as lo_tokens, pp.hi as hi_tokens,
        avg(pp.ap) as ap, count(pp.ap) as n_heads
    from plasticity_profile pp
    left join models md on md.model = pp.model
    where pp.estimator = 'empirical' and pp.bin_kind = 'length' and pp.ap is not null
    group by pp.model, pp.hi
),
aps as (
    select * from own
    union all by name
    select source, model, family, lo_tokens, hi_tokens, value as ap, null::bigint as n_heads
    from reference_metrics
    where metric = 'ap_length'
),
all_scores as (
    select s.benchmark, s.bench_model, s.mode, s.length_tokens, s.score,
        -- (a file imported before the column existed has it NULL: the same rule as the import's)
        coalesce(s.truncated, s.length_tokens > s.context_budget, false) as truncated
    from benchmark_scores s
    join benchmark_runs r
        on s.benchmark = r.benchmark and s.bench_model = r.bench_model and s.mode = r.mode
        and s.context_budget is not distinct from r.context_budget and s.best_of is not distinct from r.best_of
    where s.slice_kind = 'token_length' and s.length_tokens is not null
),
-- A slice longer than its run's budget scored cut inputs: left out unless params ask for it.
scores as (
    select a.*, count(*) filter (where a.truncated and not p.benchmark_truncated)
        over (partition by a.benchmark, a.bench_model, a.mode) as n_truncated_left_out
    from all_scores a cross join params p
    qualify not (a.truncated and not p.benchmark_truncated)
),
j as (
    select a.source, a.model, a.family, bm.benchmark, bm.bench_model, bm.match_kind, sc.mode,
        a.lo_tokens, a.hi_tokens as length_tokens, a.ap, a.n_heads, sc.score, sc.truncated, sc.n_truncated_left_out
    from aps a
    join benchmark_models bm on bm.model = a.model
    join scores sc on sc.benchmark = bm.benchmark and sc.bench_model = bm.bench_model and sc.length_tokens = a.hi_tokens
),
ends as (
    select source, model, benchmark, mode,
        min(length_tokens) as first_length,
        max(length_tokens) as last_length,
        arg_min(ap, length_tokens) as ap_first,
        arg_max(ap, length_tokens) as ap_last,
        arg_min(score, length_tokens) as score_first,
        arg_max(score, length_tokens) as score_last
    from j
    group by source, model, benchmark, mode
    having count(*) >= 2
)
select
    j.*,
    e.first_length,
    e.last_length,
    e.ap_last / nullif(e.ap_first, 0) as ap_retention,
    e.score_last / nullif(e.score_first, 0) as score_retention
from j
left join ends e using (source, model, benchmark, mode)
order by j.source, j.benchmark, j.mode, j.model, j.length_tokens

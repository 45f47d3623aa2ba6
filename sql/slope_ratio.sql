-- How much faster keys drift along axis a than queries: |alpha_k| / |alpha_q| per model, family and overall.
-- Seed: median |alpha_K| / |alpha_Q| = 1.83 overall; small Qwen3 ~8, Ministral3 ~1, Llama ~2 (seed 002 Finding 1, figure 05).
-- Depends: scoped_heads
-- A head with alpha_q = 0 has no ratio (NULLIF) and is left out of the quantiles.
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with a defined ratio.
-- Column median_ratio: Median of |alpha_k| / |alpha_q| over heads.
-- Column q25_ratio: 25th percentile of the ratio.
-- Column q75_ratio: 75th percentile of the ratio.
-- Column geomean_ratio: Geometric mean of the ratio.
-- Column share_k_faster: Share of heads with |alpha_k| > |alpha_q|.
with r as (
    select s.scope, s.family, s.model, s.source_model, abs(s.alpha_k) / nullif(abs(s.alpha_q), 0) as ratio
    from scoped_heads s
)
select
    r.scope,
    r.family,
    r.model,
    count(distinct r.source_model) as n_models,
    count(r.ratio) as n_heads,
    median(r.ratio) as median_ratio,
    quantile_cont(r.ratio, 0.25) as q25_ratio,
    quantile_cont(r.ratio, 0.75) as q75_ratio,
    exp(avg(ln(r.ratio)) filter (where r.ratio > 0)) as geomean_ratio,
    avg((r.ratio > 1)::int) as share_k_faster
from r
group by r.scope, r.family, r.model
order by case r.scope when 'overall' then 0 when 'family' then 1 else 2 end, r.family, r.model

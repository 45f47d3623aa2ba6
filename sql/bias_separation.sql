-- Correlation of bias_strength with separation_strength overall, within each family and within each model (Simpson's paradox).
-- Seed: r = +0.48 over all heads, but -0.65 within Llama 3.2; positive within Qwen3; ~0 within Ministral3 (seed 002 Finding 5).
-- Depends: scoped_heads
-- DuckDB's corr() returns NaN when a side has zero variance; the CASE turns that into NULL.
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with both bias_strength and separation_strength.
-- Column r: Pearson r of bias_strength with separation_strength within the group.
-- Column overall_r: The pooled r over every pooled head (the 'overall' row), repeated for comparison.
-- Column reverses: r has the opposite sign of overall_r (a Simpson's reversal); NULL for the overall row or without data.
-- Column mean_bias_strength: Mean bias_strength.
-- Column mean_separation_strength: Mean separation_strength.
with pairs as (
    select s.scope, s.family, s.model, s.source_model, s.bias_strength as x, s.separation_strength as y
    from scoped_heads s
    where s.bias_strength is not null and s.separation_strength is not null
), g as (
    select
        pairs.scope,
        pairs.family,
        pairs.model,
        count(distinct pairs.source_model) as n_models,
        count(*) as n_heads,
        case when count(*) > 1 and var_pop(pairs.x) > 0 and var_pop(pairs.y) > 0 then corr(pairs.x, pairs.y) end as r,
        avg(pairs.x) as mean_bias_strength,
        avg(pairs.y) as mean_separation_strength
    from pairs
    group by pairs.scope, pairs.family, pairs.model
), o as (
    select max(g.r) filter (where g.scope = 'overall') over () as overall_r, g.*
    from g
)
select
    o.scope,
    o.family,
    o.model,
    o.n_models,
    o.n_heads,
    o.r,
    o.overall_r,
    case when o.scope <> 'overall' then sign(o.r) * sign(o.overall_r) < 0 end as reverses,
    o.mean_bias_strength,
    o.mean_separation_strength
from o
order by case o.scope when 'overall' then 0 when 'family' then 1 else 2 end, o.family, o.model

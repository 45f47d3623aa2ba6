-- Correlation of bias_strength with separation_strength overall, within each family and within each model (Simpson's paradox).
-- Seed: r = +0.48 over all heads, but -0.65 within Llama 3.2; positive within Qwen3; ~0 within Ministral3 (seed 002 Finding 5).
-- Depends: scoped_heads, finding_intervals, finding_state
-- DuckDB's corr() returns NaN when a side has zero variance; the CASE turns that into NULL.
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with both bias_strength and separation_strength.
-- Column r: Pearson r of bias_strength with separation_strength within the group.
-- Column overall_r: The pooled r over every pooled head (the 'overall' row), repeated for comparison.
-- Column reverses: r has the opposite sign of overall_r (a Simpson's reversal); NULL for the overall row or without data.
-- Column r_ci_low: Lower end of the 95% interval of r (overall and family rows; finding_intervals: Fisher z for one model, a bootstrap over models or over their key-head groups for several), NULL when out of date.
-- Column r_ci_high: Upper end of the 95% interval of r.
-- Column reverses_surely: The family's interval excludes 0 on the side opposite the pooled r, whose own interval excludes 0: a reversal the data show (seed 002 Finding 5 as a test); NULL without intervals.
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
), ci as (
    -- The intervals the findings use (computed from the same heads), while they are current.
    select
        case when f.id = '002.F5.overall' then 'overall' else 'family' end as scope,
        case when f.id = '002.F5.family' then replace(f.scope, 'family ', '') end as family,
        f.estimate, f.ci_low, f.ci_high
    from finding_intervals f
    cross join finding_state s
    where f.id in ('002.F5.overall', '002.F5.family') and f.fingerprint = s.fingerprint
), oc as (
    select
        o.*,
        case when abs(c.estimate - o.r) <= 1e-9 then c.ci_low end as r_ci_low,
        case when abs(c.estimate - o.r) <= 1e-9 then c.ci_high end as r_ci_high
    from o
    left join ci c on c.scope = o.scope and c.family is not distinct from o.family and o.model is null
), pooled as (
    select r_ci_low as lo, r_ci_high as hi from oc where scope = 'overall'
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
    o.r_ci_low,
    o.r_ci_high,
    case
        when o.scope = 'family' and o.r_ci_low is not null and p.lo is not null
        then (p.lo > 0 and o.r_ci_high < 0) or (p.hi < 0 and o.r_ci_low > 0)
    end as reverses_surely,
    o.mean_bias_strength,
    o.mean_separation_strength
from oc o
left join pooled p on true
order by case o.scope when 'overall' then 0 when 'family' then 1 else 2 end, o.family, o.model

-- Share of heads with a recency bias (bias_strength = mu_q_a * alpha_k > 0) and its two factors, per model, family and overall.
-- Seed: 99.0% of 3,239 heads have bias_strength > 0 (31 negative); mu_q_a > 0 in 98.7% (seed 002 Finding 2).
-- Depends: scoped_heads
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with a bias_strength.
-- Column n_positive: Heads with bias_strength > 0 (recency).
-- Column n_negative: Heads with bias_strength < 0 (primacy).
-- Column share_positive: n_positive / n_heads.
-- Column share_mu_q_a_positive: Share of heads whose Q mean on axis a is positive.
-- Column share_alpha_k_positive: Share of heads whose keys drift up along a (alpha_k > 0).
-- Column mean_bias_strength: Mean bias_strength (per token).
-- Column median_bias_strength: Median bias_strength.
select
    s.scope,
    s.family,
    s.model,
    count(distinct s.source_model) as n_models,
    count(s.bias_strength) as n_heads,
    count(*) filter (where s.bias_strength > 0) as n_positive,
    count(*) filter (where s.bias_strength < 0) as n_negative,
    n_positive / nullif(n_heads, 0) as share_positive,
    avg((s.mu_q_a > 0)::int) as share_mu_q_a_positive,
    avg((s.alpha_k > 0)::int) as share_alpha_k_positive,
    avg(s.bias_strength) as mean_bias_strength,
    median(s.bias_strength) as median_bias_strength
from scoped_heads s
group by s.scope, s.family, s.model
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model

-- Position signal and bias by relative depth: means per depth bin for every model, family and overall.
-- Seed: Q position (r_q) is high at every depth; K position (r_k) varies by family and peaks early in Llama; early layers encode position more strongly (seed 003 figures 03-04, seed 002 figure 06).
-- Depends: scoped_heads
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column depth_bin: min(9, floor(10 * layer / (n_layers - 1))).
-- Column n_models: Models in the group.
-- Column n_heads: Heads in the bin.
-- Column mean_r_q: Mean PC0 r_q.
-- Column mean_r_k: Mean PC0 r_k (signed).
-- Column mean_abs_r_k: Mean PC0 |r_k|.
-- Column mean_abs_r_q_a: Mean |r_q_a| on the drift axis.
-- Column mean_abs_r_k_a: Mean |r_k_a| on the drift axis.
-- Column mean_bias_strength: Mean bias_strength (per token; figures show it x10^3).
-- Column mean_explained_variance: Mean PC0 explained variance.
select
    s.scope,
    s.family,
    s.model,
    s.depth_bin,
    count(distinct s.source_model) as n_models,
    count(*) as n_heads,
    avg(s.r_q) as mean_r_q,
    avg(s.r_k) as mean_r_k,
    avg(abs(s.r_k)) as mean_abs_r_k,
    avg(abs(s.r_q_a)) as mean_abs_r_q_a,
    avg(abs(s.r_k_a)) as mean_abs_r_k_a,
    avg(s.bias_strength) as mean_bias_strength,
    avg(s.explained_variance) as mean_explained_variance
from scoped_heads s
group by s.scope, s.family, s.model, s.depth_bin
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model, s.depth_bin

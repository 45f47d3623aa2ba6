-- Position signal of Q and K on the drift axis a, next to PC0's, per model, family and overall.
-- Seed: on axis a mean |r_k| = 0.87 > mean |r_q| = 0.74, reversing PC0 where r_q ~0.80 > r_k ~0.48 (seed 002 Finding 1).
-- Depends: scoped_heads
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with rotation metrics.
-- Column mean_abs_r_q_a: Mean |corr(Q a, t_q)|.
-- Column mean_abs_r_k_a: Mean |corr(K a, t_k)|.
-- Column share_k_above_q: Share of heads with |r_k_a| > |r_q_a|.
-- Column mean_position_r: Mean |corr(X a, t)| over pooled Q and K.
-- Column mean_pc0_r_q: Mean PC0 r_q, for the comparison with the combined PCA.
-- Column mean_pc0_abs_r_k: Mean PC0 |r_k|.
select
    s.scope,
    s.family,
    s.model,
    count(distinct s.source_model) as n_models,
    count(s.r_k_a) as n_heads,
    avg(abs(s.r_q_a)) as mean_abs_r_q_a,
    avg(abs(s.r_k_a)) as mean_abs_r_k_a,
    avg((abs(s.r_k_a) > abs(s.r_q_a))::int) as share_k_above_q,
    avg(s.position_r) as mean_position_r,
    avg(s.r_q) as mean_pc0_r_q,
    avg(abs(s.r_k)) as mean_pc0_abs_r_k
from scoped_heads s
group by s.scope, s.family, s.model
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model

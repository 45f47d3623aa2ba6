-- The Orthogonal Drift Alignment Lemma on the data: the largest position correlation left in the complement of {a, b}.
-- Seed: max residual_pos_r = 7.3e-15 across 3,239 heads (seed 002, lemma).
-- Depends: scoped_heads
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with a residual_pos_r.
-- Column n_without_drift: Heads without rotation metrics (no position covariance, so no axis a).
-- Column max_residual_pos_r: Largest residual_pos_r of any head (0 up to float64 round-off by the lemma).
-- Column mean_residual_pos_r: Mean residual_pos_r.
-- Column worst_head: The head with the largest residual, as 'model lLL.hHH'.
select
    s.scope,
    s.family,
    s.model,
    count(distinct s.source_model) as n_models,
    count(s.residual_pos_r) as n_heads,
    count(*) - count(s.residual_pos_r) as n_without_drift,
    max(s.residual_pos_r) as max_residual_pos_r,
    avg(s.residual_pos_r) as mean_residual_pos_r,
    arg_max(printf('%s l%02d.h%02d', s.source_model, s.layer, s.head), s.residual_pos_r) as worst_head
from scoped_heads s
group by s.scope, s.family, s.model
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model

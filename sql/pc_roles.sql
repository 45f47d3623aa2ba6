-- Mean position correlation of Q and K on every principal component, per model, family and overall.
-- Seed: PC0 dominates with mean r_q ~0.80 and r_k ~0.48 (seed 003 figure 01).
-- Depends: scoped_heads
-- r_k keeps its canonical sign: positive means K's position gradient runs the same way as Q's.
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column pc: Principal component index, 0-based.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with this PC.
-- Column mean_r_q: Mean sign-canonical r_q.
-- Column mean_r_k: Mean r_k (signed).
-- Column mean_abs_r_q: Mean |r_q|.
-- Column mean_abs_r_k: Mean |r_k|.
-- Column sd_r_q: Sample standard deviation of r_q across heads.
-- Column sd_r_k: Sample standard deviation of r_k across heads.
select
    s.scope,
    s.family,
    s.model,
    p.pc,
    count(distinct s.source_model) as n_models,
    count(*) as n_heads,
    avg(p.r_q) as mean_r_q,
    avg(p.r_k) as mean_r_k,
    avg(abs(p.r_q)) as mean_abs_r_q,
    avg(abs(p.r_k)) as mean_abs_r_k,
    stddev_samp(p.r_q) as sd_r_q,
    stddev_samp(p.r_k) as sd_r_k
from scoped_heads s
join pca p on p.model = s.source_model and p.layer = s.layer and p.head = s.head
group by s.scope, s.family, s.model, p.pc
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model, p.pc

-- Share of Q and of K variance that is linear in position, and PC0's part of it, per model, family and overall.
-- Seed: 27% of Q variance and 14% of K variance are linear in position; PC0 carries ~90% (Q) and ~74% (K) of it (seed 003 Finding 1).
-- Depends: scoped_heads
-- pos_var_q = sum over the stored PCs of explained_variance * r_q^2 (table heads); the means here are over heads.
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads in the group.
-- Column mean_pos_var_q: Mean share of Q variance linear in position.
-- Column mean_pos_var_k: Mean share of K variance linear in position.
-- Column median_pos_var_q: Median of pos_var_q.
-- Column median_pos_var_k: Median of pos_var_k.
-- Column mean_pc0_pos_share_q: Mean share of pos_var_q carried by PC0.
-- Column mean_pc0_pos_share_k: Mean share of pos_var_k carried by PC0.
select
    s.scope,
    s.family,
    s.model,
    count(distinct s.source_model) as n_models,
    count(*) as n_heads,
    avg(s.pos_var_q) as mean_pos_var_q,
    avg(s.pos_var_k) as mean_pos_var_k,
    median(s.pos_var_q) as median_pos_var_q,
    median(s.pos_var_k) as median_pos_var_k,
    avg(s.pc0_pos_share_q) as mean_pc0_pos_share_q,
    avg(s.pc0_pos_share_k) as mean_pc0_pos_share_k
from scoped_heads s
group by s.scope, s.family, s.model
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model

-- How cleanly Q and K separate on PC0: Fisher ratio, linear accuracy on (PC0, PC1) and cluster distance, per model, family and overall.
-- Seed: Fisher discriminant on PC0 ~44, linear accuracy on PC0+PC1 98.5-100%, mean Q/K separation on PC0 ~47 units, |mu_Q| ~20-30 units (seed 003 Findings 2-3).
-- Depends: scoped_heads
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads in the group.
-- Column mean_fisher_pc0: Mean Fisher ratio (mu_q - mu_k)^2 / (sd_q^2 + sd_k^2) on PC0.
-- Column median_fisher_pc0: Median Fisher ratio on PC0.
-- Column mean_accuracy_pc01: Mean balanced linear Q-vs-K accuracy on (PC0, PC1).
-- Column min_accuracy_pc01: Lowest accuracy of any head.
-- Column max_accuracy_pc01: Highest accuracy of any head.
-- Column mean_separation_pc0: Mean |mu_q - mu_k| on PC0 (units of the vectors).
-- Column median_separation_pc0: Median |mu_q - mu_k| on PC0.
-- Column mean_abs_mu_q_pc0: Mean |mu_q| on PC0: the Q cluster mean that amplifies K's position gradient (seed 003 Finding 3).
select
    s.scope,
    s.family,
    s.model,
    count(distinct s.source_model) as n_models,
    count(*) as n_heads,
    avg(s.fisher_pc0) as mean_fisher_pc0,
    median(s.fisher_pc0) as median_fisher_pc0,
    avg(s.qk_accuracy_pc01) as mean_accuracy_pc01,
    min(s.qk_accuracy_pc01) as min_accuracy_pc01,
    max(s.qk_accuracy_pc01) as max_accuracy_pc01,
    avg(s.qk_separation_pc0) as mean_separation_pc0,
    median(s.qk_separation_pc0) as median_separation_pc0,
    avg(abs(s.mu_q)) as mean_abs_mu_q_pc0
from scoped_heads s
group by s.scope, s.family, s.model
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model

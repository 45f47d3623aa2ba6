-- One row per query head: model facts, head facts, PC0 of the combined PCA and the rotation model.
-- Seed: the per-head rows behind every figure of seeds 002 and 003.
-- Depends:
-- Column eigenvalue: PC0's eigenvalue of the pooled Q/K covariance.
-- Column explained_variance: PC0's share of the pooled Q/K variance (seed 003: ~34%).
-- Column r_q: Pearson r of the PC0 Q projections with position (sign-canonical, >= 0 unless |r_q| < 0.05).
-- Column r_k: Pearson r of the PC0 K projections with position (sign: agreement with Q's gradient).
-- Column mu_q: Mean canonical PC0 projection of Q (pooled mean removed).
-- Column mu_k: Mean canonical PC0 projection of K.
-- Column sd_q: Population sd of the PC0 Q projections.
-- Column sd_k: Population sd of the PC0 K projections.
-- Column fisher: Fisher ratio on PC0.
-- Column sign_anchor: Which correlation fixed PC0's sign ('q' or 'k').
-- Left joins keep a head whose rotation metrics are NULL (no position covariance) visible.
select
    h.model,
    m.family,
    m.series,
    m.series_order,
    m.phase,
    m.step,
    m.n_layers,
    h.* exclude (model),
    p.eigenvalue,
    p.explained_variance,
    p.r_q,
    p.r_k,
    p.mu_q,
    p.mu_k,
    p.sd_q,
    p.sd_k,
    p.fisher,
    p.sign_anchor,
    r.* exclude (model, layer, head)
from heads h
join models m using (model)
left join pca p on p.model = h.model and p.layer = h.layer and p.head = h.head and p.pc = 0
left join rotation r on r.model = h.model and r.layer = h.layer and r.head = h.head

-- One row per query head: model facts, head facts, PC0 of the combined PCA and the rotation model.
-- Seed: the per-head rows behind every figure of seeds 002 and 003.
-- Depends:
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

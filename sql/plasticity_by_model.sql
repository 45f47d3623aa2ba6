-- Attention plasticity per model, family and overall, per estimator, and by taxonomy category: seed 003's prediction that the taxonomy predicts plasticity.
-- Seed: position-dominated heads low, content-focused high, Q-positional in between (seed 003, "Plasticity prediction from PCA").
-- Depends: scoped_heads
-- Means over heads of the per-head plasticity (table plasticity): a model's heads count alike. The
-- category columns are the empirical estimator's ap_overall per taxonomy category (NULL when the
-- group has no head of that category). Series checkpoints have their own 'model' rows; family and
-- overall rows pool as every grouped view does (model_pool).
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column estimator: 'empirical' (primary), 'gaussian' or 'thesis' (table plasticity).
-- Column n_models: Models in the group.
-- Column n_heads: Heads with an ap_overall.
-- Column ap_overall: Mean over heads of ap_overall.
-- Column ap_first20: Mean of ap_first20 (the first fifth of the context).
-- Column ap_last20: Mean of ap_last20 (the last fifth).
-- Column ap_drop: Mean of ap_drop (first fifth less last fifth).
-- Column ap_retention: Mean of ap_last20 over mean of ap_first20.
-- Column gauss_gap: Mean over heads of the gap between the Gaussian and empirical estimators.
-- Column ap_position_dominated: Mean ap_overall of the position-dominated heads (this estimator).
-- Column ap_q_positional: Mean ap_overall of the Q-positional heads.
-- Column ap_mixed: Mean ap_overall of the mixed heads.
-- Column ap_content_focused: Mean ap_overall of the content-focused heads.
-- Column ap_k_positional: Mean ap_overall of the K-positional heads.
-- Column n_position_dominated: Position-dominated heads behind ap_position_dominated.
-- Column n_q_positional: Q-positional heads behind ap_q_positional.
-- Column n_mixed: Mixed heads behind ap_mixed.
-- Column n_content_focused: Content-focused heads behind ap_content_focused.
-- Column n_k_positional: K-positional heads behind ap_k_positional.
with h as (
    select s.scope, s.family, s.model, s.source_model, s.category, p.*
    exclude (model, layer, head)
    from scoped_heads s
    join plasticity p on p.model = s.source_model and p.layer = s.layer and p.head = s.head
)
select
    scope,
    family,
    model,
    estimator,
    count(distinct source_model) as n_models,
    count(ap_overall) as n_heads,
    avg(ap_overall) as ap_overall,
    avg(ap_first20) as ap_first20,
    avg(ap_last20) as ap_last20,
    avg(ap_drop) as ap_drop,
    avg(ap_last20) / nullif(avg(ap_first20), 0) as ap_retention,
    avg(gauss_gap) as gauss_gap,
    avg(ap_overall) filter (where category = 'position-dominated') as ap_position_dominated,
    avg(ap_overall) filter (where category = 'q-positional') as ap_q_positional,
    avg(ap_overall) filter (where category = 'mixed') as ap_mixed,
    avg(ap_overall) filter (where category = 'content-focused') as ap_content_focused,
    avg(ap_overall) filter (where category = 'k-positional') as ap_k_positional,
    -- Each mean with its head count: a category mean of 1 head reads like one of 100 otherwise.
    count(ap_overall) filter (where category = 'position-dominated') as n_position_dominated,
    count(ap_overall) filter (where category = 'q-positional') as n_q_positional,
    count(ap_overall) filter (where category = 'mixed') as n_mixed,
    count(ap_overall) filter (where category = 'content-focused') as n_content_focused,
    count(ap_overall) filter (where category = 'k-positional') as n_k_positional
from h
group by scope, family, model, estimator
order by case scope when 'overall' then 0 when 'family' then 1 else 2 end, family, model,
    case estimator when 'empirical' then 0 when 'gaussian' then 1 else 2 end

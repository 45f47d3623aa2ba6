-- One row per model and model-level metric: qkdb's own (means over the model's heads) and the values others reported (reference_metrics), side by side for the benchmark joins.
-- Seed: the seeds' author's per-model attention plasticity and bias_strength (msc_thesis, 05_benchmark_connection.md Tables 1 and 5).
-- Depends: scoped_heads, plasticity_by_model, reference_metrics
-- Plasticity is the empirical estimator's (plasticity_by_model); ap_retention is the mean of
-- ap_last20 over the mean of ap_first20 for both sources. Taxonomy shares are over the heads with a
-- category. UNPIVOT leaves out metrics a model has no value of.
-- Column source: 'qkdb' (computed from this warehouse) or who reported the value ('thesis': the seeds' author).
-- Column model: The model.
-- Column family: Its family.
-- Column metric: ap_overall, ap_first20, ap_last20, ap_drop, ap_retention (plasticity); bias_strength, abs_r_k_a, pos_var_q, pos_var_k, share_position_dominated, share_q_positional, share_mixed, share_content_focused (geometry; qkdb only except bias_strength).
-- Column value: The model's value (qkdb: the mean over its heads).
-- Column n_heads: Heads behind a qkdb value (NULL for a reported one).
with g as (
    select
        model,
        any_value(family) as family,
        count(*) as n_heads,
        avg(bias_strength) as bias_strength,
        avg(abs(r_k_a)) as abs_r_k_a,
        avg(pos_var_q) as pos_var_q,
        avg(pos_var_k) as pos_var_k,
        avg(case when category is not null then (category = 'position-dominated')::double end) as share_position_dominated,
        avg(case when category is not null then (category = 'q-positional')::double end) as share_q_positional,
        avg(case when category is not null then (category = 'mixed')::double end) as share_mixed,
        avg(case when category is not null then (category = 'content-focused')::double end) as share_content_focused
    from scoped_heads
    where scope = 'model'
    group by model
),
ap as (
    select model, n_heads as n_ap_heads, ap_overall, ap_first20, ap_last20, ap_drop, ap_retention
    from plasticity_by_model
    where scope = 'model' and estimator = 'empirical'
),
own as (
    select g.*, ap.* exclude (model) from g left join ap using (model)
),
long as (
    unpivot own
    on ap_overall, ap_first20, ap_last20, ap_drop, ap_retention, bias_strength, abs_r_k_a, pos_var_q, pos_var_k,
        share_position_dominated, share_q_positional, share_mixed, share_content_focused
    into name metric value value
),
reported as (
    select source, model, any_value(family) as family,
        max(value) filter (where metric = 'ap_overall') as ap_overall,
        max(value) filter (where metric = 'ap_first20') as ap_first20,
        max(value) filter (where metric = 'ap_last20') as ap_last20,
        max(value) filter (where metric = 'ap_drop') as ap_drop,
        max(value) filter (where metric = 'bias_strength') as bias_strength
    from reference_metrics
    where metric <> 'ap_length'
    group by source, model
),
reported_long as (
    unpivot (select *, ap_last20 / nullif(ap_first20, 0) as ap_retention from reported)
    on ap_overall, ap_first20, ap_last20, ap_drop, ap_retention, bias_strength
    into name metric value value
)
select 'qkdb' as source, model, family, metric, value,
    case when metric like 'ap\_%' escape '\' then n_ap_heads else n_heads end as n_heads
from long
union all by name
select source, model, family, metric, value, null::bigint as n_heads from reported_long
order by source, model, metric

-- Does seed 002's recency term explain the logits? Per model: the measured logit slope against bias_strength over heads.
-- Seed: a parametric recency term mu_Q^a * alpha_K * j in the attention logits (seed 002, "Parametric Attention Score Model").
-- Depends: recency, model_pool
-- recency.logit_slope is each head's measured slope of q.k_s in the key position s (over the keys
-- of a query's own text before it); predicted_slope is bias_strength. They differ by the logit's
-- other position terms: the interaction alpha_Q * alpha_K * i (a query's own drift along a makes its
-- slope grow with its position, and later queries see more keys) and any key drift off axis a.
-- Column scope: 'overall' (the pooled models) or 'model'.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with both slopes.
-- Column corr: Pearson r of logit_slope and predicted_slope over heads (NULL with fewer than 3 heads).
-- Column median_ratio: Median of logit_slope / predicted_slope.
-- Column mean_logit_slope: Mean measured slope (logit per token).
-- Column mean_predicted_slope: Mean bias_strength.
-- Column share_same_sign: Share of heads whose measured and predicted slopes have the same sign.
with r as (
    select 'model' as scope, r.model, r.model as source_model, r.logit_slope, r.predicted_slope
    from recency r
    where r.logit_slope is not null and r.predicted_slope is not null
    union all
    select 'overall', null, r.model, r.logit_slope, r.predicted_slope
    from recency r
    join model_pool mp on mp.model = r.model and mp.pooled
    where r.logit_slope is not null and r.predicted_slope is not null
)
select
    scope,
    model,
    count(distinct source_model) as n_models,
    count(*) as n_heads,
    case when count(*) >= 3 then corr(logit_slope, predicted_slope) end as corr,
    median(logit_slope / nullif(predicted_slope, 0)) as median_ratio,
    avg(logit_slope) as mean_logit_slope,
    avg(predicted_slope) as mean_predicted_slope,
    avg((sign(logit_slope) = sign(predicted_slope))::int) as share_same_sign
from r
group by scope, model
order by case scope when 'overall' then 0 else 1 end, model

-- The sink card: per model and input kind, both sink rates, the per-layer share of sink heads, mean alpha0 and the bias share of the sink heads, beside the published rate where the model has one (Gu et al. 2025, Table 1).
-- Seed: - (Gu et al. 2025, When Attention Sink Emerges, Table 1; StreamingLLM's per-layer profile, Xiao et al. 2024 Fig. 12)
-- Depends: params, sink_rate, sink_texts
-- One row per measured (model, input kind). layer_rates lists each layer's per-text rate (the mean
-- over its heads and texts of [alpha0 > epsilon]) in layer order: StreamingLLM's Fig. 12 shows ~0
-- in layers 0-1 and 0.6-0.9 from layer 2 on in Llama-2. The anchor is the sink_anchors row of the
-- same Hugging Face id (models.hf_model), input kind, epsilon and T (params.sink_context): match_kind
-- 'exact' (the same checkpoint); a model without one has NULL anchor columns. A rate measured at
-- another epsilon or context is not set beside it.
-- Column model: The model.
-- Column input_kind: 'natural', 'random' or 'repeated'.
-- Column hf_model: The captured model's Hugging Face id.
-- Column epsilon: The threshold (params.sink_epsilon).
-- Column context: Queries below this position count (params.sink_context): Gu et al.'s T.
-- Column n_heads: Query heads measured.
-- Column n_texts: Texts measured.
-- Column sink_rate_per_text: Gu et al.'s estimator (sink_rate).
-- Column sink_rate_pooled: The pooled estimator (sink_rate).
-- Column mean_alpha0: Mean alpha0 over (text, head) pairs.
-- Column mean_bias_share: Mean bias_share of the (pooled) sink heads.
-- Column layers: The layers measured, in order (a sampled capture may miss some).
-- Column layer_rates: Per layer of layers, in the same order: the per-text sink rate of its heads.
-- Column anchor_model: The published model (sink_anchors.bench_model) this one matches, or NULL.
-- Column anchor_variant: 'base' or 'chat'.
-- Column anchor_rate: The published rate (a fraction).
-- Column match_kind: 'exact' (the same Hugging Face id) or NULL.
-- Column anchor_source: Where the published rate is from.
with
layers as (
    select model, input_kind, layer, avg(is_sink::int) as rate
    from sink_texts
    group by all
),
profile as (
    select model, input_kind, list(layer order by layer) as layers, list(rate order by layer) as layer_rates
    from layers
    group by all
)
select
    r.model,
    r.input_kind,
    m.hf_model,
    r.epsilon,
    r.context,
    r.n_heads,
    r.n_texts,
    r.sink_rate_per_text,
    r.sink_rate_pooled,
    r.mean_alpha0,
    r.mean_bias_share,
    pr.layers,
    pr.layer_rates,
    a.bench_model as anchor_model,
    a.variant as anchor_variant,
    a.sink_rate as anchor_rate,
    case when a.hf_model is not null then 'exact' end as match_kind,
    a.source as anchor_source
from sink_rate r
join models m on m.model = r.model
left join profile pr on pr.model = r.model and pr.input_kind = r.input_kind
left join sink_anchors a on a.hf_model = m.hf_model and a.input_kind = r.input_kind
    and a.epsilon = r.epsilon and a.tokens = r.context
where r.status = 'measured'
order by r.model, r.input_kind

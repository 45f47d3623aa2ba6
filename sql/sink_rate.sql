-- Attention sinks per model and input kind: Gu et al.'s sink rate (per text, then averaged) and the pooled one, over queries below params.sink_context at threshold params.sink_epsilon (Gu et al. 2025, Table 1: epsilon 0.3 on 64-token texts).
-- Seed: - (Gu et al. 2025, When Attention Sink Emerges, Table 1: LLaMA3-8B 99.02%, Mistral-7B 97.49%)
-- Depends: params, sink_heads, sink_texts
-- From attention_mass, which only captures with each query's softmax normaliser have (qkdb sniff's
-- lse); every other model is listed with status 'no normaliser captured', no input kind and no rate.
-- Two estimators (docs/attention.md, "Two sink rates"): sink_rate_per_text thresholds each head's
-- alpha0 on each text and averages the indicator over texts, then heads (sink_heads.sink_text_share):
-- with every head on every text, as in Gu et al.'s code, the mean over (text, head) pairs and the
-- number to set beside theirs; a sampled capture may leave a head fewer texts (sink_texts), and
-- each head still weighs one. sink_rate_pooled thresholds each head's mean over every text's
-- queries once (sink_heads.is_sink). They differ wherever a head's alpha0 straddles epsilon across texts.
-- Column model: The model.
-- Column input_kind: What the captured texts were: 'natural', 'random' or 'repeated' (NULL when not measured).
-- Column family: Model family.
-- Column series: Training-checkpoint series (NULL when none).
-- Column series_order: Order of the checkpoint within its series.
-- Column step: Training step of the checkpoint.
-- Column status: 'measured', or 'no normaliser captured' (the capture did not store lse, or its stored vectors do not give the logits).
-- Column epsilon: The threshold (params.sink_epsilon).
-- Column context: Queries at positions below this count (params.sink_context).
-- Column n_heads: Query heads with at least one such query that saw token 0.
-- Column n_texts: Texts with such a query (of any head).
-- Column per_text: NULL when the per-text rate is measured; else why not: 'needs every position of short texts (--dense)' for a sampled capture.
-- Column sink_rate_per_text: Mean over heads of the share of their texts with alpha0 > epsilon (sink_heads.sink_text_share): Gu et al.'s estimator (their mean over (text, head) pairs when every head has every text).
-- Column sink_rate_pooled: Share of heads whose mean over every text's queries exceeds epsilon (sink_heads.is_sink).
-- Column n_sink_heads: Heads whose pooled mean exceeds epsilon.
-- Column mean_alpha0: Mean over (text, head) pairs of alpha0.
-- Column mean_mass_token0: Mean over the heads of their pooled mean weight on token 0.
-- Column mean_bias_share: Mean over the sink heads (pooled) of their bias_share (sink_heads): near 1, every query favours token 0 alike.
with
per_head as (
    select
        h.model,
        h.input_kind,
        count(*) as n_heads,
        count(*) filter (where h.is_sink) as n_sink_heads,
        avg(h.mass_token0) as mean_mass_token0,
        avg(h.bias_share) filter (where h.is_sink) as mean_bias_share,
        avg(h.sink_text_share) as sink_rate_per_text
    from sink_heads h
    group by h.model, h.input_kind
),
per_text as (
    select model, input_kind, count(distinct example_id) as n_texts, avg(alpha0) as mean_alpha0
    from sink_texts
    group by model, input_kind
)
select
    m.model,
    r.input_kind,
    m.family,
    m.series,
    m.series_order,
    m.step,
    case when r.model is null then 'no normaliser captured' else 'measured' end as status,
    p.sink_epsilon as epsilon,
    p.sink_context as context,
    coalesce(r.n_heads, 0) as n_heads,
    coalesce(t.n_texts, 0) as n_texts,
    case when r.model is not null and t.model is null then 'needs every position of short texts (--dense)' end as per_text,
    r.sink_rate_per_text,
    r.n_sink_heads / nullif(r.n_heads, 0) as sink_rate_pooled,
    coalesce(r.n_sink_heads, 0) as n_sink_heads,
    t.mean_alpha0,
    r.mean_mass_token0,
    r.mean_bias_share
from models m
cross join params p
left join per_head r on r.model = m.model
left join per_text t on t.model = r.model and t.input_kind = r.input_kind
order by m.series nulls first, m.series_order, m.model, r.input_kind

-- Attention sinks per model: the share of query heads whose mean attention weight on token 0 exceeds params.sink_epsilon, over queries below params.sink_context (Gu et al. 2025, Table 1: epsilon 0.3 on 64-token texts).
-- Seed: - (Gu et al. 2025, When Attention Sink Emerges, Table 1: LLaMA3-8B 99.02%, Mistral-7B 97.49%)
-- Depends: params, sink_heads
-- From attention_mass, which only captures with each query's softmax normaliser have (qkdb sniff's
-- lse); every other model is listed with status 'no normaliser captured' and no rate. Each head's
-- mean and whether it is a sink head are sink_heads'.
-- Column model: The model.
-- Column family: Model family.
-- Column series: Training-checkpoint series (NULL when none).
-- Column series_order: Order of the checkpoint within its series.
-- Column step: Training step of the checkpoint.
-- Column status: 'measured', or 'no normaliser captured' (the capture did not store lse, or its stored vectors do not give the logits).
-- Column epsilon: The threshold (params.sink_epsilon).
-- Column context: Queries at positions below this count (params.sink_context).
-- Column n_heads: Query heads with at least one such query that saw token 0.
-- Column n_sink_heads: Of them, heads whose mean weight on token 0 exceeds epsilon.
-- Column sink_rate: n_sink_heads / n_heads.
-- Column mean_mass_token0: Mean over those heads of their mean weight on token 0.
-- Column mean_bias_share: Mean over the sink heads of their bias_share (sink_heads): near 1, every query favours token 0 alike.
with
per_model as (
    select
        h.model,
        count(*) as n_heads,
        count(*) filter (where h.is_sink) as n_sink_heads,
        avg(h.mass_token0) as mean_mass_token0,
        avg(h.bias_share) filter (where h.is_sink) as mean_bias_share
    from sink_heads h
    group by h.model
)
select
    m.model,
    m.family,
    m.series,
    m.series_order,
    m.step,
    case when r.model is null then 'no normaliser captured' else 'measured' end as status,
    p.sink_epsilon as epsilon,
    p.sink_context as context,
    coalesce(r.n_heads, 0) as n_heads,
    coalesce(r.n_sink_heads, 0) as n_sink_heads,
    r.n_sink_heads / nullif(r.n_heads, 0) as sink_rate,
    r.mean_mass_token0,
    r.mean_bias_share
from models m
cross join params p
left join per_model r on r.model = m.model
order by m.series nulls first, m.series_order, m.model

-- Attention sinks per model: the share of query heads whose mean attention weight on token 0 exceeds params.sink_epsilon, over queries below params.sink_context (Gu et al. 2025, Table 1: epsilon 0.3 on 64-token texts).
-- Seed: - (Gu et al. 2025, When Attention Sink Emerges, Table 1: LLaMA3-8B 99.02%, Mistral-7B 97.49%)
-- Depends: params
-- From attention_mass, which only captures with each query's softmax normaliser have (qkdb sniff's
-- lse); every other model is listed with status 'no normaliser captured' and no rate. A head's mean
-- is over its queries whose text's key 0 was captured (n_token0), weighted across bins.
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
with
per_head as (
    select
        a.model, a.layer, a.head,
        sum(a.mass_token0 * a.n_token0) / sum(a.n_token0) as mass_token0
    from attention_mass a
    cross join params p
    where a.q_hi <= p.sink_context and a.n_token0 > 0
    group by a.model, a.layer, a.head
),
per_model as (
    select
        h.model,
        count(*) as n_heads,
        count(*) filter (where h.mass_token0 > p.sink_epsilon) as n_sink_heads,
        avg(h.mass_token0) as mean_mass_token0
    from per_head h
    cross join params p
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
    r.mean_mass_token0
from models m
cross join params p
left join per_model r on r.model = m.model
order by m.series nulls first, m.series_order, m.model

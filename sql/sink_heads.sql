-- Attention sinks per query head: the head's mean attention weight on token 0 over queries below params.sink_context, whether it exceeds params.sink_epsilon, and how much of token 0's logit advantage every query shares (bias) rather than depends on (content).
-- Seed: - (Gu et al. 2025, When Attention Sink Emerges: a head is a sink head when its mean weight on token 0 exceeds epsilon)
-- Depends: params
-- From attention_mass (captures with each query's softmax normaliser only). A head's means are
-- over its queries below params.sink_context whose text's key 0 was captured (n_token0), weighted
-- across the position bins. The decomposition (docs/attention.md, "Is the sink position-driven?"):
-- token 0's logit advantage over the head's typical key, A_t = scaling * q_t . (k_0 - k_bar), splits
-- into its mean over the queries (the bias part, the same whatever the query holds) and the rest
-- (the content part); bias_share = mean(A)^2 / mean(A^2) is the bias part's share of its mean
-- square: 1 when every query favours token 0 alike, 0 when the advantage averages out.
-- Column model: The model.
-- Column layer: Layer index.
-- Column head: Query head index.
-- Column n_queries: Queries below the context that saw token 0 (the means are over these).
-- Column mass_token0: Mean attention weight on token 0.
-- Column mass_tokens0_3: Mean attention weight on tokens 0-3 (over the bins that have it).
-- Column mass_recent_64: Mean attention weight on the captured keys within 64 tokens.
-- Column sink_margin: Mean of logit(t, 0) minus the query's largest other captured logit.
-- Column is_sink: mass_token0 > params.sink_epsilon.
-- Column token0_advantage: Mean of A_t: the bias part of token 0's logit advantage.
-- Column content_sd: Standard deviation of A_t over the queries: the size of its content part.
-- Column bias_share: mean(A)^2 / mean(A^2), in [0, 1]: the share of the advantage every query shares (NULL when A is 0 throughout).
select
    a.model,
    a.layer,
    a.head,
    sum(a.n_token0) as n_queries,
    sum(a.mass_token0 * a.n_token0) / sum(a.n_token0) as mass_token0,
    sum(a.mass_tokens0_3 * a.n_token0) filter (where a.mass_tokens0_3 is not null)
        / sum(a.n_token0) filter (where a.mass_tokens0_3 is not null) as mass_tokens0_3,
    sum(a.mass_recent_64 * a.n_queries) / sum(a.n_queries) as mass_recent_64,
    sum(a.sink_margin * a.n_token0) filter (where a.sink_margin is not null)
        / sum(a.n_token0) filter (where a.sink_margin is not null) as sink_margin,
    sum(a.mass_token0 * a.n_token0) / sum(a.n_token0) > any_value(p.sink_epsilon) as is_sink,
    sum(a.token0_advantage * a.n_token0) / sum(a.n_token0) as token0_advantage,
    -- (population sd from the pooled mean square; greatest() absorbs a rounding below 0)
    sqrt(greatest(sum(a.token0_advantage_sq * a.n_token0) / sum(a.n_token0)
        - pow(sum(a.token0_advantage * a.n_token0) / sum(a.n_token0), 2), 0)) as content_sd,
    least(pow(sum(a.token0_advantage * a.n_token0) / sum(a.n_token0), 2)
        / nullif(sum(a.token0_advantage_sq * a.n_token0) / sum(a.n_token0), 0), 1) as bias_share
from attention_mass a
cross join params p
where a.q_hi <= p.sink_context and a.n_token0 > 0
group by a.model, a.layer, a.head
order by a.model, a.layer, a.head

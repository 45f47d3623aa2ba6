-- Attention sinks per query head and input kind: the head's mean attention weight on token 0 over queries below params.sink_context, whether it exceeds params.sink_epsilon, on what share of its texts it does, and how much of token 0's logit advantage every query shares (bias) rather than depends on (content).
-- Seed: - (Gu et al. 2025, When Attention Sink Emerges: a head is a sink head when its mean weight on token 0 exceeds epsilon)
-- Depends: params, sink_texts
-- From attention_mass (captures with each query's softmax normaliser only). A head's means are
-- over its queries below params.sink_context whose text's key 0 was captured (n_token0), each
-- position bin weighted by its width (q_hi - q_lo), as sink_texts weighs them: for a capture of
-- every position that is the mean over every query; for a sampled one a bin counts for the positions
-- it spans, not for how many queries the sample drew there (bins without queries drop out).
-- The decomposition (docs/attention.md, "Is the sink position-driven?"):
-- token 0's logit advantage over the head's typical key, A_t = scaling * q_t . (k_0 - k_bar), splits
-- into its mean over the queries (the bias part, the same whatever the query holds) and the rest
-- (the content part); bias_share = mean(A)^2 / mean(A^2) is the bias part's share of its mean
-- square: 1 when every query favours token 0 alike, 0 when the advantage averages out.
-- Column model: The model.
-- Column input_kind: What the captured texts were: 'natural', 'random' or 'repeated'.
-- Column layer: Layer index.
-- Column head: Query head index.
-- Column n_queries: Queries below the context that saw token 0 (the means are over these).
-- Column mass_token0: Mean attention weight on token 0 (pooled over the texts; bins weighted by width).
-- Column mass_tokens0_3: Mean attention weight on tokens 0-3 (over the bins that have it).
-- Column mass_recent_64: Mean attention weight on the captured keys within 64 tokens.
-- Column sink_margin: Mean of logit(t, 0) minus the query's largest other captured logit.
-- Column is_sink: mass_token0 > params.sink_epsilon (the pooled estimator).
-- Column n_texts: Texts with a query below the context that saw token 0 (sink_texts).
-- Column mean_alpha0: Mean over those texts of the text's alpha0 (sink_texts).
-- Column sink_text_share: Share of those texts on which the head is a sink (alpha0 > sink_epsilon): Gu et al.'s per-text indicator, averaged over texts.
-- Column token0_advantage: Mean of A_t: the bias part of token 0's logit advantage.
-- Column content_sd: Standard deviation of A_t over the queries: the size of its content part.
-- Column bias_share: mean(A)^2 / mean(A^2), in [0, 1]: the share of the advantage every query shares (NULL when A is 0 throughout).
with
w as (
    select a.*, (a.q_hi - a.q_lo)::double as wb
    from attention_mass a
    cross join params p
    where a.q_hi <= p.sink_context and a.n_token0 > 0
),
heads as (
    select
        model,
        coalesce(input_kind, 'natural') as input_kind,
        layer,
        head,
        sum(n_token0) as n_queries,
        sum(mass_token0 * wb) / sum(wb) as mass_token0,
        sum(mass_tokens0_3 * wb) filter (where mass_tokens0_3 is not null)
            / sum(wb) filter (where mass_tokens0_3 is not null) as mass_tokens0_3,
        sum(mass_recent_64 * wb) / sum(wb) as mass_recent_64,
        sum(sink_margin * wb) filter (where sink_margin is not null)
            / sum(wb) filter (where sink_margin is not null) as sink_margin,
        sum(token0_advantage * wb) / sum(wb) as adv,
        sum(token0_advantage_sq * wb) / sum(wb) as adv_sq
    from w
    group by all
),
texts as (
    select model, input_kind, layer, head, count(*) as n_texts, avg(alpha0) as mean_alpha0,
        avg(is_sink::int) as sink_text_share
    from sink_texts
    group by all
)
select
    h.model,
    h.input_kind,
    h.layer,
    h.head,
    h.n_queries,
    h.mass_token0,
    h.mass_tokens0_3,
    h.mass_recent_64,
    h.sink_margin,
    h.mass_token0 > p.sink_epsilon as is_sink,
    coalesce(t.n_texts, 0) as n_texts,
    t.mean_alpha0,
    t.sink_text_share,
    h.adv as token0_advantage,
    -- (population sd from the mean square; greatest() absorbs a rounding below 0)
    sqrt(greatest(h.adv_sq - h.adv * h.adv, 0)) as content_sd,
    least(h.adv * h.adv / nullif(h.adv_sq, 0), 1) as bias_share
from heads h
cross join params p
left join texts t on t.model = h.model and t.input_kind = h.input_kind and t.layer = h.layer and t.head = h.head
order by h.model, h.input_kind, h.layer, h.head

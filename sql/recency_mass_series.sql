-- Recency mass along a training series: per checkpoint and query-position bin, the mean over heads of the attention weight on token 0, on the captured keys within 64 / 256 / 1,024 tokens, and the share the captured keys explain.
-- Seed: - (how long-context training moves attention between the sink, the recent tokens and the rest)
-- Depends:
-- From attention_mass: captures with each query's softmax normaliser only. A window's mass is a
-- lower bound unless every key in it was captured (captured_share says how much is missing); read
-- it along the series at a fixed bin, where it compares like with like.
-- Column series: Training-checkpoint series.
-- Column series_order: Order of the checkpoint within its series.
-- Column step: Training step of the checkpoint.
-- Column model: The checkpoint.
-- Column q_lo: First query position of the bin.
-- Column q_hi: Query positions are below this.
-- Column n_heads: Query heads with queries in the bin.
-- Column n_queries: Queries in the bin, over those heads.
-- Column mass_token0: Mean over the heads of their mean weight on token 0.
-- Column mass_recent_64: Mean over the heads of their mean weight on the captured keys within 64 tokens.
-- Column mass_recent_256: The same within 256 tokens.
-- Column mass_recent_1024: The same within 1,024 tokens.
-- Column captured_share: Mean over the heads of the share of attention their captured keys explain.
select
    m.series,
    m.series_order,
    m.step,
    m.model,
    a.q_lo,
    a.q_hi,
    count(*) as n_heads,
    sum(a.n_queries) as n_queries,
    avg(a.mass_token0) as mass_token0,
    avg(a.mass_recent_64) as mass_recent_64,
    avg(a.mass_recent_256) as mass_recent_256,
    avg(a.mass_recent_1024) as mass_recent_1024,
    avg(a.captured_share) as captured_share
from attention_mass a
join models m on m.model = a.model
where m.series is not null
group by all
order by m.series, m.series_order, m.model, a.q_lo

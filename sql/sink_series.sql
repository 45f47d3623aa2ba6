-- Attention sinks along a training series (natural text): per checkpoint, the sink rate and mean weight on token 0, their change from the previous checkpoint, and whether that checkpoint is the same one again.
-- Seed: - (when do sinks appear during training: Gu et al. 2025 section 4; streaming-llm #68)
-- Depends: sink_rate, checkpoint_repeats
-- One row per checkpoint of a series, measured or not ('no normaliser captured' keeps its row,
-- so a gap in the curve shows as one). Checkpoints are ordered by series_order. repeats_previous
-- flags a checkpoint whose every head is identical to the previous one's (checkpoint_repeats):
-- the ingest refuses repeated weights when their sha256 is recorded, so this catches captures that
-- did not record it.
-- Column series: Training-checkpoint series.
-- Column series_order: Order of the checkpoint within its series.
-- Column step: Training step of the checkpoint.
-- Column model: The checkpoint.
-- Column status: 'measured' or 'no normaliser captured' (sink_rate).
-- Column n_heads: Query heads measured.
-- Column sink_rate: Gu et al.'s per-text sink rate (sink_rate.sink_rate_per_text).
-- Column sink_rate_pooled: The share of heads whose pooled mean exceeds epsilon (sink_rate.sink_rate_pooled).
-- Column mean_mass_token0: Mean over the heads of their mean weight on token 0.
-- Column mean_bias_share: Mean bias_share of the sink heads (sink_heads).
-- Column sink_rate_change: sink_rate minus the previous measured checkpoint's.
-- Column repeats_previous: Every head is identical to the previous checkpoint's (checkpoint_repeats); FALSE otherwise.
with
repeats as (
    select distinct model from checkpoint_repeats where n_identical = n_compared
),
measured as (
    select
        r.*,
        r.sink_rate_per_text - lag(r.sink_rate_per_text) over (partition by r.series order by r.series_order, r.model) as sink_rate_change
    from sink_rate r
    where r.series is not null and r.status = 'measured' and r.input_kind = 'natural'
)
select
    r.series,
    r.series_order,
    r.step,
    r.model,
    r.status,
    r.n_heads,
    r.sink_rate_per_text as sink_rate,
    r.sink_rate_pooled,
    r.mean_mass_token0,
    r.mean_bias_share,
    m.sink_rate_change,
    x.model is not null as repeats_previous
from sink_rate r
left join measured m on m.model = r.model
left join repeats x on x.model = r.model
where r.series is not null and coalesce(r.input_kind, 'natural') = 'natural'
order by r.series, r.series_order, r.model

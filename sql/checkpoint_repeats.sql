-- Heads whose metrics are identical at two consecutive checkpoints of a training series: the sign of one checkpoint under two names.
-- Seed: - (training-dynamics studies: some Hub step branches serve identical weights, e.g. pythia #195, #205)
-- Depends: head_metrics
-- Checkpoints are consecutive in series_order among those ingested. A head is identical when every
-- metric below is equal to the last bit (or NULL at both): independent captures of different weights
-- never are, and the same weights captured the same way always are. Captures that recorded the
-- weights' sha256 are refused at ingest when they repeat (docs/sniff.md); this view also finds the
-- repeats of captures that did not (qk-sniffer's).
-- Column series: Training-checkpoint series.
-- Column previous_model: The earlier checkpoint of the pair.
-- Column model: The later checkpoint of the pair.
-- Column previous_order: series_order of the earlier checkpoint.
-- Column series_order: series_order of the later checkpoint.
-- Column layer: Layer of the identical head.
-- Column head: Query head index of the identical head.
-- Column n_identical: Heads identical at this pair of checkpoints (every head of both: a repeated checkpoint).
-- Column n_compared: Heads both checkpoints have.
-- Column same_weights: Both captures recorded the same weights_sha256 (NULL when either did not record it).
with
ckpt as (
    select distinct series, series_order, model from head_metrics where series is not null
),
pairs as (
    select
        series,
        lag(model) over w as previous_model,
        model,
        lag(series_order) over w as previous_order,
        series_order
    from ckpt
    window w as (partition by series order by series_order, model)
),
compared as (
    select
        p.series, p.previous_model, p.model, p.previous_order, p.series_order, h.layer, h.head,
        -- (a row value: NULLs compare as equal with IS NOT DISTINCT FROM, field by field)
        row(h.n_q, h.n_k, h.pos_var_q, h.pos_var_k, h.eigenvalue, h.explained_variance, h.r_q, h.r_k, h.mu_q,
            h.mu_k, h.sd_q, h.sd_k, h.r_q_a, h.r_k_a, h.alpha_q, h.alpha_k, h.mu_q_a, h.mu_k_a, h.bias_strength,
            h.separation_strength, h.plane_var_fraction)
        is not distinct from
        row(g.n_q, g.n_k, g.pos_var_q, g.pos_var_k, g.eigenvalue, g.explained_variance, g.r_q, g.r_k, g.mu_q,
            g.mu_k, g.sd_q, g.sd_k, g.r_q_a, g.r_k_a, g.alpha_q, g.alpha_k, g.mu_q_a, g.mu_k_a, g.bias_strength,
            g.separation_strength, g.plane_var_fraction) as identical
    from pairs p
    join head_metrics h on h.model = p.model
    join head_metrics g on g.model = p.previous_model and g.layer = h.layer and g.head = h.head
    where p.previous_model is not null
),
counted as (
    select
        *,
        count(*) filter (where identical) over pair as n_identical,
        count(*) over pair as n_compared
    from compared
    window pair as (partition by series, previous_model, model)
)
select
    c.series, c.previous_model, c.model, c.previous_order, c.series_order, c.layer, c.head, c.n_identical,
    c.n_compared,
    case when a.weights_sha256 is not null and b.weights_sha256 is not null
         then a.weights_sha256 = b.weights_sha256 end as same_weights
from counted c
left join models a on a.model = c.previous_model
left join models b on b.model = c.model
where c.identical
order by c.series, c.series_order, c.model, c.layer, c.head

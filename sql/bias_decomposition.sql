-- Recency bias of every checkpoint split into its factors mu_q_a and alpha_k, with % change from the last checkpoint before long-context training.
-- Seed: SmolLM3-3B long-context training: bias_strength -91% (19.4 -> 1.8 x10^3), alpha_k -93% (4.08 -> 0.27 x10^3), mu_q_a +43% (4.65 -> 6.64); early training mu_q_a doubles and bias +75% (seed 002 Finding 6).
-- Depends: series_trajectory
-- The baseline of a series is its last ingested checkpoint outside long-context phases
-- (params.long_context_phase); changes are 100 * (value - baseline) / |baseline|, also for
-- checkpoints before the baseline. pct_*_vs_previous compare with the previous ingested checkpoint.
-- Column series: Training-checkpoint series.
-- Column series_order: Order of the checkpoint within its series.
-- Column phase: Training phase.
-- Column step: Training step.
-- Column model: The checkpoint's model name.
-- Column long_context: The phase matches params.long_context_phase.
-- Column n_heads: Heads of the checkpoint.
-- Column mean_mu_q_a: Mean Q cluster position on axis a.
-- Column mean_alpha_k: Mean K drift slope on axis a (per token; the seed shows x10^3).
-- Column mean_bias_strength: Mean bias_strength = mu_q_a * alpha_k per head (per token; the seed shows x10^3).
-- Column baseline_model: The series' last checkpoint before long-context training.
-- Column pct_mu_q_a_vs_baseline: % change of mean_mu_q_a from the baseline.
-- Column pct_alpha_k_vs_baseline: % change of mean_alpha_k from the baseline.
-- Column pct_bias_vs_baseline: % change of mean_bias_strength from the baseline.
-- Column pct_mu_q_a_vs_previous: % change of mean_mu_q_a from the previous checkpoint.
-- Column pct_alpha_k_vs_previous: % change of mean_alpha_k from the previous checkpoint.
-- Column pct_bias_vs_previous: % change of mean_bias_strength from the previous checkpoint.
with c as (
    select
        t.series, t.series_order, t.phase, t.step, t.model, t.long_context, t.n_heads,
        t.mean_mu_q_a, t.mean_alpha_k, t.mean_bias_strength
    from series_trajectory t
), base as (
    select
        c.series,
        arg_max(c.model, c.series_order) as baseline_model
    from c
    where not c.long_context
    group by c.series
), j as (
    select
        c.*,
        base.baseline_model,
        b.mean_mu_q_a as base_mu_q_a,
        b.mean_alpha_k as base_alpha_k,
        b.mean_bias_strength as base_bias,
        lag(c.mean_mu_q_a) over w as prev_mu_q_a,
        lag(c.mean_alpha_k) over w as prev_alpha_k,
        lag(c.mean_bias_strength) over w as prev_bias
    from c
    left join base on base.series = c.series
    left join c as b on b.model = base.baseline_model
    window w as (partition by c.series order by c.series_order)
)
select
    j.series,
    j.series_order,
    j.phase,
    j.step,
    j.model,
    j.long_context,
    j.n_heads,
    j.mean_mu_q_a,
    j.mean_alpha_k,
    j.mean_bias_strength,
    j.baseline_model,
    100 * (j.mean_mu_q_a - j.base_mu_q_a) / nullif(abs(j.base_mu_q_a), 0) as pct_mu_q_a_vs_baseline,
    100 * (j.mean_alpha_k - j.base_alpha_k) / nullif(abs(j.base_alpha_k), 0) as pct_alpha_k_vs_baseline,
    100 * (j.mean_bias_strength - j.base_bias) / nullif(abs(j.base_bias), 0) as pct_bias_vs_baseline,
    100 * (j.mean_mu_q_a - j.prev_mu_q_a) / nullif(abs(j.prev_mu_q_a), 0) as pct_mu_q_a_vs_previous,
    100 * (j.mean_alpha_k - j.prev_alpha_k) / nullif(abs(j.prev_alpha_k), 0) as pct_alpha_k_vs_previous,
    100 * (j.mean_bias_strength - j.prev_bias) / nullif(abs(j.prev_bias), 0) as pct_bias_vs_previous
from j
order by j.series, j.series_order, j.model

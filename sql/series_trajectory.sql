-- Every checkpoint of every training series: position signal, PC0 variance, drift, separation, bias, plane variance and taxonomy.
-- Seed: SmolLM3-3B: r_q 0.67 -> 0.81 in the first 1.2M steps, then 0.81 -> 0.87 in long-context training while r_k 0.54 -> 0.46; PC0 EV 0.19 -> 0.29 -> 0.34; position-dominated 34% -> 55% -> 71%; content-focused 11% -> <1% (seed 003 Findings 5-6); |r_k_a| 0.86 at step 40k, 0.918 -> 0.905 in long-context training (seed 002 Finding 6).
-- Depends: scoped_heads
-- One row per checkpoint (a model with a series); sd is the sample standard deviation across
-- heads, p25/p75 the quartiles (their difference is the IQR).
-- Column series: Training-checkpoint series.
-- Column series_order: Order of the checkpoint within its series.
-- Column phase: Training phase.
-- Column step: Training step (restarts in each long-context phase).
-- Column model: The checkpoint's model name.
-- Column family: Model family.
-- Column long_context: The phase matches params.long_context_phase.
-- Column n_heads: Heads of the checkpoint.
-- Column mean_r_q: Mean PC0 r_q.
-- Column sd_r_q: Sample sd of PC0 r_q.
-- Column mean_r_k: Mean PC0 r_k (signed).
-- Column sd_r_k: Sample sd of PC0 r_k.
-- Column mean_explained_variance: Mean PC0 explained variance.
-- Column sd_explained_variance: Sample sd of PC0 explained variance.
-- Column mean_abs_r_k_a: Mean |r_k_a|.
-- Column median_abs_r_k_a: Median |r_k_a|.
-- Column p25_abs_r_k_a: 25th percentile of |r_k_a|.
-- Column p75_abs_r_k_a: 75th percentile of |r_k_a|.
-- Column mean_separation_strength: Mean separation_strength.
-- Column median_separation_strength: Median separation_strength.
-- Column p25_separation_strength: 25th percentile of separation_strength.
-- Column p75_separation_strength: 75th percentile of separation_strength.
-- Column mean_bias_strength: Mean bias_strength (per token).
-- Column median_bias_strength: Median bias_strength.
-- Column p25_bias_strength: 25th percentile of bias_strength.
-- Column p75_bias_strength: 75th percentile of bias_strength.
-- Column mean_plane_var_fraction: Mean plane_var_fraction.
-- Column median_plane_var_fraction: Median plane_var_fraction.
-- Column p25_plane_var_fraction: 25th percentile of plane_var_fraction.
-- Column p75_plane_var_fraction: 75th percentile of plane_var_fraction.
-- Column mean_mu_q_a: Mean Q cluster position on axis a.
-- Column mean_alpha_k: Mean K drift slope on axis a (per token).
-- Column frac_position_dominated: Share of classified heads that are position-dominated.
-- Column frac_q_positional: Share that are Q-positional.
-- Column frac_k_positional: Share that are K-positional.
-- Column frac_content_focused: Share that are content-focused.
-- Column frac_mixed: Share that are mixed.
select
    s.series,
    s.series_order,
    s.phase,
    s.step,
    s.model,
    s.family,
    s.long_context,
    count(*) as n_heads,
    avg(s.r_q) as mean_r_q,
    stddev_samp(s.r_q) as sd_r_q,
    avg(s.r_k) as mean_r_k,
    stddev_samp(s.r_k) as sd_r_k,
    avg(s.explained_variance) as mean_explained_variance,
    stddev_samp(s.explained_variance) as sd_explained_variance,
    avg(abs(s.r_k_a)) as mean_abs_r_k_a,
    median(abs(s.r_k_a)) as median_abs_r_k_a,
    quantile_cont(abs(s.r_k_a), 0.25) as p25_abs_r_k_a,
    quantile_cont(abs(s.r_k_a), 0.75) as p75_abs_r_k_a,
    avg(s.separation_strength) as mean_separation_strength,
    median(s.separation_strength) as median_separation_strength,
    quantile_cont(s.separation_strength, 0.25) as p25_separation_strength,
    quantile_cont(s.separation_strength, 0.75) as p75_separation_strength,
    avg(s.bias_strength) as mean_bias_strength,
    median(s.bias_strength) as median_bias_strength,
    quantile_cont(s.bias_strength, 0.25) as p25_bias_strength,
    quantile_cont(s.bias_strength, 0.75) as p75_bias_strength,
    avg(s.plane_var_fraction) as mean_plane_var_fraction,
    median(s.plane_var_fraction) as median_plane_var_fraction,
    quantile_cont(s.plane_var_fraction, 0.25) as p25_plane_var_fraction,
    quantile_cont(s.plane_var_fraction, 0.75) as p75_plane_var_fraction,
    avg(s.mu_q_a) as mean_mu_q_a,
    avg(s.alpha_k) as mean_alpha_k,
    count(*) filter (where s.category = 'position-dominated') / nullif(count(s.category), 0) as frac_position_dominated,
    count(*) filter (where s.category = 'q-positional') / nullif(count(s.category), 0) as frac_q_positional,
    count(*) filter (where s.category = 'k-positional') / nullif(count(s.category), 0) as frac_k_positional,
    count(*) filter (where s.category = 'content-focused') / nullif(count(s.category), 0) as frac_content_focused,
    count(*) filter (where s.category = 'mixed') / nullif(count(s.category), 0) as frac_mixed
from scoped_heads s
where s.scope = 'model' and s.series is not null
group by s.series, s.series_order, s.phase, s.step, s.model, s.family, s.long_context
order by s.series, s.series_order, s.model

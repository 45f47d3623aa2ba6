-- One row per headline finding of seeds 002 and 003: the seed's claim, the value measured on the ingested models with its 95% interval, and whether the claim holds here.
-- Seed: every numbered finding of seed 003 (combined Q/K PCA) and seed 002 (planar rotation), the numbers in their tables, and the numbers their figure tables quote.
-- Depends: params, finding_values, finding_state, finding_intervals, benchmark_fit, ingested_layers
-- How it is built: `claims` lists every finding once (what the seed says and how to test it);
-- the measured values are computed from `finding_inputs` (the heads each finding rests on) with
-- the finding's statistic, in `finding_values`; their 95% intervals come from `finding_intervals`, which qkdb
-- computes from the same rows whenever models are published (a bootstrap needs Python; see
-- docs/findings.md for each finding's method). An interval is used only when it was computed for
-- this very state of the warehouse (finding_state) and this very value; otherwise ci_method says
-- it is out of date and the finding reads 'inconclusive' until qkdb refreshes it.
-- A finding whose data is not ingested keeps its row, with measured NULL and status 'no data'.
-- Verdicts (SPEC §6.1; margins in params):
--   point   the seed states a value: holds when the whole interval lies inside the equivalence
--           band around it, does not hold when it lies wholly outside, else inconclusive.
--           Bands: shares and correlations within margin_share / margin_r of the seed's value
--           AND within a factor margin_odds of its odds (a correlation's: of (1 + r)/(1 - r)),
--           so that near 0 or 1 the band scales with the value; magnitudes within a factor margin_ratio.
--   range   the seed states a range (across models when the value is per model): the band is the
--           range widened by the margins at each end; holds when every model's interval lies in
--           it, does not hold when some model's interval lies wholly outside it.
--   above / below   a sign or an ordering: holds when the interval excludes the null (lo / hi) on
--           the claimed side, does not hold when it excludes it on the other side.
--   change  a change between checkpoints: as above / below, against a null of
--           margin_change times the seed's change (from lo, the value of no change).
--   bound   "below x": holds when the interval lies below the band's upper end around x.
--   tiny    the drift lemma, a property of float64 arithmetic (no sampling): holds when the
--           largest residual is below lemma_max.
-- Column id: Stable identifier: <seed>.<finding>.<what>, e.g. '003.F1.pos_var_q'.
-- Column seed: The seed document: '003' (combined Q/K PCA) or '002' (planar rotation); 'attn' for attention as the model computes it (attention sinks, docs/attention.md: Gu et al. 2025 and the sink's decomposition, tested on captured normalisers); 'rope' for which RoPE frequencies the logits use (SPEC §4.8: Barbero et al. 2025, Liu et al. 2023).
-- Column finding: Where the seed states it: 'Finding N', 'figure NN' or 'Lemma'.
-- Column statement: What is measured, in words.
-- Column scope: Which heads: 'overall', a family, a group of models, or a series span (first -> last checkpoint compared).
-- Column estimand: What the interval is about: 'these models' (the ingested models as they are; their heads resampled) or 'models like these' (the population of models they stand for: the models resampled); the seeds' overall claims are the latter once several models are pooled. Where a model behind the row was ingested in some of its layers, the layers follow: 'these models: layers 0-25 of 30' (with the model's name when several models are pooled).
-- Column seed_value: The seed's value as the seed states it.
-- Column measured: The value measured here with its 95% interval in brackets, formatted like the seed's (ranges lo-hi, changes from -> to).
-- Column ci_low: Lower end of the 95% interval of measured_value (for a range across models: the lowest end of every model's interval), on the scale of seed_number.
-- Column ci_high: Upper end of the 95% interval (for a range across models: the highest end of every model's interval).
-- Column ci_method: How the interval was computed (Wilson, Fisher z, bootstrap and its resampling units), or why there is none.
-- Column status: 'holds', 'does not hold', 'inconclusive' (the interval cannot tell) or 'no data'.
-- Column holds: TRUE when the status is 'holds', FALSE when 'does not hold', NULL when inconclusive or without data.
-- Column criterion: The test, in words: the band or the null the interval is compared with.
-- Column accept_low: Lower end of the equivalence band (point, range claims), or the null the interval must lie above (above, change up).
-- Column accept_high: Upper end of the equivalence band (point, range, bound claims), or the null the interval must lie below (below, change down).
-- Column seed_number: The seed's value as a number (fractions as 0-1, changes in %, ratios as ratios).
-- Column measured_value: The measured value as a number, on the scale of seed_number.
-- Column measured_low: For per-model ranges: the lowest model's value.
-- Column measured_high: For per-model ranges: the highest model's value.
-- Column n_models: Models behind the measured value.
-- Column n_heads: Heads behind the measured value (for a change: at the later checkpoint).
with
fiv as materialized (select * from finding_intervals),
-- The models ingested in some of their layers, once (a few rows; read per finding row below).
partial as materialized (select model, description from ingested_layers where subset),
state as materialized (select * from finding_state),
p as materialized (select * from params),
claims_raw(ord, id, seed, finding, statement, scope, seed_value, seed_number, test, lo, hi, margin, fmt, vfmt) as (
    values
    -- seed 003: combined Q/K PCA -----------------------------------------------------------
    (100, '003.F1.pos_var_q', '003', 'Finding 1', 'Share of Q variance linear in position (sum over PCs of EV * r_q^2), mean over heads', 'overall', '27%', 0.27, 'point', null, null, 'share', 'pct', null),
    (101, '003.F1.pos_var_k', '003', 'Finding 1', 'Share of K variance linear in position (sum over PCs of EV * r_k^2), mean over heads', 'overall', '14%', 0.14, 'point', null, null, 'share', 'pct', null),
    (102, '003.F1.q_over_k', '003', 'Finding 1', 'Q variance is more positional than K variance: mean pos_var_q / mean pos_var_k', 'overall', '27% / 14% = 1.9x', 1.93, 'above', 1, null, null, 'x', 'pct'),
    (103, '003.F1.pc0_share_q', '003', 'Finding 1', 'PC0''s share of the positional Q variance, mean over heads', 'overall', '~90%', 0.90, 'point', null, null, 'share', 'pct', null),
    (104, '003.F1.pc0_share_k', '003', 'Finding 1', 'PC0''s share of the positional K variance, mean over heads', 'overall', '~74%', 0.74, 'point', null, null, 'share', 'pct', null),
    (110, '003.F1.small_qwen3.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '~32%', 0.32, 'point', null, null, 'share', 'pct', null),
    (111, '003.F1.small_qwen3.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '~9%', 0.09, 'point', null, null, 'share', 'pct', null),
    (112, '003.F1.large_qwen3.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', '~24%', 0.24, 'point', null, null, 'share', 'pct', null),
    (113, '003.F1.large_qwen3.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', '~14%', 0.14, 'point', null, null, 'share', 'pct', null),
    (114, '003.F1.llama3.2.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'family Llama 3.2', '~31%', 0.31, 'point', null, null, 'share', 'pct', null),
    (115, '003.F1.llama3.2.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'family Llama 3.2', '~20%', 0.20, 'point', null, null, 'share', 'pct', null),
    (116, '003.F1.ministral3.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'family Ministral3', '~23%', 0.23, 'point', null, null, 'share', 'pct', null),
    (117, '003.F1.ministral3.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'family Ministral3', '~11%', 0.11, 'point', null, null, 'share', 'pct', null),
    (120, '003.F2.fisher', '003', 'Finding 2', 'Fisher ratio of Q vs K on PC0, mean over heads', 'overall', '~44', 44, 'point', null, null, 'ratio', 'num', null),
    (121, '003.F2.accuracy', '003', 'Finding 2', 'Balanced linear Q-vs-K accuracy on (PC0, PC1): per-model means', 'overall', '98.5-100%', null, 'range', 0.985, 1.0, 'share', 'pct', null),
    (122, '003.F2.separation', '003', 'Finding 2', 'Q/K cluster separation |mu_q - mu_k| on PC0, mean over heads (units)', 'overall', '~47 units', 47, 'point', null, null, 'ratio', 'num', null),
    (123, '003.F2.pc0_ev', '003', 'Finding 2, figure 05', 'PC0''s share of combined Q/K variance, mean over heads', 'overall', '~34%', 0.34, 'point', null, null, 'share', 'pct', null),
    (130, '003.F3.pc0_r_k', '003', 'Finding 3, figure 01', 'Mean PC0 r_k (positive: K''s position gradient runs with Q''s)', 'overall', '~0.48', 0.48, 'point', null, null, 'r', 'r', null),
    (131, '003.F3.abs_mu_q', '003', 'Finding 3', '|mu_Q| on PC0 (the Q cluster mean that amplifies K''s gradient), mean over heads (units)', 'overall', '20-30 units', null, 'range', 20, 30, 'ratio', 'num', null),
    (132, '003.fig01.pc0_r_q', '003', 'figure 01', 'Mean PC0 r_q', 'overall', '~0.80', 0.80, 'point', null, null, 'r', 'r', null),
    (133, '003.fig01.q_dominant', '003', 'figure 01', 'On PC0 Q is more positional than K: mean r_q - mean |r_k|', 'overall', '0.80 vs 0.48', 0.32, 'above', 0, null, null, 'r', null),
    (140, '003.F4.mixed', '003', 'Finding 4', 'Share of heads that are mixed', 'overall', '55.4%', 0.554, 'point', null, null, 'share', 'pct', null),
    (141, '003.F4.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated (r_q > 0.7, |r_k| > 0.7)', 'overall', '26.6%', 0.266, 'point', null, null, 'share', 'pct', null),
    (142, '003.F4.q_positional', '003', 'Finding 4', 'Share of heads that are Q-positional (r_q > 0.7, |r_k| < 0.3)', 'overall', '14.2%', 0.142, 'point', null, null, 'share', 'pct', null),
    (143, '003.F4.content_focused', '003', 'Finding 4', 'Share of heads that are content-focused (r_q < 0.3, |r_k| < 0.3)', 'overall', '3.8%', 0.038, 'point', null, null, 'share', 'pct', null),
    (144, '003.F4.k_positional', '003', 'Finding 4', 'Share of heads that are K-positional (r_q < 0.3, |r_k| > 0.7)', 'overall', '<0.1%', 0.001, 'bound', null, 0.001, 'share', 'pct', null),
    (150, '003.F4.llama3.2.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated: per-model shares', 'family Llama 3.2', '38-50%', null, 'range', 0.38, 0.50, 'share', 'pct', null),
    (151, '003.F4.llama3.2.mixed', '003', 'Finding 4', 'Share of heads that are mixed: per-model shares', 'family Llama 3.2', '46-52%', null, 'range', 0.46, 0.52, 'share', 'pct', null),
    (152, '003.F4.llama3.2.highest', '003', 'Finding 4', 'Llama 3.2 has the highest position-dominated share: its share minus the highest share of the other seed groups', 'family Llama 3.2', 'highest', null, 'above', 0, null, null, 'pct', null),
    (153, '003.F4.large_qwen3.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated: per-model shares', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', '37-39%', null, 'range', 0.37, 0.39, 'share', 'pct', null),
    (154, '003.F4.small_qwen3.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated: per-model shares', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '5-7%', null, 'range', 0.05, 0.07, 'share', 'pct', null),
    (155, '003.F4.small_qwen3.q_positional', '003', 'Finding 4', 'Share of heads that are Q-positional', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '39%', 0.39, 'point', null, null, 'share', 'pct', null),
    (156, '003.F4.ministral3.mixed', '003', 'Finding 4', 'Share of heads that are mixed: per-model shares', 'family Ministral3', '77-84%', null, 'range', 0.77, 0.84, 'share', 'pct', null),
    (157, '003.F4.ministral3.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated: per-model shares', 'family Ministral3', '8-19%', null, 'range', 0.08, 0.19, 'share', 'pct', null),
    (160, '003.F5.r_q', '003', 'Finding 5', 'Mean PC0 r_q rises in early training: change from the first checkpoint to the last within the first 1.2M steps', 'series (SmolLM3-3B in the seed)', '0.67 -> 0.81', 0.14, 'change', 0, null, null, 'r', 'r'),
    (161, '003.F5.content_focused', '003', 'Finding 5', 'Content-focused share falls in early training: change', 'series (SmolLM3-3B in the seed)', '11% -> <1%', -0.10, 'change', 0, null, null, 'pct', 'pct'),
    (162, '003.F5.position_dominated', '003', 'Finding 5', 'Position-dominated share grows in early training: change', 'series (SmolLM3-3B in the seed)', '34% -> 55%', 0.21, 'change', 0, null, null, 'pct', 'pct'),
    (170, '003.F6.r_q', '003', 'Finding 6', 'Mean PC0 r_q rises in long-context training: change from the last checkpoint before it to the last checkpoint', 'series (SmolLM3-3B in the seed)', '0.81 -> 0.87', 0.06, 'change', 0, null, null, 'r', 'r'),
    (171, '003.F6.r_k', '003', 'Finding 6', 'Mean PC0 r_k drops in long-context training: change', 'series (SmolLM3-3B in the seed)', '0.54 -> 0.46', -0.08, 'change', 0, null, null, 'r', 'r'),
    (172, '003.F6.pc0_ev', '003', 'Finding 6', 'PC0 explained variance grows in long-context training: change', 'series (SmolLM3-3B in the seed)', '0.29 -> 0.34', 0.05, 'change', 0, null, null, 'r', 'r'),
    (173, '003.F6.position_dominated', '003', 'Finding 6', 'Position-dominated share grows in long-context training: change', 'series (SmolLM3-3B in the seed)', '58% -> 71%', 0.13, 'change', 0, null, null, 'pct', 'pct'),
    (180, '003.fig08.position_dominated', '003', 'figure 08', 'Position-dominated share grows over the whole series: change from the first to the last checkpoint', 'series (SmolLM3-3B in the seed)', '34% -> 71%', 0.37, 'change', 0, null, null, 'pct', 'pct'),
    (181, '003.fig09.pc0_ev', '003', 'figure 09', 'PC0 explained variance grows over the whole series: change', 'series (SmolLM3-3B in the seed)', '0.19 -> 0.34', 0.15, 'change', 0, null, null, 'r', 'r'),
    (190, '003.ap.content_vs_qpos', '003', 'Plasticity prediction', 'The taxonomy predicts attention plasticity: mean AP (empirical, over the context) of content-focused heads minus that of Q-positional heads', 'overall', 'content > Q-positional', null, 'above', 0, null, null, 'f3', null),
    (191, '003.ap.qpos_vs_posdom', '003', 'Plasticity prediction', 'The taxonomy predicts attention plasticity: mean AP of Q-positional heads minus that of position-dominated heads', 'overall', 'Q-positional > positional', null, 'above', 0, null, null, 'f3', null),
    (192, '003.ap.drop', '003', 'Plasticity prediction', 'Plasticity falls with query position: mean over heads of AP in the first fifth of the context less AP in the last fifth (ap_drop)', 'overall', 'AP falls along the context', null, 'above', 0, null, null, 'f3', null),
    (193, '003.ap.lc_overall', '003', 'LC hypothesis', 'Long-context training raises attention plasticity: change of mean AP over the context, last short-context checkpoint -> end of long-context training', 'series (SmolLM3-3B in the seed)', 'rises (testable hypothesis)', null, 'above', 0, null, null, 'f3', 'f3'),
    (194, '003.ap.lc_last20', '003', 'LC hypothesis', 'Long-context training raises plasticity at the end of the context: change of mean AP in the last fifth', 'series (SmolLM3-3B in the seed)', 'rises (testable hypothesis)', null, 'above', 0, null, null, 'f3', 'f3'),
    (195, '003.ecl.ap_drop', '003', 'Effective context', 'Plasticity tracks long-context performance: Pearson r over models of the AP drop (first fifth less last fifth of the context, empirical) with the LongBench-Pro overall score of the benchmarked model each stands for (plasticity_benchmark_fit)', 'models with a LongBench-Pro score', 'r = -0.675 (the author, 7 models)', -0.675, 'below', null, 0, null, 'r', null),
    (196, '003.ecl.retention', '003', 'Effective context', 'Models that keep their plasticity keep their scores: Pearson r over models of AP retention (AP of the longest length bin over the shortest) with LongBench-Pro score retention over the same lengths', 'models with a LongBench-Pro score', 'r = 0.943 (from the author''s values, 7 models)', 0.943, 'above', 0, null, null, 'r', null),
    -- seed 002: planar rotation ------------------------------------------------------------
    (200, '002.F1.abs_r_k_a', '002', 'Finding 1', 'Mean |r_k| on the drift axis a', 'overall', '0.87', 0.87, 'point', null, null, 'r', 'r', null),
    (201, '002.F1.abs_r_q_a', '002', 'Finding 1', 'Mean |r_q| on the drift axis a', 'overall', '0.74', 0.74, 'point', null, null, 'r', 'r', null),
    (202, '002.F1.k_over_q', '002', 'Finding 1', 'K encodes position more strongly than Q on axis a (reversing PC0): mean |r_k_a| - mean |r_q_a|', 'overall', '0.87 vs 0.74', 0.13, 'above', 0, null, null, 'r', null),
    (203, '002.F1.slope_ratio', '002', 'Finding 1', 'Keys drift faster than queries: median |alpha_k| / |alpha_q|', 'overall', '1.83', 1.83, 'above', 1, null, null, 'x', null),
    (204, '002.F1.slope_ratio.small_qwen3', '002', 'figure 05', 'Median |alpha_k| / |alpha_q|', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '~8', 8, 'point', null, null, 'ratio', 'x', null),
    (205, '002.F1.slope_ratio.llama3.2', '002', 'figure 05', 'Median |alpha_k| / |alpha_q|', 'family Llama 3.2', '~2', 2, 'point', null, null, 'ratio', 'x', null),
    (206, '002.F1.slope_ratio.ministral3', '002', 'figure 05', 'Median |alpha_k| / |alpha_q|', 'family Ministral3', '~1', 1, 'point', null, null, 'ratio', 'x', null),
    (210, '002.F2.bias_positive', '002', 'Finding 2', 'Share of heads with a recency bias (bias_strength = mu_q_a * alpha_k > 0)', 'overall', '99.0%', 0.99, 'point', null, null, 'share', 'pct', null),
    (211, '002.F2.bias_negative', '002', 'Finding 2', 'Share of heads with a primacy bias (bias_strength < 0)', 'overall', '31 of 3,239 heads (1.0%)', 0.0096, 'point', null, null, 'share', 'pct', null),
    (212, '002.F2.mu_q_a_positive', '002', 'Finding 2', 'Share of heads whose queries sit on the positive side of axis a (mu_q_a > 0)', 'overall', '98.7%', 0.987, 'point', null, null, 'share', 'pct', null),
    (220, '002.F3.plane_var', '002', 'Finding 3', 'Share of Q+K variance in the {a, b} plane, mean over heads', 'overall', '38%', 0.38, 'point', null, null, 'share', 'pct', null),
    (221, '002.F3.plane_var_range', '002', 'Finding 3', 'Share of Q+K variance in the {a, b} plane: per-model means', 'overall', '29-46%', null, 'range', 0.29, 0.46, 'share', 'pct', null),
    (222, '002.F3.b_above_a', '002', 'Finding 3', 'Share of heads where axis b carries more variance than axis a', 'overall', '88%', 0.88, 'point', null, null, 'share', 'pct', null),
    (230, '002.lemma', '002', 'Lemma', 'Largest position correlation left in the complement of {a, b} (residual_pos_r)', 'overall', '7.3e-15', 7.3e-15, 'tiny', null, null, null, 'sci', null),
    (231, '002.F4.active_pairs', '002', 'Finding 4', 'Share of the complement SVD pairs that are active rotation planes: per-model means (RoPE layers)', 'overall', '18-29 of 30 (60-97%)', null, 'range', 0.60, 0.967, 'share', 'pct', null),
    (232, '002.F4.active_var_share', '002', 'Finding 4', 'Share of complement variance in active rotation planes: per-model means (RoPE layers)', 'overall', '44-89%', null, 'range', 0.44, 0.89, 'share', 'pct', null),
    (233, '002.F4.ring_accuracy', '002', 'Finding 4', 'Balanced linear Q-vs-K accuracy on active rotation planes, mean (Q and K share the rings)', 'overall', '~50%', 0.50, 'point', null, null, 'share', 'pct', null),
    (234, '002.F4.max_angle_r', '002', 'Finding 4', 'Largest circular-linear correlation of a complement pair''s angle with position', 'overall', 'up to 1.0', 1.0, 'point', null, null, 'r_abs', 'r', null),
    (240, '002.F5.overall', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength over all heads', 'overall', '+0.48', 0.48, 'above', 0, null, null, 'r', null),
    (241, '002.F5.llama3.2', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength within the family (reverses the pooled sign)', 'family Llama 3.2', '-0.65', -0.65, 'below', null, 0, null, 'r', null),
    (242, '002.F5.qwen3', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength within the family (high-bias heads have high separation)', 'family Qwen3', 'positive', null, 'above', 0, null, null, 'r', null),
    (243, '002.F5.ministral3', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength within the family (no correlation)', 'family Ministral3', '~0', 0, 'point', null, null, 'r', 'r', null),
    (244, '002.F5.simpson', '002', 'Finding 5', 'Families whose within-family r has the opposite sign of the pooled r (Simpson''s paradox)', 'families', 'Llama 3.2 reverses', null, 'above', 0, null, null, 'count', null),
    (250, '002.F6.abs_r_k_a_first', '002', 'Finding 6', 'Mean |r_k_a| at the first checkpoint (step 40k in the seed)', 'series (SmolLM3-3B in the seed)', '0.86', 0.86, 'point', null, null, 'r', 'r', null),
    (251, '002.F6.init_mu_q_a', '002', 'Finding 6', 'mu_q_a grows in early training: ratio of means, last checkpoint within the first 1.2M steps / first', 'series (SmolLM3-3B in the seed)', 'doubles (2x)', 2, 'change', 1, null, null, 'x', 'num'),
    (252, '002.F6.init_bias', '002', 'Finding 6', 'bias_strength grows in early training: % change of the mean (x10^3)', 'series (SmolLM3-3B in the seed)', '+75%', 75, 'change', 0, null, null, 'pctchg', 'milli'),
    (253, '002.F6.lc_bias', '002', 'Finding 6', 'bias_strength collapses in long-context training: % change of the mean (x10^3)', 'series (SmolLM3-3B in the seed)', '-91% (19.4 -> 1.8 x10^3)', -91, 'change', 0, null, null, 'pctchg', 'milli'),
    (254, '002.F6.lc_alpha_k', '002', 'Finding 6', 'alpha_k collapses in long-context training: % change of the mean (x10^3)', 'series (SmolLM3-3B in the seed)', '-93% (4.08 -> 0.27 x10^3)', -93, 'change', 0, null, null, 'pctchg', 'milli'),
    (255, '002.F6.lc_mu_q_a', '002', 'Finding 6', 'mu_q_a grows in long-context training: % change of the mean', 'series (SmolLM3-3B in the seed)', '+43% (4.65 -> 6.64)', 43, 'change', 0, null, null, 'pctchg', 'num'),
    (256, '002.F6.lc_abs_r_k_a', '002', 'Finding 6', '|r_k_a| stays near-perfect in long-context training: change of the mean', 'series (SmolLM3-3B in the seed)', '0.918 -> 0.905', -0.013, 'point', null, null, 'r', 'f3', 'f3'),
    (257, '002.F6.lc_separation', '002', 'Finding 6', 'separation_strength grows in long-context training: % change of the mean', 'series (SmolLM3-3B in the seed)', '+10%', 10, 'change', 0, null, null, 'pctchg', 'f3'),
    (260, '002.recency.corr', '002', 'Score model', 'The recency term mu_Q^a * alpha_K explains the logits: Pearson r over heads of the measured logit slope per token of key position with bias_strength', 'overall', 'mu_Q^a * alpha_K * j in the logits', null, 'above', 0, null, null, 'r', null),
    (261, '002.recency.ratio', '002', 'Score model', 'The recency term is the logits'' slope: mean measured logit slope / mean bias_strength', 'overall', 'slope = bias (1x)', 1, 'point', null, null, 'ratio', 'x', 'sci'),
    (258, '002.F6.lc_plane_var', '002', 'Finding 6', 'plane_var_fraction grows in long-context training: % change of the mean', 'series (SmolLM3-3B in the seed)', '+14%', 14, 'change', 0, null, null, 'pctchg', 'pct'),
    -- attention as the model computes it (docs/attention.md) -------------------------------------
    (300, 'attn.sink.rate', 'attn', 'Gu et al. 2025, Table 1', 'Sink rate on natural text, Gu et al.''s estimator: over (text, head) pairs, the share whose mean attention on token 0 (queries below sink_context) exceeds sink_epsilon, per model', 'overall', '97.5-99.0% (LLaMA3-8B 99.02%, Mistral-7B 97.49%)', null, 'range', 0.9749, 0.9902, 'share', 'pct', null),
    (302, 'attn.sink.repeated', 'attn', 'Gu et al. 2025, Propositions 1-4', 'Repeated tokens give no attention sink in RoPE models: sink rate (per text) on one token repeated, per model', 'overall', '0.00% (LLaMA2/3, Mistral: Table 1; <= 1%)', 0.0, 'below', null, 0.01, null, 'pct', null),
    -- RoPE frequency usage (SPEC §4.8, docs/rotation-planes.md) ---------------------------------
    (310, 'rope.low_band', 'rope', 'Barbero et al. 2025', 'The logits lean on the frequencies that never finish a turn in the trained context: per model, the mean over heads of low_band_excess (the low band''s share of |q.k| over its even share; the low band runs from Liu et al.''s critical plane)', 'overall', 'above 1 (Gemma 7B, Llama 3.1 8B)', null, 'above', 1, null, null, 'x', null),
    (301, 'attn.sink.bias', 'attn', 'Attention sinks', 'Mass on token 0 is position-driven: over sink heads, the mean share of token 0''s logit advantage every query shares (bias_share = mean(A)^2 / mean(A^2))', 'overall', 'position-driven (hypothesis)', null, 'above', 0.5, null, null, 'f3', null)),
claims as (
    select
        ord, id, seed, finding, statement, scope, seed_value,
        seed_number::double as seed_number, test, lo::double as lo, hi::double as hi, margin, fmt,
        coalesce(vfmt, fmt) as vfmt
    from claims_raw
),
-- The measured value of every (finding, scope): sql/finding_values.sql.
est as (select * from finding_values),
-- The interval of each value, when it was computed for this state of the warehouse and this value.
iv as (
    select
        e.*,
        f.ci_method as f_method,
        f.fingerprint is not distinct from s.fingerprint
            and (f.estimate is not distinct from e.value
                 or abs(f.estimate - e.value) <= 1e-9 * greatest(1, abs(e.value))) as current,
        f.ci_low as f_low,
        f.ci_high as f_high,
        f.low_max,
        f.high_min,
        f.id is not null as computed
    from est e
    cross join state s
    left join fiv f on f.id = e.id and f.scope = e.scope
),
ivc as (
    select
        iv.* exclude (f_method, f_low, f_high, low_max, high_min),
        case when iv.current then iv.f_low end as ci_low,
        case when iv.current then iv.f_high end as ci_high,
        case when iv.current then iv.low_max end as low_max,
        case when iv.current then iv.high_min end as high_min,
        case
            when iv.value is null then null
            when not iv.computed then 'no interval computed yet: open the warehouse with qkdb (qkdb findings) to compute it'
            when not iv.current then 'interval out of date (the data or params changed since it was computed): qkdb findings recomputes it'
            else iv.f_method
        end as ci_method
    from iv
),
-- Simpson's paradox (seed 002 Finding 5): families whose within-family r is of the opposite sign
-- to the pooled r. Counted for sure when the family's interval excludes 0 on the side opposite a
-- pooled r whose own interval excludes 0 (ci_low); possibly when the family's interval reaches
-- that side, or the pooled sign is not established (ci_high).
pooled_r as (
    select value as r, ci_low, ci_high from ivc where id = '002.F5.overall' and scope = 'overall'
),
simpson as (
    select
        '002.F5.simpson' as id,
        printf('%d families', count(f.value)) as scope,
        'count' as stat,
        count(*) filter (where sign(f.value) * sign(o.r) < 0)::double as value,
        count(*) filter (where (o.ci_low > 0 and f.ci_high < 0) or (o.ci_high < 0 and f.ci_low > 0))::double as ci_low,
        count(*) filter (where
            f.value is not null and not (
                (o.ci_low > 0 and f.ci_low >= 0) or (o.ci_high < 0 and f.ci_high <= 0)
            ))::double as ci_high,
        -- Ordered: without it the families come in whatever order DuckDB's threads finish.
        coalesce(
            string_agg(printf('%s (r = %.2f [%.2f, %.2f] vs %+.2f pooled)', replace(f.scope, 'family ', ''),
                              f.value, f.ci_low, f.ci_high, o.r), ', ' order by f.scope)
                filter (where sign(f.value) * sign(o.r) < 0),
            'none') as text,
        'families whose within-family interval excludes 0 opposite the pooled r (whose own interval excludes 0): '
            || 'low = such families, high = families whose interval reaches the opposite side'
            || case when bool_or(f.ci_low is null and f.value is not null) then ' (a family without an interval counts as possible)' else '' end
            as ci_method,
        sum(f.n_models) as n_models,
        sum(f.n_heads) as n_heads
    from ivc f
    cross join pooled_r o
    where f.id = '002.F5.family' and f.value is not null and o.r is not null
    -- One family is the pool itself: a reversal needs at least two (else 'no data').
    having count(f.value) > 1
),
-- Effective context (issue 39): the fit of this warehouse's plasticity to LongBench-Pro, in the
-- mode params.benchmark_mode asks (the fit's interval and exact p: plasticity_benchmark_fit). With
-- fewer than 10 models or a match that is not exact it can only describe: inconclusive, saying why.
ecl as (
    select
        case f.y_metric when 'overall' then '003.ecl.ap_drop' else '003.ecl.retention' end as id,
        printf('%d models, %s%s', f.n, f.mode, coalesce(', ' || f.span, '')) as scope,
        'these models' as estimand,
        f.pearson_r as value,
        f.ci_low,
        f.ci_high,
        case when f.descriptive_only then 'descriptive only (' || f.why || '): ' else '' end
            || coalesce(printf('bootstrap over models (percentile, %d draws)', f.n_boot), printf('no interval from %d models', f.n))
            || coalesce(printf('; exact permutation p = %.3g', f.perm_p_pearson), '') as ci_method,
        printf('rho = %.2f%s', f.spearman_rho, coalesce(printf(' (p = %.2g)', f.perm_p_spearman), '')) as text,
        f.n as n_models,
        f.descriptive_only as descriptive
    from benchmark_fit('qkdb') f  -- (the macro: the author's fits are not computed here)
    where f.source = 'qkdb' and f.benchmark = 'longbench-pro'
        and ((f.x_metric = 'ap_drop' and f.y_metric = 'overall')
             or (f.x_metric = 'ap_length_retention' and f.y_metric = 'score_length_retention'))
    -- Retentions over several spans (models captured to different lengths): the span most models share.
    qualify row_number() over (partition by f.y_metric, f.mode order by f.n desc, f.span desc) = 1
),
measured as (
    select id, scope, stat, estimand, value, value_lo, value_hi, v_from, v_to, input_x, input_y, n_input_x, n_input_y, sum_x,
           n_models, models, n_heads,
           ci_low, ci_high, low_max, high_min, ci_method, null::varchar as text
    from ivc
    where id not in ('002.F5.family')
    union all by name
    select id, scope, 'these models' as estimand, value, ci_low, ci_high, ci_method, text, n_models, n_heads from simpson
    union all by name
    select * from ecl
),
judged as (
    select
        c.*,
        m.scope as measured_scope,
        m.estimand,
        m.value,
        m.value_lo,
        m.value_hi,
        m.v_from,
        m.v_to,
        m.stat,
        m.input_x,
        m.input_y,
        m.n_input_x,
        m.n_input_y,
        m.sum_x,
        m.text,
        m.n_models,
        m.models,
        m.n_heads,
        m.ci_low,
        m.ci_high,
        m.low_max,
        m.high_min,
        m.ci_method,
        m.descriptive,
        -- Band ends: a share p moved down/up by margin_share, and by a factor margin_odds on its
        -- odds, whichever moves less; a correlation r likewise as the share (1 + r)/2; a
        -- magnitude by a factor margin_ratio.
        case
            when c.test in ('point', 'range') then
                case c.margin
                    when 'share' then greatest(
                        coalesce(c.lo, c.seed_number) - p.margin_share,
                        coalesce(c.lo, c.seed_number) / (coalesce(c.lo, c.seed_number) + p.margin_odds * (1 - coalesce(c.lo, c.seed_number))))
                    when 'r' then greatest(
                        coalesce(c.lo, c.seed_number) - p.margin_r,
                        2 * (1 + coalesce(c.lo, c.seed_number)) / ((1 + coalesce(c.lo, c.seed_number)) + p.margin_odds * (1 - coalesce(c.lo, c.seed_number))) - 1)
                    when 'ratio' then coalesce(c.lo, c.seed_number) / p.margin_ratio
                    -- At r = +-1 the odds band collapses to the point: there, r within margin_r only.
                    when 'r_abs' then greatest(coalesce(c.lo, c.seed_number) - p.margin_r, -1)
                end
            when c.test = 'above' then c.lo
            when c.test = 'change' and c.seed_number > c.lo then c.lo + p.margin_change * (c.seed_number - c.lo)
        end as accept_lo,
        case
            when c.test in ('point', 'range', 'bound') then
                case c.margin
                    when 'share' then least(
                        coalesce(c.hi, c.seed_number) + p.margin_share,
                        p.margin_odds * coalesce(c.hi, c.seed_number) / (1 - coalesce(c.hi, c.seed_number) + p.margin_odds * coalesce(c.hi, c.seed_number)))
                    when 'r' then least(
                        coalesce(c.hi, c.seed_number) + p.margin_r,
                        2 * p.margin_odds * (1 + coalesce(c.hi, c.seed_number)) / ((1 - coalesce(c.hi, c.seed_number)) + p.margin_odds * (1 + coalesce(c.hi, c.seed_number))) - 1)
                    when 'ratio' then coalesce(c.hi, c.seed_number) * p.margin_ratio
                    when 'r_abs' then least(coalesce(c.hi, c.seed_number) + p.margin_r, 1)
                end
            when c.test = 'below' then c.hi
            when c.test = 'change' and c.seed_number < c.lo then c.lo + p.margin_change * (c.seed_number - c.lo)
            when c.test = 'tiny' then p.lemma_max
        end as accept_hi
    from claims c
    cross join p
    left join measured m on m.id = c.id
),
verdicts as (
    select
        j.*,
        case
            when j.value is null then 'no data'
            when j.descriptive then 'inconclusive'
            when j.test = 'tiny' then case when j.value < j.accept_hi then 'holds' else 'does not hold' end
            when j.ci_low is null or j.ci_high is null then 'inconclusive'
            when j.test in ('point', 'range') then
                case
                    when j.ci_low >= j.accept_lo and j.ci_high <= j.accept_hi then 'holds'
                    -- Per-model ranges: some model's own interval lies wholly outside the band.
                    when coalesce(j.high_min, j.ci_high) < j.accept_lo or coalesce(j.low_max, j.ci_low) > j.accept_hi then 'does not hold'
                    else 'inconclusive'
                end
            -- A count (Simpson's reversing families): none can reverse once its upper end is the null.
            when j.fmt = 'count' then
                case when j.ci_low > j.accept_lo then 'holds' when j.ci_high <= j.accept_lo then 'does not hold' else 'inconclusive' end
            when j.test = 'bound' then
                case when j.ci_high < j.accept_hi then 'holds' when j.ci_low > j.accept_hi then 'does not hold' else 'inconclusive' end
            when j.accept_lo is not null then
                case when j.ci_low > j.accept_lo then 'holds' when j.ci_high < j.accept_lo then 'does not hold' else 'inconclusive' end
            when j.accept_hi is not null then
                case when j.ci_high < j.accept_hi then 'holds' when j.ci_low > j.accept_hi then 'does not hold' else 'inconclusive' end
            else 'inconclusive'
        end as status
    from judged j
),
formatted as (
    select
        v.*,
        -- One formatter for every number of the row, so a finding's numbers all read alike; the
        -- interval's ends without the unit (s[8], s[9]: '12.3% [8.1, 17.5]'); the two means a
        -- difference or ratio combines (s[10], s[11]).
        list_transform(
            [
                {'v': v.value, 'f': v.fmt, 'u': true}, {'v': v.value_lo, 'f': v.fmt, 'u': true},
                {'v': v.value_hi, 'f': v.fmt, 'u': true}, {'v': v.v_from, 'f': v.vfmt, 'u': true},
                {'v': v.v_to, 'f': v.vfmt, 'u': true}, {'v': v.accept_lo, 'f': v.fmt, 'u': true},
                {'v': v.accept_hi, 'f': v.fmt, 'u': true}, {'v': v.ci_low, 'f': v.fmt, 'u': false},
                {'v': v.ci_high, 'f': v.fmt, 'u': false}, {'v': v.input_x, 'f': v.vfmt, 'u': true},
                {'v': v.input_y, 'f': v.vfmt, 'u': true}
            ],
            lambda e: case e.f
                when 'pct' then printf('%.1f', 100 * e.v) || case when e.u then '%' else '' end
                when 'r' then printf('%.2f', e.v)
                when 'f3' then printf('%.3f', e.v)
                when 'num' then printf('%.1f', e.v)
                when 'x' then printf('%.2f', e.v) || case when e.u then 'x' else '' end
                when 'sci' then printf('%.1e', e.v)
                when 'pctchg' then printf('%+.0f', e.v) || case when e.u then '%' else '' end
                when 'milli' then printf('%.2f', 1000 * e.v)
                when 'count' then printf('%d', e.v::bigint)
            end
        ) as s
    from verdicts v
)
select
    f.id,
    f.seed,
    f.finding,
    f.statement,
    coalesce(f.measured_scope, f.scope) as scope,
    -- A model captured in some of its layers: the row is about those layers, and says so on itself
    -- (in every format and in stored rows, not only in a note on stderr).
    f.estimand || coalesce(': ' || (
        select string_agg(if(len(f.models) = 1, '', il.model || ' ') || il.description, '; ' order by il.model)
        from partial il
        where list_contains(f.models, il.model)), '') as estimand,
    f.seed_value,
    case
        when f.value is null then null
        else
            case
                -- The count's bounds said in words: a bare "[0, 2]" after the families' own brackets read as one more r.
                when f.id = '002.F5.simpson' then
                    printf('%d (%d sure, %d possible): ', f.value::bigint, f.ci_low::bigint, f.ci_high::bigint) || f.text
                when f.text is not null then f.s[1] || ': ' || f.text
                when f.id = '002.F2.bias_negative' then
                    printf('%d of %d heads (%s)', f.sum_x::bigint, f.n_heads, f.s[1])
                when f.value_lo is not null and f.n_models = 1 then f.s[1]
                when f.value_lo is not null then f.s[2] || '-' || f.s[3] || ' (mean ' || f.s[1] || ')'
                when f.v_from is not null then f.s[4] || ' -> ' || f.s[5] || case when f.vfmt = 'milli' then ' x10^3' else '' end
                    || ': ' || f.s[1]
                -- A difference or ratio with the two means it combines: '0.80 - 0.48 = 0.32'.
                when f.input_x is not null and f.input_y is not null then
                    f.s[10] || coalesce(printf(' (n = %d)', f.n_input_x), '')
                    || case when f.stat = 'ratio_of_means' then ' / ' else ' - ' end
                    || f.s[11] || coalesce(printf(' (n = %d)', f.n_input_y), '') || ' = ' || f.s[1]
                else f.s[1]
            end
            || case when f.ci_low is not null and f.test <> 'tiny' and f.id <> '002.F5.simpson' then ' [' || f.s[8] || ', ' || f.s[9] || ']' else '' end
    end as measured,
    f.ci_low,
    f.ci_high,
    f.ci_method,
    f.status,
    case f.status when 'holds' then true when 'does not hold' then false end as holds,
    case f.test
        when 'point' then 'interval within [' || f.s[6] || ', ' || f.s[7] || ']'
        when 'range' then
            case when f.low_max is not null or f.high_min is not null
                then 'every model''s interval within [' || f.s[6] || ', ' || f.s[7] || ']'
                else 'interval within [' || f.s[6] || ', ' || f.s[7] || ']' end
        when 'bound' then 'interval below ' || f.s[7]
        when 'tiny' then 'value below ' || f.s[7]
        when 'above' then 'interval above ' || f.s[6]
        when 'below' then 'interval below ' || f.s[7]
        when 'change' then 'interval ' || case when f.accept_lo is not null then 'above ' || f.s[6] else 'below ' || f.s[7] end
            || ' (a change of ' || printf('%.0f', 100 * p.margin_change) || '% of the seed''s)'
    end as criterion,
    f.accept_lo as accept_low,
    f.accept_hi as accept_high,
    f.seed_number,
    f.value as measured_value,
    f.value_lo as measured_low,
    f.value_hi as measured_high,
    -- Sums of counts are HUGEINT in DuckDB, which Arrow and parquet cannot hold as integers: BIGINT.
    f.n_models::bigint as n_models,
    f.n_heads::bigint as n_heads
from formatted f
cross join p
order by f.ord, coalesce(f.measured_scope, f.scope)

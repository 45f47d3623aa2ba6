-- One row per headline finding of seeds 002 and 003: the seed's value, the value measured on the ingested models, and whether the seed's claim holds here.
-- Seed: every numbered finding of seed 003 (combined Q/K PCA) and seed 002 (planar rotation), the numbers in their tables, and the numbers their figure tables quote.
-- Depends: params, scoped_heads, model_pool, taxonomy_fractions, pc_roles, explained_variance, positional_variance, qk_separability, drift_correlation, slope_ratio, bias_sign, plane_variance, bias_separation, lemma_check, rotation_planes, rotation_planes_summary, series_trajectory
-- How it is built: `claims` lists every finding once (what the seed says and how to test it);
-- `measured` computes each finding's value from the other views (one SELECT per finding, glued
-- with UNION ALL BY NAME so each supplies only the columns it has); the final SELECT joins them.
-- A finding whose data is not ingested keeps its row, with measured NULL and status 'no data'.
-- Family and overall values read the pooled models (view model_pool): a training series counts
-- once, by its latest checkpoint. Findings about training series get one row per ingested series.
-- Tests (the accepted interval is in `criterion`; tolerances in params):
--   near         |measured - seed| <= tol_abs                 (fractions and correlations)
--   factor       seed / tol_ratio <= measured <= seed * tol_ratio (unbounded magnitudes)
--   range        lo - tol_abs <= measured <= hi + tol_abs     (a seed range of fractions; per-model means when given)
--   range_factor lo / tol_ratio <= measured <= hi * tol_ratio (a seed range of magnitudes)
--   above        measured > lo;  below  measured < hi         (signs, orderings, directions of change)
--   change       a % change in the seed's direction, at least |seed| / tol_ratio
--   tiny         measured < params.lemma_max                  (round-off level)
-- Column id: Stable identifier: <seed>.<finding>.<what>, e.g. '003.F1.pos_var_q'.
-- Column seed: The seed document: '003' (combined Q/K PCA) or '002' (planar rotation).
-- Column finding: Where the seed states it: 'Finding N', 'figure NN' or 'Lemma'.
-- Column statement: What is measured, in words.
-- Column scope: Which heads: 'overall', a family, a group of models, or a series span (first -> last checkpoint compared).
-- Column seed_value: The seed's value as the seed states it.
-- Column measured: The value measured here, formatted like the seed's (ranges lo-hi, changes from -> to).
-- Column holds: Whether the seed's claim holds on the ingested data (see criterion); NULL without data.
-- Column status: 'holds', 'does not hold' or 'no data'.
-- Column criterion: The test: the interval the measured value must fall in.
-- Column accept_low: Lower end of the accepted interval (NULL: unbounded); exclusive for '>' criteria.
-- Column accept_high: Upper end of the accepted interval (NULL: unbounded); exclusive for '<' criteria.
-- Column seed_number: The seed's value as a number (fractions as 0-1, changes in %, ratios as ratios).
-- Column measured_value: The measured value as a number, on the scale of seed_number.
-- Column measured_low: For per-model ranges: the lowest model mean.
-- Column measured_high: For per-model ranges: the highest model mean.
-- Column n_models: Models behind the measured value.
-- Column n_heads: Heads behind the measured value.
with
-- Each view is read once, materialized: referenced inline at every use, the nested views
-- would be planned dozens of times over (seconds of planning even on empty tables).
pv as materialized (select * from positional_variance),
qs as materialized (select * from qk_separability),
ev as materialized (select * from explained_variance),
pr as materialized (select * from pc_roles),
tf as materialized (select * from taxonomy_fractions),
dc as materialized (select * from drift_correlation),
sr as materialized (select * from slope_ratio),
bsg as materialized (select * from bias_sign),
plv as materialized (select * from plane_variance),
bsp as materialized (select * from bias_separation),
lc as materialized (select * from lemma_check),
rps as materialized (select * from rotation_planes_summary),
st as materialized (select * from series_trajectory),
mp as materialized (select * from model_pool),
sh as materialized (select * from scoped_heads),
claims_raw(ord, id, seed, finding, statement, scope, seed_value, seed_number, test, lo, hi, fmt, vfmt) as (
    values
    -- seed 003: combined Q/K PCA -----------------------------------------------------------
    (100, '003.F1.pos_var_q', '003', 'Finding 1', 'Share of Q variance linear in position (sum over PCs of EV * r_q^2), mean over heads', 'overall', '27%', 0.27, 'near', null, null, 'pct', null),
    (101, '003.F1.pos_var_k', '003', 'Finding 1', 'Share of K variance linear in position (sum over PCs of EV * r_k^2), mean over heads', 'overall', '14%', 0.14, 'near', null, null, 'pct', null),
    (102, '003.F1.q_over_k', '003', 'Finding 1', 'Q variance is more positional than K variance: mean pos_var_q / mean pos_var_k', 'overall', '27% / 14% = 1.9x', 1.93, 'above', 1, null, 'x', null),
    (103, '003.F1.pc0_share_q', '003', 'Finding 1', 'PC0''s share of the positional Q variance, mean over heads', 'overall', '~90%', 0.90, 'near', null, null, 'pct', null),
    (104, '003.F1.pc0_share_k', '003', 'Finding 1', 'PC0''s share of the positional K variance, mean over heads', 'overall', '~74%', 0.74, 'near', null, null, 'pct', null),
    (110, '003.F1.small_qwen3.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '~32%', 0.32, 'near', null, null, 'pct', null),
    (111, '003.F1.small_qwen3.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '~9%', 0.09, 'near', null, null, 'pct', null),
    (112, '003.F1.large_qwen3.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', '~24%', 0.24, 'near', null, null, 'pct', null),
    (113, '003.F1.large_qwen3.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', '~14%', 0.14, 'near', null, null, 'pct', null),
    (114, '003.F1.llama3.2.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'family Llama 3.2', '~31%', 0.31, 'near', null, null, 'pct', null),
    (115, '003.F1.llama3.2.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'family Llama 3.2', '~20%', 0.20, 'near', null, null, 'pct', null),
    (116, '003.F1.ministral3.q', '003', 'Finding 1', 'Share of Q variance linear in position, mean over heads', 'family Ministral3', '~23%', 0.23, 'near', null, null, 'pct', null),
    (117, '003.F1.ministral3.k', '003', 'Finding 1', 'Share of K variance linear in position, mean over heads', 'family Ministral3', '~11%', 0.11, 'near', null, null, 'pct', null),
    (120, '003.F2.fisher', '003', 'Finding 2', 'Fisher ratio of Q vs K on PC0, mean over heads', 'overall', '~44', 44, 'factor', null, null, 'num', null),
    (121, '003.F2.accuracy', '003', 'Finding 2', 'Balanced linear Q-vs-K accuracy on (PC0, PC1): per-model means', 'overall', '98.5-100%', null, 'range', 0.985, 1.0, 'pct', null),
    (122, '003.F2.separation', '003', 'Finding 2', 'Q/K cluster separation |mu_q - mu_k| on PC0, mean over heads (units)', 'overall', '~47 units', 47, 'factor', null, null, 'num', null),
    (123, '003.F2.pc0_ev', '003', 'Finding 2, figure 05', 'PC0''s share of combined Q/K variance, mean over heads', 'overall', '~34%', 0.34, 'near', null, null, 'pct', null),
    (130, '003.F3.pc0_r_k', '003', 'Finding 3, figure 01', 'Mean PC0 r_k (positive: K''s position gradient runs with Q''s)', 'overall', '~0.48', 0.48, 'near', null, null, 'r', null),
    (131, '003.F3.abs_mu_q', '003', 'Finding 3', '|mu_Q| on PC0 (the Q cluster mean that amplifies K''s gradient), mean over heads (units)', 'overall', '20-30 units', null, 'range_factor', 20, 30, 'num', null),
    (132, '003.fig01.pc0_r_q', '003', 'figure 01', 'Mean PC0 r_q', 'overall', '~0.80', 0.80, 'near', null, null, 'r', null),
    (133, '003.fig01.q_dominant', '003', 'figure 01', 'On PC0 Q is more positional than K: mean r_q - mean |r_k|', 'overall', '0.80 vs 0.48', 0.32, 'above', 0, null, 'r', null),
    (140, '003.F4.mixed', '003', 'Finding 4', 'Share of heads that are mixed', 'overall', '55.4%', 0.554, 'near', null, null, 'pct', null),
    (141, '003.F4.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated (r_q > 0.7, |r_k| > 0.7)', 'overall', '26.6%', 0.266, 'near', null, null, 'pct', null),
    (142, '003.F4.q_positional', '003', 'Finding 4', 'Share of heads that are Q-positional (r_q > 0.7, |r_k| < 0.3)', 'overall', '14.2%', 0.142, 'near', null, null, 'pct', null),
    (143, '003.F4.content_focused', '003', 'Finding 4', 'Share of heads that are content-focused (r_q < 0.3, |r_k| < 0.3)', 'overall', '3.8%', 0.038, 'near', null, null, 'pct', null),
    (144, '003.F4.k_positional', '003', 'Finding 4', 'Share of heads that are K-positional (r_q < 0.3, |r_k| > 0.7)', 'overall', '<0.1%', 0.001, 'below', null, 0.01, 'pct', null),
    (150, '003.F4.llama3.2.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated', 'family Llama 3.2', '38-50%', null, 'range', 0.38, 0.50, 'pct', null),
    (151, '003.F4.llama3.2.mixed', '003', 'Finding 4', 'Share of heads that are mixed', 'family Llama 3.2', '46-52%', null, 'range', 0.46, 0.52, 'pct', null),
    (152, '003.F4.llama3.2.highest', '003', 'Finding 4', 'Llama 3.2 has the highest position-dominated share: its share minus the highest share of the other seed groups', 'family Llama 3.2', 'highest', null, 'above', 0, null, 'pct', null),
    (153, '003.F4.large_qwen3.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', '37-39%', null, 'range', 0.37, 0.39, 'pct', null),
    (154, '003.F4.small_qwen3.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '5-7%', null, 'range', 0.05, 0.07, 'pct', null),
    (155, '003.F4.small_qwen3.q_positional', '003', 'Finding 4', 'Share of heads that are Q-positional', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '39%', 0.39, 'near', null, null, 'pct', null),
    (156, '003.F4.ministral3.mixed', '003', 'Finding 4', 'Share of heads that are mixed', 'family Ministral3', '77-84%', null, 'range', 0.77, 0.84, 'pct', null),
    (157, '003.F4.ministral3.position_dominated', '003', 'Finding 4', 'Share of heads that are position-dominated', 'family Ministral3', '8-19%', null, 'range', 0.08, 0.19, 'pct', null),
    (160, '003.F5.r_q', '003', 'Finding 5', 'Mean PC0 r_q rises in early training: change from the first checkpoint to the last within the first 1.2M steps', 'series (SmolLM3-3B in the seed)', '0.67 -> 0.81', 0.14, 'above', 0, null, 'r', 'r'),
    (161, '003.F5.content_focused', '003', 'Finding 5', 'Content-focused share falls in early training: change', 'series (SmolLM3-3B in the seed)', '11% -> <1%', -0.10, 'below', null, 0, 'pct', 'pct'),
    (162, '003.F5.position_dominated', '003', 'Finding 5', 'Position-dominated share grows in early training: change', 'series (SmolLM3-3B in the seed)', '34% -> 55%', 0.21, 'above', 0, null, 'pct', 'pct'),
    (170, '003.F6.r_q', '003', 'Finding 6', 'Mean PC0 r_q rises in long-context training: change from the last checkpoint before it to the last checkpoint', 'series (SmolLM3-3B in the seed)', '0.81 -> 0.87', 0.06, 'above', 0, null, 'r', 'r'),
    (171, '003.F6.r_k', '003', 'Finding 6', 'Mean PC0 r_k drops in long-context training: change', 'series (SmolLM3-3B in the seed)', '0.54 -> 0.46', -0.08, 'below', null, 0, 'r', 'r'),
    (172, '003.F6.pc0_ev', '003', 'Finding 6', 'PC0 explained variance grows in long-context training: change', 'series (SmolLM3-3B in the seed)', '0.29 -> 0.34', 0.05, 'above', 0, null, 'r', 'r'),
    (173, '003.F6.position_dominated', '003', 'Finding 6', 'Position-dominated share grows in long-context training: change', 'series (SmolLM3-3B in the seed)', '58% -> 71%', 0.13, 'above', 0, null, 'pct', 'pct'),
    (180, '003.fig08.position_dominated', '003', 'figure 08', 'Position-dominated share grows over the whole series: change from the first to the last checkpoint', 'series (SmolLM3-3B in the seed)', '34% -> 71%', 0.37, 'above', 0, null, 'pct', 'pct'),
    (181, '003.fig09.pc0_ev', '003', 'figure 09', 'PC0 explained variance grows over the whole series: change', 'series (SmolLM3-3B in the seed)', '0.19 -> 0.34', 0.15, 'above', 0, null, 'r', 'r'),
    -- seed 002: planar rotation ------------------------------------------------------------
    (200, '002.F1.abs_r_k_a', '002', 'Finding 1', 'Mean |r_k| on the drift axis a', 'overall', '0.87', 0.87, 'near', null, null, 'r', null),
    (201, '002.F1.abs_r_q_a', '002', 'Finding 1', 'Mean |r_q| on the drift axis a', 'overall', '0.74', 0.74, 'near', null, null, 'r', null),
    (202, '002.F1.k_over_q', '002', 'Finding 1', 'K encodes position more strongly than Q on axis a (reversing PC0): mean |r_k_a| - mean |r_q_a|', 'overall', '0.87 vs 0.74', 0.13, 'above', 0, null, 'r', null),
    (203, '002.F1.slope_ratio', '002', 'Finding 1', 'Keys drift faster than queries: median |alpha_k| / |alpha_q|', 'overall', '1.83', 1.83, 'above', 1, null, 'x', null),
    (204, '002.F1.slope_ratio.small_qwen3', '002', 'figure 05', 'Median |alpha_k| / |alpha_q|', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', '~8', 8, 'factor', null, null, 'x', null),
    (205, '002.F1.slope_ratio.llama3.2', '002', 'figure 05', 'Median |alpha_k| / |alpha_q|', 'family Llama 3.2', '~2', 2, 'factor', null, null, 'x', null),
    (206, '002.F1.slope_ratio.ministral3', '002', 'figure 05', 'Median |alpha_k| / |alpha_q|', 'family Ministral3', '~1', 1, 'factor', null, null, 'x', null),
    (210, '002.F2.bias_positive', '002', 'Finding 2', 'Share of heads with a recency bias (bias_strength = mu_q_a * alpha_k > 0)', 'overall', '99.0%', 0.99, 'near', null, null, 'pct', null),
    (211, '002.F2.bias_negative', '002', 'Finding 2', 'Share of heads with a primacy bias (bias_strength < 0)', 'overall', '31 of 3,239 heads (1.0%)', 0.0096, 'near', null, null, 'pct', null),
    (212, '002.F2.mu_q_a_positive', '002', 'Finding 2', 'Share of heads whose queries sit on the positive side of axis a (mu_q_a > 0)', 'overall', '98.7%', 0.987, 'near', null, null, 'pct', null),
    (220, '002.F3.plane_var', '002', 'Finding 3', 'Share of Q+K variance in the {a, b} plane, mean over heads', 'overall', '38%', 0.38, 'near', null, null, 'pct', null),
    (221, '002.F3.plane_var_range', '002', 'Finding 3', 'Share of Q+K variance in the {a, b} plane: per-model means', 'overall', '29-46%', null, 'range', 0.29, 0.46, 'pct', null),
    (222, '002.F3.b_above_a', '002', 'Finding 3', 'Share of heads where axis b carries more variance than axis a', 'overall', '88%', 0.88, 'near', null, null, 'pct', null),
    (230, '002.lemma', '002', 'Lemma', 'Largest position correlation left in the complement of {a, b} (residual_pos_r)', 'overall', '7.3e-15', 7.3e-15, 'tiny', null, null, 'sci', null),
    (231, '002.F4.active_pairs', '002', 'Finding 4', 'Share of the complement SVD pairs that are active rotation planes: per-model means (RoPE layers)', 'overall', '18-29 of 30 (60-97%)', null, 'range', 0.60, 0.967, 'pct', null),
    (232, '002.F4.active_var_share', '002', 'Finding 4', 'Share of complement variance in active rotation planes: per-model means (RoPE layers)', 'overall', '44-89%', null, 'range', 0.44, 0.89, 'pct', null),
    (233, '002.F4.ring_accuracy', '002', 'Finding 4', 'Balanced linear Q-vs-K accuracy on active rotation planes, mean (Q and K share the rings)', 'overall', '~50%', 0.50, 'near', null, null, 'pct', null),
    (234, '002.F4.max_angle_r', '002', 'Finding 4', 'Largest circular-linear correlation of a complement pair''s angle with position', 'overall', 'up to 1.0', 1.0, 'near', null, null, 'r', null),
    (240, '002.F5.overall', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength over all heads', 'overall', '+0.48', 0.48, 'above', 0, null, 'r', null),
    (241, '002.F5.llama3.2', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength within the family (reverses the pooled sign)', 'family Llama 3.2', '-0.65', -0.65, 'below', null, 0, 'r', null),
    (242, '002.F5.qwen3', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength within the family (high-bias heads have high separation)', 'family Qwen3', 'positive', null, 'above', 0, null, 'r', null),
    (243, '002.F5.ministral3', '002', 'Finding 5', 'Pearson r of bias_strength with separation_strength within the family (no correlation)', 'family Ministral3', '~0', 0, 'near', null, null, 'r', null),
    (244, '002.F5.simpson', '002', 'Finding 5', 'Families whose within-family r has the opposite sign of the pooled r (Simpson''s paradox)', 'families', 'Llama 3.2 reverses', null, 'above', 0, null, 'count', null),
    (250, '002.F6.abs_r_k_a_first', '002', 'Finding 6', 'Mean |r_k_a| at the first checkpoint (step 40k in the seed)', 'series (SmolLM3-3B in the seed)', '0.86', 0.86, 'near', null, null, 'r', null),
    (251, '002.F6.init_mu_q_a', '002', 'Finding 6', 'mu_q_a grows in early training: ratio of means, last checkpoint within the first 1.2M steps / first', 'series (SmolLM3-3B in the seed)', 'doubles (2x)', 2, 'factor', null, null, 'x', 'num'),
    (252, '002.F6.init_bias', '002', 'Finding 6', 'bias_strength grows in early training: % change of the mean (x10^3)', 'series (SmolLM3-3B in the seed)', '+75%', 75, 'change', null, null, 'pctchg', 'milli'),
    (253, '002.F6.lc_bias', '002', 'Finding 6', 'bias_strength collapses in long-context training: % change of the mean (x10^3)', 'series (SmolLM3-3B in the seed)', '-91% (19.4 -> 1.8 x10^3)', -91, 'change', null, null, 'pctchg', 'milli'),
    (254, '002.F6.lc_alpha_k', '002', 'Finding 6', 'alpha_k collapses in long-context training: % change of the mean (x10^3)', 'series (SmolLM3-3B in the seed)', '-93% (4.08 -> 0.27 x10^3)', -93, 'change', null, null, 'pctchg', 'milli'),
    (255, '002.F6.lc_mu_q_a', '002', 'Finding 6', 'mu_q_a grows in long-context training: % change of the mean', 'series (SmolLM3-3B in the seed)', '+43% (4.65 -> 6.64)', 43, 'change', null, null, 'pctchg', 'num'),
    (256, '002.F6.lc_abs_r_k_a', '002', 'Finding 6', '|r_k_a| stays near-perfect in long-context training: change of the mean', 'series (SmolLM3-3B in the seed)', '0.918 -> 0.905', -0.013, 'near', null, null, 'f3', 'f3'),
    (257, '002.F6.lc_separation', '002', 'Finding 6', 'separation_strength grows in long-context training: % change of the mean', 'series (SmolLM3-3B in the seed)', '+10%', 10, 'change', null, null, 'pctchg', 'f3'),
    (258, '002.F6.lc_plane_var', '002', 'Finding 6', 'plane_var_fraction grows in long-context training: % change of the mean', 'series (SmolLM3-3B in the seed)', '+14%', 14, 'change', null, null, 'pctchg', 'pct')
),
claims as (
    select
        ord, id, seed, finding, statement, scope, seed_value,
        seed_number::double as seed_number, test, lo::double as lo, hi::double as hi, fmt,
        coalesce(vfmt, fmt) as vfmt
    from claims_raw
),
-- The seed's model groups (seed 003 Finding 1 table, Finding 4, seed 002 figure 05).
seed_groups(grp, label, family, models) as (
    values
    ('small_qwen3', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', 'Qwen3', ['qwen3-0.6b', 'qwen3-1.7b']),
    ('large_qwen3', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', 'Qwen3', ['qwen3-4b', 'qwen3-8b', 'qwen3-14b']),
    ('llama3.2', 'family Llama 3.2', 'Llama 3.2', null),
    ('ministral3', 'family Ministral3', 'Ministral3', null)
),
gm as (
    select
        g.grp,
        g.label,
        count(distinct s.source_model) as n_models,
        count(*) as n_heads,
        avg(s.pos_var_q) as pos_var_q,
        avg(s.pos_var_k) as pos_var_k,
        median(abs(s.alpha_k) / nullif(abs(s.alpha_q), 0)) as slope_ratio,
        count(*) filter (where s.category = 'position-dominated') / nullif(count(s.category), 0) as position_dominated,
        count(*) filter (where s.category = 'q-positional') / nullif(count(s.category), 0) as q_positional,
        count(*) filter (where s.category = 'mixed') / nullif(count(s.category), 0) as mixed
    from seed_groups g
    join sh s
        on s.scope = 'model' and s.pooled and s.family = g.family
        and (g.models is null or list_contains(g.models, s.model))
    group by g.grp, g.label
),
-- Model-scope rows of pooled models, for per-model ranges.
pooled_models as (
    select model from mp where pooled
),
rope_model_planes as (
    select r.*
    from rps r
    where r.scope = 'model' and r.layers = 'rope' and r.n_heads_complement > 0
        and r.model in (select model from pooled_models)
),
tax as (
    select * from tf where scope = 'overall'
),
-- Series spans: first checkpoint, end of early training, last one before long-context training, last.
marks as (
    select
        t.series,
        arg_min(t.model, t.series_order) as first_model,
        arg_max(t.model, t.series_order) filter (where not t.long_context and t.step <= p.early_end_step) as early_model,
        arg_max(t.model, t.series_order) filter (where not t.long_context) as baseline_model,
        arg_max(t.model, t.series_order) as final_model,
        arg_max(t.long_context, t.series_order) as final_is_long_context
    from st t
    cross join params p
    group by t.series
),
spans as (
    select series, 'first' as span, first_model as from_model, first_model as to_model from marks
    union all
    select series, 'early', first_model, early_model from marks where early_model <> first_model
    union all
    select series, 'long_context', baseline_model, final_model from marks where final_is_long_context and baseline_model is not null
    union all
    select series, 'all', first_model, final_model from marks where final_model <> first_model
),
chg as (
    select
        s.span,
        'series ' || s.series || ': ' || s.from_model || case when s.span = 'first' then '' else ' -> ' || s.to_model end as scope,
        a as f,
        b as t,
        b.n_heads as n_heads
    from spans s
    join st a on a.model = s.from_model
    join st b on b.model = s.to_model
),
measured as (
    -- seed 003 ----------------------------------------------------------------------------
    select '003.F1.pos_var_q' as id, 'overall' as scope, mean_pos_var_q as value, n_models, n_heads from pv where scope = 'overall'
    union all by name
    select '003.F1.pos_var_k' as id, 'overall' as scope, mean_pos_var_k as value, n_models, n_heads from pv where scope = 'overall'
    union all by name
    select '003.F1.q_over_k' as id, 'overall' as scope, mean_pos_var_q / nullif(mean_pos_var_k, 0) as value, n_models, n_heads from pv where scope = 'overall'
    union all by name
    select '003.F1.pc0_share_q' as id, 'overall' as scope, mean_pc0_pos_share_q as value, n_models, n_heads from pv where scope = 'overall'
    union all by name
    select '003.F1.pc0_share_k' as id, 'overall' as scope, mean_pc0_pos_share_k as value, n_models, n_heads from pv where scope = 'overall'
    union all by name
    select '003.F1.' || grp || '.q' as id, label as scope, pos_var_q as value, n_models, n_heads from gm
    union all by name
    select '003.F1.' || grp || '.k' as id, label as scope, pos_var_k as value, n_models, n_heads from gm
    union all by name
    select '003.F2.fisher' as id, 'overall' as scope, mean_fisher_pc0 as value, n_models, n_heads from qs where scope = 'overall'
    union all by name
    select
        '003.F2.accuracy' as id, 'overall' as scope, q.mean_accuracy_pc01 as value,
        (select min(m.mean_accuracy_pc01) from qs m where m.scope = 'model' and m.model in (select model from pooled_models)) as value_lo,
        (select max(m.mean_accuracy_pc01) from qs m where m.scope = 'model' and m.model in (select model from pooled_models)) as value_hi,
        q.n_models, q.n_heads
    from qs q where q.scope = 'overall'
    union all by name
    select '003.F2.separation' as id, 'overall' as scope, mean_separation_pc0 as value, n_models, n_heads from qs where scope = 'overall'
    union all by name
    select '003.F2.pc0_ev' as id, 'overall' as scope, mean_explained_variance as value, n_models, n_heads from ev where scope = 'overall' and pc = 0
    union all by name
    select '003.F3.pc0_r_k' as id, 'overall' as scope, mean_r_k as value, n_models, n_heads from pr where scope = 'overall' and pc = 0
    union all by name
    select '003.F3.abs_mu_q' as id, 'overall' as scope, mean_abs_mu_q_pc0 as value, n_models, n_heads from qs where scope = 'overall'
    union all by name
    select '003.fig01.pc0_r_q' as id, 'overall' as scope, mean_r_q as value, n_models, n_heads from pr where scope = 'overall' and pc = 0
    union all by name
    select '003.fig01.q_dominant' as id, 'overall' as scope, mean_r_q - mean_abs_r_k as value, n_models, n_heads from pr where scope = 'overall' and pc = 0
    union all by name
    select '003.F4.' || replace(category, '-', '_') as id, 'overall' as scope, fraction as value, n_models, n_classified as n_heads from tax
    union all by name
    select '003.F4.' || grp || '.position_dominated' as id, label as scope, position_dominated as value, n_models, n_heads from gm
    union all by name
    select '003.F4.' || grp || '.mixed' as id, label as scope, mixed as value, n_models, n_heads from gm where grp in ('llama3.2', 'ministral3')
    union all by name
    select '003.F4.' || grp || '.q_positional' as id, label as scope, q_positional as value, n_models, n_heads from gm where grp = 'small_qwen3'
    union all by name
    select
        '003.F4.llama3.2.highest' as id, l.label as scope,
        l.position_dominated - (select max(o.position_dominated) from gm o where o.grp <> 'llama3.2') as value,
        l.n_models, l.n_heads
    from gm l where l.grp = 'llama3.2'
    union all by name
    select '003.F5.r_q' as id, scope, t.mean_r_q - f.mean_r_q as value, f.mean_r_q as v_from, t.mean_r_q as v_to, n_heads from chg where span = 'early'
    union all by name
    select '003.F5.content_focused' as id, scope, t.frac_content_focused - f.frac_content_focused as value, f.frac_content_focused as v_from, t.frac_content_focused as v_to, n_heads from chg where span = 'early'
    union all by name
    select '003.F5.position_dominated' as id, scope, t.frac_position_dominated - f.frac_position_dominated as value, f.frac_position_dominated as v_from, t.frac_position_dominated as v_to, n_heads from chg where span = 'early'
    union all by name
    select '003.F6.r_q' as id, scope, t.mean_r_q - f.mean_r_q as value, f.mean_r_q as v_from, t.mean_r_q as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '003.F6.r_k' as id, scope, t.mean_r_k - f.mean_r_k as value, f.mean_r_k as v_from, t.mean_r_k as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '003.F6.pc0_ev' as id, scope, t.mean_explained_variance - f.mean_explained_variance as value, f.mean_explained_variance as v_from, t.mean_explained_variance as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '003.F6.position_dominated' as id, scope, t.frac_position_dominated - f.frac_position_dominated as value, f.frac_position_dominated as v_from, t.frac_position_dominated as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '003.fig08.position_dominated' as id, scope, t.frac_position_dominated - f.frac_position_dominated as value, f.frac_position_dominated as v_from, t.frac_position_dominated as v_to, n_heads from chg where span = 'all'
    union all by name
    select '003.fig09.pc0_ev' as id, scope, t.mean_explained_variance - f.mean_explained_variance as value, f.mean_explained_variance as v_from, t.mean_explained_variance as v_to, n_heads from chg where span = 'all'
    -- seed 002 ----------------------------------------------------------------------------
    union all by name
    select '002.F1.abs_r_k_a' as id, 'overall' as scope, mean_abs_r_k_a as value, n_models, n_heads from dc where scope = 'overall'
    union all by name
    select '002.F1.abs_r_q_a' as id, 'overall' as scope, mean_abs_r_q_a as value, n_models, n_heads from dc where scope = 'overall'
    union all by name
    select '002.F1.k_over_q' as id, 'overall' as scope, mean_abs_r_k_a - mean_abs_r_q_a as value, n_models, n_heads from dc where scope = 'overall'
    union all by name
    select '002.F1.slope_ratio' as id, 'overall' as scope, median_ratio as value, n_models, n_heads from sr where scope = 'overall'
    union all by name
    select '002.F1.slope_ratio.' || grp as id, label as scope, slope_ratio as value, n_models, n_heads from gm where grp <> 'large_qwen3'
    union all by name
    select '002.F2.bias_positive' as id, 'overall' as scope, share_positive as value, n_models, n_heads from bsg where scope = 'overall'
    union all by name
    select
        '002.F2.bias_negative' as id, 'overall' as scope, n_negative / nullif(n_heads, 0) as value,
        printf('%d of %d heads (%.1f%%)', n_negative, n_heads, 100 * n_negative / nullif(n_heads, 0)) as text,
        n_models, n_heads
    from bsg where scope = 'overall' and n_heads > 0
    union all by name
    select '002.F2.mu_q_a_positive' as id, 'overall' as scope, share_mu_q_a_positive as value, n_models, n_heads from bsg where scope = 'overall'
    union all by name
    select '002.F3.plane_var' as id, 'overall' as scope, mean_plane_var_fraction as value, n_models, n_heads from plv where scope = 'overall'
    union all by name
    select
        '002.F3.plane_var_range' as id, 'overall' as scope, v.mean_plane_var_fraction as value,
        (select min(m.mean_plane_var_fraction) from plv m where m.scope = 'model' and m.model in (select model from pooled_models)) as value_lo,
        (select max(m.mean_plane_var_fraction) from plv m where m.scope = 'model' and m.model in (select model from pooled_models)) as value_hi,
        v.n_models, v.n_heads
    from plv v where v.scope = 'overall'
    union all by name
    select '002.F3.b_above_a' as id, 'overall' as scope, share_b_above_a as value, n_models, n_heads from plv where scope = 'overall'
    union all by name
    select '002.lemma' as id, 'overall' as scope, max_residual_pos_r as value, n_models, n_heads from lc where scope = 'overall'
    union all by name
    select
        '002.F4.active_pairs' as id, 'overall' as scope,
        sum(mean_active_share_of_pairs * n_heads_complement) / sum(n_heads_complement) as value,
        min(mean_active_share_of_pairs) as value_lo, max(mean_active_share_of_pairs) as value_hi,
        count(*) as n_models, sum(n_heads_complement) as n_heads
    from rope_model_planes having count(*) > 0
    union all by name
    select
        '002.F4.active_var_share' as id, 'overall' as scope,
        sum(mean_active_var_share * n_heads_complement) / sum(n_heads_complement) as value,
        min(mean_active_var_share) as value_lo, max(mean_active_var_share) as value_hi,
        count(*) as n_models, sum(n_heads_complement) as n_heads
    from rope_model_planes having count(*) > 0
    union all by name
    select '002.F4.ring_accuracy' as id, 'overall' as scope, mean_active_qk_accuracy as value, n_models, n_heads_complement as n_heads
    from rps where scope = 'overall' and layers = 'rope' and n_heads_complement > 0
    union all by name
    select '002.F4.max_angle_r' as id, 'overall' as scope, max(max_angle_r) as value, max(n_models) as n_models, sum(n_heads_complement) as n_heads
    from rps where scope = 'overall' and n_heads_complement > 0 having count(*) > 0
    union all by name
    select '002.F5.overall' as id, 'overall' as scope, r as value, n_models, n_heads from bsp where scope = 'overall'
    union all by name
    select '002.F5.llama3.2' as id, 'family Llama 3.2' as scope, r as value, n_models, n_heads from bsp where scope = 'family' and family = 'Llama 3.2'
    union all by name
    select '002.F5.qwen3' as id, 'family Qwen3' as scope, r as value, n_models, n_heads from bsp where scope = 'family' and family = 'Qwen3'
    union all by name
    select '002.F5.ministral3' as id, 'family Ministral3' as scope, r as value, n_models, n_heads from bsp where scope = 'family' and family = 'Ministral3'
    union all by name
    select
        '002.F5.simpson' as id,
        printf('%d families', count(r)) as scope,
        count(*) filter (where reverses) as value,
        coalesce(string_agg(printf('%s (r = %.2f vs %.2f pooled)', family, r, overall_r), ', ') filter (where reverses), 'none') as text,
        sum(n_models) as n_models, sum(n_heads) as n_heads
    from bsp
    where scope = 'family'
    having count(r) > 0 and max(overall_r) is not null
    union all by name
    select '002.F6.abs_r_k_a_first' as id, scope, t.mean_abs_r_k_a as value, n_heads from chg where span = 'first'
    union all by name
    select '002.F6.init_mu_q_a' as id, scope, t.mean_mu_q_a / nullif(f.mean_mu_q_a, 0) as value, f.mean_mu_q_a as v_from, t.mean_mu_q_a as v_to, n_heads from chg where span = 'early'
    union all by name
    select '002.F6.init_bias' as id, scope, 100 * (t.mean_bias_strength - f.mean_bias_strength) / nullif(abs(f.mean_bias_strength), 0) as value, f.mean_bias_strength as v_from, t.mean_bias_strength as v_to, n_heads from chg where span = 'early'
    union all by name
    select '002.F6.lc_bias' as id, scope, 100 * (t.mean_bias_strength - f.mean_bias_strength) / nullif(abs(f.mean_bias_strength), 0) as value, f.mean_bias_strength as v_from, t.mean_bias_strength as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '002.F6.lc_alpha_k' as id, scope, 100 * (t.mean_alpha_k - f.mean_alpha_k) / nullif(abs(f.mean_alpha_k), 0) as value, f.mean_alpha_k as v_from, t.mean_alpha_k as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '002.F6.lc_mu_q_a' as id, scope, 100 * (t.mean_mu_q_a - f.mean_mu_q_a) / nullif(abs(f.mean_mu_q_a), 0) as value, f.mean_mu_q_a as v_from, t.mean_mu_q_a as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '002.F6.lc_abs_r_k_a' as id, scope, t.mean_abs_r_k_a - f.mean_abs_r_k_a as value, f.mean_abs_r_k_a as v_from, t.mean_abs_r_k_a as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '002.F6.lc_separation' as id, scope, 100 * (t.mean_separation_strength - f.mean_separation_strength) / nullif(abs(f.mean_separation_strength), 0) as value, f.mean_separation_strength as v_from, t.mean_separation_strength as v_to, n_heads from chg where span = 'long_context'
    union all by name
    select '002.F6.lc_plane_var' as id, scope, 100 * (t.mean_plane_var_fraction - f.mean_plane_var_fraction) / nullif(abs(f.mean_plane_var_fraction), 0) as value, f.mean_plane_var_fraction as v_from, t.mean_plane_var_fraction as v_to, n_heads from chg where span = 'long_context'
),
judged as (
    select
        c.*,
        m.scope as measured_scope,
        m.value::double as value,
        m.value_lo::double as value_lo,
        m.value_hi::double as value_hi,
        m.v_from::double as v_from,
        m.v_to::double as v_to,
        m.text,
        m.n_models,
        m.n_heads,
        case c.test
            when 'near' then c.seed_number - p.tol_abs
            when 'factor' then c.seed_number / p.tol_ratio
            when 'range' then c.lo - p.tol_abs
            when 'range_factor' then c.lo / p.tol_ratio
            when 'above' then c.lo
            when 'change' then case when c.seed_number > 0 then c.seed_number / p.tol_ratio end
        end as accept_lo,
        case c.test
            when 'near' then c.seed_number + p.tol_abs
            when 'factor' then c.seed_number * p.tol_ratio
            when 'range' then c.hi + p.tol_abs
            when 'range_factor' then c.hi * p.tol_ratio
            when 'below' then c.hi
            when 'tiny' then p.lemma_max
            when 'change' then case when c.seed_number < 0 then c.seed_number / p.tol_ratio end
        end as accept_hi,
        c.test in ('above', 'below', 'tiny') as strict
    from claims c
    cross join params p
    left join measured m on m.id = c.id
),
bounded as (
    -- Shares cannot leave [0, 1] nor correlations [-1, 1]: clip the accepted interval to match.
    select j.* replace (
        case
            when j.fmt = 'pct' and j.test in ('near', 'range') then greatest(j.accept_lo, 0)
            when j.fmt = 'r' and j.test = 'near' then greatest(j.accept_lo, -1)
            else j.accept_lo
        end as accept_lo,
        case
            when j.fmt = 'pct' and j.test in ('near', 'range') then least(j.accept_hi, 1)
            when j.fmt = 'r' and j.test = 'near' then least(j.accept_hi, 1)
            else j.accept_hi
        end as accept_hi
    )
    from judged j
),
formatted as (
    select
        j.*,
        -- One formatter for every number of the row, so a finding's numbers all read alike.
        list_transform(
            [
                {'v': j.value, 'f': j.fmt}, {'v': j.value_lo, 'f': j.fmt}, {'v': j.value_hi, 'f': j.fmt},
                {'v': j.v_from, 'f': j.vfmt}, {'v': j.v_to, 'f': j.vfmt},
                {'v': j.accept_lo, 'f': j.fmt}, {'v': j.accept_hi, 'f': j.fmt}
            ],
            lambda e: case e.f
                when 'pct' then printf('%.1f%%', 100 * e.v)
                when 'r' then printf('%.2f', e.v)
                when 'f3' then printf('%.3f', e.v)
                when 'num' then printf('%.1f', e.v)
                when 'x' then printf('%.2fx', e.v)
                when 'sci' then printf('%.1e', e.v)
                when 'pctchg' then printf('%+.0f%%', e.v)
                when 'milli' then printf('%.2f', 1000 * e.v)
                when 'count' then printf('%d', e.v::bigint)
            end
        ) as s
    from bounded j
)
select
    f.id,
    f.seed,
    f.finding,
    f.statement,
    coalesce(f.measured_scope, f.scope) as scope,
    f.seed_value,
    case
        when f.value is null and f.value_lo is null then null
        when f.text is not null then f.text
        when f.value_lo is not null then f.s[2] || '-' || f.s[3] || ' (mean ' || f.s[1] || ')'
        when f.v_from is not null then f.s[4] || ' -> ' || f.s[5] || case when f.vfmt = 'milli' then ' x10^3' else '' end
            || ': ' || f.s[1]
        else f.s[1]
    end as measured,
    case
        when f.value is null and f.value_lo is null then null
        else (f.accept_lo is null or coalesce(f.value_lo, f.value) > f.accept_lo
                or (not f.strict and coalesce(f.value_lo, f.value) = f.accept_lo))
            and (f.accept_hi is null or coalesce(f.value_hi, f.value) < f.accept_hi
                or (not f.strict and coalesce(f.value_hi, f.value) = f.accept_hi))
    end as holds,
    case
        when f.value is null and f.value_lo is null then 'no data'
        when holds then 'holds'
        else 'does not hold'
    end as status,
    case
        when f.accept_lo is not null and f.accept_hi is not null then 'measured in [' || f.s[6] || ', ' || f.s[7] || ']'
            || case when f.value_lo is not null then ' for every model' else '' end
        when f.accept_lo is not null then 'measured ' || case when f.strict then '> ' else '>= ' end || f.s[6]
        when f.accept_hi is not null then 'measured ' || case when f.strict then '< ' else '<= ' end || f.s[7]
    end as criterion,
    f.accept_lo as accept_low,
    f.accept_hi as accept_high,
    f.seed_number,
    f.value as measured_value,
    f.value_lo as measured_low,
    f.value_hi as measured_high,
    f.n_models,
    f.n_heads
from formatted f
order by f.ord, coalesce(f.measured_scope, f.scope)

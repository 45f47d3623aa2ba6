-- The numbers every finding rests on: one row per head (per head and checkpoint for a series change) and finding, with the statistic that combines them.
-- Seed: the per-head values behind every number of the `findings` view.
-- Depends: params, model_pool, scoped_heads, rotation_planes, sink_heads, sink_texts, heads, frequency_usage
-- `findings` computes each measured value from these rows with `stat`, and the intervals in
-- `finding_intervals` are computed from the same rows (qkdb/warehouse/intervals.py), so the two
-- can never disagree on which heads count. Scopes are the strings `findings` shows: 'overall'
-- (the pooled models, see model_pool), a seed group or family, or a series span.
-- stat: mean, share (x is 0/1), median, ratio_of_means (mean x / mean y), diff_of_means
-- (mean x - mean y), corr (Pearson of x, y), max (among heads), exact_max (the same, for a per-head identity: no sampling), model_range_mean / model_range_share (the
-- value is the pooled mean, the claim is about every model's own mean or share), lead (mean of
-- the arm 1 group minus the largest mean of the arm 0 groups), and for series spans arm_diff,
-- arm_ratio, arm_pct (mean at arm 1, the later checkpoint, against arm 0, the earlier one:
-- difference, ratio, % change of the mean).
-- cluster is the model, or the series for a change between two of its checkpoints (heads paired
-- by layer and key head). Inside a cluster the resampling unit is the key-head group (kv_group:
-- query heads that share a key head are near-copies), kept whole, in strata of layers
-- (docs/findings.md, "How each interval is computed").
-- estimand: 'these models' (the ingested models as they are: only their heads are resampled) or
-- 'models like these' (the population of models the pooled ones stand for: the models are
-- resampled); the seeds' overall claims are about models in general, so they are the latter as
-- soon as more than one model is pooled.
-- x_min, x_max bound the head's value (an interval never leaves what the statistic can be).
-- x_bias, y_bias: how far the head's x (y) reads off its value at infinitely many vectors, as
-- measured on simulated heads (benchmarks/calibration.py --bias; docs/findings.md lists it): an
-- envelope c * head_dim / n, n the head's mean vector count per kind. The interval is widened by
-- what it moves the measured value; NULL where no bias was measured.
-- Column id: The finding (findings.id).
-- Column scope: The finding's scope, as findings.scope shows it.
-- Column stat: How the rows combine into the measured value (see above).
-- Column model: The model the head belongs to.
-- Column cluster: The resampling unit above the head (model, or series for a change).
-- Column unit: The head within its cluster ('layer.head').
-- Column grp: Group of the head for stat 'lead' (a seed group), else NULL.
-- Column arm: 0 (earlier checkpoint, or the other groups) or 1 (later checkpoint, or the leading group); NULL when the stat has no arms.
-- Column layer: The head's layer (the stratum of its key-head group).
-- Column kv_group: The head's key-head group within its cluster ('layer.kv_head'): the resampling unit.
-- Column estimand: 'these models' or 'models like these' (see above).
-- Column x: The head's value (NULL: the head has none and does not count).
-- Column y: The second value of ratio_of_means, diff_of_means and corr.
-- Column x_min: Smallest value x can take (NULL: unbounded).
-- Column x_max: Largest value x can take (NULL: unbounded).
-- Column x_bias: Expected finite-vector bias of x at the head's vector count (NULL: none measured).
-- Column y_bias: The same for y.
-- Column n_vec: Vectors behind x when x is itself a share of vectors (a Q-vs-K accuracy: query plus key vectors), else NULL.
-- Column x_text_var: For a mean whose heads were all measured on the same texts (the sink rates): the variance the texts add to the model's mean (var over texts of their mean / texts), the same on every row of the model; NULL elsewhere.
with
-- Each head with its resampling unit and its finite-vector bias per metric, c * d / n (c measured by
-- benchmarks/calibration.py --bias on simulated heads: the largest |bias| * n / d over 256 to 4,096
-- vectors per kind at d = 32 and 64, rounded up; docs/findings.md has the table). None for the
-- taxonomy shares: a head's bias moves it across a threshold only near it.
sh as materialized (
    select
        s.*,
        printf('%d.%d', s.layer, coalesce(s.kv_head, s.head)) as g,
        s.head_dim / ((s.n_q + s.n_k) / 2.0) as dn
    from scoped_heads s
),
fvb as materialized (
    select
        *,
        -0.10 * dn as b_abs_r_q_a,
        -0.09 * dn as b_abs_r_k_a,
        -0.15 * dn * abs(alpha_k) / nullif(abs(alpha_q), 0) as b_slope_ratio,  -- (relative: 0.15 of the ratio)
        -0.04 * dn as b_pos_var_q,
        0.045 * dn as b_pos_var_k,
        -0.13 * dn as b_pc0_share_q,
        -0.24 * dn as b_pc0_share_k,
        0.006 * dn as b_pc0_ev,
        0.17 * dn as b_separation,
        0.085 * dn as b_abs_mu_q,
        -0.035 * dn as b_r_q,
        -0.05 * dn as b_r_k,
        0.014 * dn as b_plane_var
    from sh
),
n_pooled as (select count(distinct source_model) as n from sh where scope = 'overall'),
pooled as materialized (
    select
        s.*, s.source_model as m, printf('%d.%d', s.layer, s.head) as u,
        case when np.n > 1 then 'models like these' else 'these models' end as est
    from fvb s
    cross join n_pooled np
    where s.scope = 'overall'
),
-- Each pooled head's plasticity (the empirical estimator, the primary one) and measured logit slope.
plas as materialized (
    select p.*, pl.ap_overall, pl.ap_drop, rc.logit_slope, rc.predicted_slope
    from pooled p
    left join plasticity pl on pl.model = p.source_model and pl.layer = p.layer and pl.head = p.head
        and pl.estimator = 'empirical'
    left join recency rc on rc.model = p.source_model and rc.layer = p.layer and rc.head = p.head
),
-- Each pooled head's attention sink (captures with a softmax normaliser only: x is NULL elsewhere).
sinks as materialized (
    select p.*, sk.is_sink, sk.bias_share, sk.sink_text_share
    from pooled p
    join sink_heads sk on sk.model = p.source_model and sk.layer = p.layer and sk.head = p.head
        and sk.input_kind = 'natural'
),
-- The sink rates' second source of variance: every head is measured on the same texts, so a text
-- on which many heads sink (or none) moves every head's x at once. Per model and input kind, the
-- variance of the rate's mean over texts: var over texts of the text's share of sink heads / texts
-- (the heads' own spread is the key-head groups'; the two are crossed, and their sum is a little
-- conservative: the pigeonhole bootstrap's variance, Owen 2007).
sink_text_var as materialized (
    select model, input_kind, var_samp(rate) / count(*) as v
    from (select model, input_kind, example_id, avg(is_sink::int) as rate from sink_texts group by all)
    group by all
    having count(*) > 1
),
-- Each head of a capture of repeated tokens (not pooled: Gu et al.'s control), in a model with RoPE:
-- their Propositions 1-4 prove no sink there (a model without RoPE may have learned absolute
-- positions, as GPT-2 does, which keep one: not applicable).
sinks_repeated as materialized (
    select sk.model as m, printf('%d.%d', sk.layer, sk.head) as u, printf('%d.%d', sk.layer, h.kv_head) as g,
        sk.layer, sk.sink_text_share
    from sink_heads sk
    join models mo on mo.model = sk.model and mo.rope = 'rotary'
    join heads h on h.model = sk.model and h.layer = sk.layer and h.head = sk.head
    where sk.input_kind = 'repeated'
),
-- Each pooled head's low-band excess (SPEC §4.8): RoPE layers with a known critical plane only (the
-- value is the same on every plane's row of the head: the row of plane 0 carries it).
low_band as materialized (
    select p.*, fu.low_band_excess
    from pooled p
    join frequency_usage fu on fu.model = p.source_model and fu.layer = p.layer and fu.head = p.head and fu.j = 0
    where fu.low_band_excess is not null
),
-- The seed's model groups (seed 003 Finding 1 table, Finding 4, seed 002 figure 05).
seed_groups(grp, label, family, models) as (
    values
    ('small_qwen3', 'small Qwen3 (qwen3-0.6b, qwen3-1.7b)', 'Qwen3', ['qwen3-0.6b', 'qwen3-1.7b']),
    ('large_qwen3', 'large Qwen3 (qwen3-4b, qwen3-8b, qwen3-14b)', 'Qwen3', ['qwen3-4b', 'qwen3-8b', 'qwen3-14b']),
    ('llama3.2', 'family Llama 3.2', 'Llama 3.2', null),
    ('ministral3', 'family Ministral3', 'Ministral3', null)
),
gh as materialized (
    select g.grp, g.label, s.*, s.source_model as m, printf('%d.%d', s.layer, s.head) as u
    from seed_groups g
    join fvb s
        on s.scope = 'model' and s.pooled and s.family = g.family
        and (g.models is null or list_contains(g.models, s.model))
),
fam as materialized (
    select s.*, s.source_model as m, printf('%d.%d', s.layer, s.head) as u from fvb s where s.scope = 'family'
),
-- Rotation planes of the pooled heads; the seed's counts are over RoPE layers (not NoPE ones).
rp as materialized (
    select
        r.*, printf('%d.%d', r.layer, r.head) as u, printf('%d.%d', r.layer, coalesce(h.kv_head, r.head)) as g,
        h.n_q + h.n_k as n_vec,
        case when (select n from n_pooled) > 1 then 'models like these' else 'these models' end as est
    from rotation_planes r
    join model_pool mp on mp.model = r.model and mp.pooled
    left join heads h on h.model = r.model and h.layer = r.layer and h.head = r.head
    where r.n_pairs is not null
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
    from model_pool t
    cross join params p
    where t.series is not null
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
-- Heads of the two checkpoints of each span: arm 0 the earlier, arm 1 the later one.
sp as materialized (
    select
        s.span,
        s.series,
        'series ' || s.series || ': ' || s.from_model || case when s.span = 'first' then '' else ' -> ' || s.to_model end as scope,
        case when h.model = s.to_model then 1 else 0 end as arm,
        h.* exclude (scope, series),
        printf('%d.%d', h.layer, h.head) as u
    from spans s
    join fvb h on h.scope = 'model' and (h.model = s.from_model or h.model = s.to_model)
    -- The 'first' span has one checkpoint: one arm.
    where s.span <> 'first' or h.model = s.to_model
),
-- The series spans' heads with their plasticity (empirical).
spp as materialized (
    select s.*, pl.ap_overall, pl.ap_last20
    from sp s
    left join plasticity pl on pl.model = s.model and pl.layer = s.layer and pl.head = s.head
        and pl.estimator = 'empirical'
),
rows as (
    -- seed 003 --------------------------------------------------------------------------------
    select '003.F1.pos_var_q' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, pos_var_q as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_pos_var_q as x_bias from pooled
    union all by name
    select '003.F1.pos_var_k' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, pos_var_k as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_pos_var_k as x_bias from pooled
    union all by name
    select '003.F1.q_over_k' as id, 'overall' as scope, 'ratio_of_means' as stat, m, m as c, u, pos_var_q as x, pos_var_k as y, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_pos_var_q as x_bias, b_pos_var_k as y_bias from pooled
    union all by name
    select '003.F1.pc0_share_q' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, pc0_pos_share_q as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_pc0_share_q as x_bias from pooled
    union all by name
    select '003.F1.pc0_share_k' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, pc0_pos_share_k as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_pc0_share_k as x_bias from pooled
    union all by name
    select '003.F1.' || grp || '.q' as id, label as scope, 'mean' as stat, m, m as c, u, pos_var_q as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_pos_var_q as x_bias from gh
    union all by name
    select '003.F1.' || grp || '.k' as id, label as scope, 'mean' as stat, m, m as c, u, pos_var_k as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_pos_var_k as x_bias from gh
    union all by name
    select '003.F2.fisher' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, fisher_pc0 as x, g, layer, est as estimand, 0 as x_min from pooled
    union all by name
    select '003.F2.accuracy' as id, 'overall' as scope, 'model_range_mean' as stat, m, m as c, u, qk_accuracy_pc01 as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, n_q + n_k as n_vec from pooled
    union all by name
    select '003.F2.separation' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, qk_separation_pc0 as x, g, layer, est as estimand, 0 as x_min, b_separation as x_bias from pooled
    union all by name
    select '003.F2.pc0_ev' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, explained_variance as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_pc0_ev as x_bias from pooled
    union all by name
    select '003.F3.pc0_r_k' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, r_k as x, g, layer, est as estimand, -1 as x_min, 1 as x_max, b_r_k as x_bias from pooled
    union all by name
    select '003.F3.abs_mu_q' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, abs(mu_q) as x, g, layer, est as estimand, 0 as x_min, b_abs_mu_q as x_bias from pooled
    union all by name
    select '003.fig01.pc0_r_q' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, r_q as x, g, layer, est as estimand, -1 as x_min, 1 as x_max, b_r_q as x_bias from pooled
    union all by name
    select '003.fig01.q_dominant' as id, 'overall' as scope, 'diff_of_means' as stat, m, m as c, u, r_q as x, abs(r_k) as y, g, layer, est as estimand, -1 as x_min, 1 as x_max from pooled
    union all by name
    -- Taxonomy shares: x is NULL for a head without a category (it is not classified).
    select '003.F4.' || replace(k.category, '-', '_') as id, 'overall' as scope, 'share' as stat, m, m as c, u,
        (p.category = k.category)::int::double as x, g, layer, est as estimand, 0 as x_min, 1 as x_max
    from pooled p
    cross join (values ('position-dominated'), ('q-positional'), ('k-positional'), ('content-focused'), ('mixed')) k(category)
    union all by name
    select '003.F4.' || grp || '.position_dominated' as id, label as scope, 'model_range_share' as stat, m, m as c, u,
        (category = 'position-dominated')::int::double as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from gh
    union all by name
    select '003.F4.' || grp || '.mixed' as id, label as scope, 'model_range_share' as stat, m, m as c, u,
        (category = 'mixed')::int::double as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from gh where grp in ('llama3.2', 'ministral3')
    union all by name
    select '003.F4.' || grp || '.q_positional' as id, label as scope, 'share' as stat, m, m as c, u,
        (category = 'q-positional')::int::double as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from gh where grp = 'small_qwen3'
    union all by name
    -- Llama's position-dominated share against the highest of the other seed groups (the heads of
    -- every group count, each in its group).
    select '003.F4.llama3.2.highest' as id, 'family Llama 3.2' as scope, 'lead' as stat, m, m as c, u, grp,
        (grp = 'llama3.2')::int as arm, (category = 'position-dominated')::int::double as x, g, layer,
        'these models' as estimand, 0 as x_min, 1 as x_max
    from gh
    where exists (select 1 from gh l where l.grp = 'llama3.2')
    union all by name
    -- Series changes (seed 003 Findings 5-6, figures 08-09).
    select '003.F5.r_q' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, r_q as x, g, layer, 'these models' as estimand, -1 as x_min, 1 as x_max from sp where span = 'early'
    union all by name
    select '003.F5.content_focused' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm,
        (category = 'content-focused')::int::double as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from sp where span = 'early'
    union all by name
    select '003.F5.position_dominated' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm,
        (category = 'position-dominated')::int::double as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from sp where span = 'early'
    union all by name
    select '003.F6.r_q' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, r_q as x, g, layer, 'these models' as estimand, -1 as x_min, 1 as x_max from sp where span = 'long_context'
    union all by name
    select '003.F6.r_k' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, r_k as x, g, layer, 'these models' as estimand, -1 as x_min, 1 as x_max from sp where span = 'long_context'
    union all by name
    select '003.F6.pc0_ev' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, explained_variance as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_pc0_ev as x_bias from sp where span = 'long_context'
    union all by name
    select '003.F6.position_dominated' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm,
        (category = 'position-dominated')::int::double as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from sp where span = 'long_context'
    union all by name
    select '003.fig08.position_dominated' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm,
        (category = 'position-dominated')::int::double as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from sp where span = 'all'
    union all by name
    select '003.fig09.pc0_ev' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, explained_variance as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_pc0_ev as x_bias from sp where span = 'all'
    union all by name
    -- Plasticity: seed 003's testable hypotheses (the taxonomy predicts it; it falls with position;
    -- long-context training raises it). x and y of a difference are heads of two categories.
    select '003.ap.content_vs_qpos' as id, 'overall' as scope, 'diff_of_means' as stat, m, m as c, u,
        case when category = 'content-focused' then ap_overall end as x,
        case when category = 'q-positional' then ap_overall end as y, g, layer, est as estimand, 0 as x_min, 1 as x_max
    from plas
    union all by name
    select '003.ap.qpos_vs_posdom' as id, 'overall' as scope, 'diff_of_means' as stat, m, m as c, u,
        case when category = 'q-positional' then ap_overall end as x,
        case when category = 'position-dominated' then ap_overall end as y, g, layer, est as estimand, 0 as x_min, 1 as x_max
    from plas
    union all by name
    select '003.ap.drop' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, ap_drop as x, g, layer, est as estimand, -1 as x_min, 1 as x_max from plas
    union all by name
    select '003.ap.lc_overall' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, ap_overall as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from spp where span = 'long_context'
    union all by name
    select '003.ap.lc_last20' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, ap_last20 as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from spp where span = 'long_context'
    -- attention as computed (docs/attention.md) ------------------------------------------------
    union all by name
    -- Gu et al.'s sink rate, judged per model: a head's x is the share of its texts on which it is a
    -- sink (sink_heads.sink_text_share), so a model's mean x is its per-text rate (sink_rate_per_text).
    select 'attn.sink.rate' as id, 'overall' as scope, 'model_range_mean' as stat, m, m as c, u,
        sink_text_share as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max,
        (select v from sink_text_var tv where tv.model = sinks.m and tv.input_kind = 'natural') as x_text_var
    from sinks
    union all by name
    -- Repeated tokens give no sink in RoPE models (Gu et al. Propositions 1-4): every model's rate.
    select 'attn.sink.repeated' as id, 'overall' as scope, 'model_range_mean' as stat, m, m as c, u,
        sink_text_share as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max,
        (select v from sink_text_var tv where tv.model = sinks_repeated.m and tv.input_kind = 'repeated') as x_text_var
    from sinks_repeated
    union all by name
    -- Barbero et al.: the logits lean on the low band, judged per model (each model's mean excess).
    select 'rope.low_band' as id, 'overall' as scope, 'model_range_mean' as stat, m, m as c, u,
        low_band_excess as x, g, layer, 'these models' as estimand, 0 as x_min from low_band
    union all by name
    -- Over the sink heads: how much of token 0's logit advantage every query shares (sink_heads.bias_share).
    select 'attn.sink.bias' as id, 'overall' as scope, 'mean' as stat, m, m as c, u,
        case when is_sink then bias_share end as x, g, layer, est as estimand, 0 as x_min, 1 as x_max from sinks
    -- seed 002 --------------------------------------------------------------------------------
    union all by name
    -- The recency term against the logits it claims to explain (table recency).
    select '002.recency.corr' as id, 'overall' as scope, 'corr' as stat, m, m as c, u, logit_slope as x, predicted_slope as y, g, layer, est as estimand from plas
    union all by name
    select '002.recency.ratio' as id, 'overall' as scope, 'ratio_of_means' as stat, m, m as c, u, logit_slope as x, predicted_slope as y, g, layer, est as estimand from plas
    union all by name
    select '002.F1.abs_r_k_a' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, abs(r_k_a) as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_abs_r_k_a as x_bias from pooled
    union all by name
    select '002.F1.abs_r_q_a' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, abs(r_q_a) as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_abs_r_q_a as x_bias from pooled
    union all by name
    select '002.F1.k_over_q' as id, 'overall' as scope, 'diff_of_means' as stat, m, m as c, u, abs(r_k_a) as x, abs(r_q_a) as y, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_abs_r_k_a as x_bias, b_abs_r_q_a as y_bias from pooled
    union all by name
    -- A head with alpha_q = 0 has no ratio (NULLIF) and is left out.
    select '002.F1.slope_ratio' as id, 'overall' as scope, 'median' as stat, m, m as c, u,
        abs(alpha_k) / nullif(abs(alpha_q), 0) as x, g, layer, est as estimand, 0 as x_min, b_slope_ratio as x_bias
    from pooled
    union all by name
    select '002.F1.slope_ratio.' || grp as id, label as scope, 'median' as stat, m, m as c, u,
        abs(alpha_k) / nullif(abs(alpha_q), 0) as x, g, layer, 'these models' as estimand, 0 as x_min,
        b_slope_ratio as x_bias
    from gh where grp <> 'large_qwen3'
    union all by name
    select '002.F2.bias_positive' as id, 'overall' as scope, 'share' as stat, m, m as c, u, (bias_strength > 0)::int::double as x, g, layer, est as estimand, 0 as x_min, 1 as x_max from pooled
    union all by name
    select '002.F2.bias_negative' as id, 'overall' as scope, 'share' as stat, m, m as c, u, (bias_strength < 0)::int::double as x, g, layer, est as estimand, 0 as x_min, 1 as x_max from pooled
    union all by name
    select '002.F2.mu_q_a_positive' as id, 'overall' as scope, 'share' as stat, m, m as c, u, (mu_q_a > 0)::int::double as x, g, layer, est as estimand, 0 as x_min, 1 as x_max from pooled
    union all by name
    select '002.F3.plane_var' as id, 'overall' as scope, 'mean' as stat, m, m as c, u, plane_var_fraction as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, b_plane_var as x_bias from pooled
    union all by name
    select '002.F3.plane_var_range' as id, 'overall' as scope, 'model_range_mean' as stat, m, m as c, u, plane_var_fraction as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_plane_var as x_bias from pooled
    union all by name
    select '002.F3.b_above_a' as id, 'overall' as scope, 'share' as stat, m, m as c, u,
        (var_frac_b > var_frac_a)::int::double as x, g, layer, est as estimand, 0 as x_min, 1 as x_max from pooled
    union all by name
    select '002.lemma' as id, 'overall' as scope, 'exact_max' as stat, m, m as c, u, residual_pos_r as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from pooled
    union all by name
    select '002.F4.active_pairs' as id, 'overall' as scope, 'model_range_mean' as stat, model as m, model as c, u,
        active_share_of_pairs as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from rp where not coalesce(is_nope, false)
    union all by name
    select '002.F4.active_var_share' as id, 'overall' as scope, 'model_range_mean' as stat, model as m, model as c, u,
        active_var_share as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from rp where not coalesce(is_nope, false)
    union all by name
    select '002.F4.ring_accuracy' as id, 'overall' as scope, 'mean' as stat, model as m, model as c, u,
        mean_active_qk_accuracy as x, g, layer, est as estimand, 0 as x_min, 1 as x_max, n_vec from rp where not coalesce(is_nope, false)
    union all by name
    select '002.F4.max_angle_r' as id, 'overall' as scope, 'max' as stat, model as m, model as c, u, max_angle_r as x,
        g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max
    from rp where not coalesce(is_nope, false)
    union all by name
    select '002.F5.overall' as id, 'overall' as scope, 'corr' as stat, m, m as c, u, bias_strength as x, separation_strength as y, g, layer, est as estimand from pooled
    union all by name
    -- Within-family correlations: every family (for Simpson's paradox), and the three the seed names.
    select '002.F5.family' as id, 'family ' || family as scope, 'corr' as stat, m, m as c, u,
        bias_strength as x, separation_strength as y, g, layer, 'these models' as estimand from fam
    union all by name
    select '002.F5.' || k.key as id, 'family ' || f.family as scope, 'corr' as stat, m, m as c, u,
        bias_strength as x, separation_strength as y, g, layer, 'these models' as estimand
    from fam f
    join (values ('llama3.2', 'Llama 3.2'), ('qwen3', 'Qwen3'), ('ministral3', 'Ministral3')) k(key, family) on k.family = f.family
    union all by name
    -- Series (seed 002 Finding 6).
    select '002.F6.abs_r_k_a_first' as id, scope, 'mean' as stat, model as m, series as c, u, abs(r_k_a) as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_abs_r_k_a as x_bias from sp where span = 'first'
    union all by name
    select '002.F6.init_mu_q_a' as id, scope, 'arm_ratio' as stat, model as m, series as c, u, arm, mu_q_a as x, g, layer, 'these models' as estimand from sp where span = 'early'
    union all by name
    select '002.F6.init_bias' as id, scope, 'arm_pct' as stat, model as m, series as c, u, arm, bias_strength as x, g, layer, 'these models' as estimand from sp where span = 'early'
    union all by name
    select '002.F6.lc_bias' as id, scope, 'arm_pct' as stat, model as m, series as c, u, arm, bias_strength as x, g, layer, 'these models' as estimand from sp where span = 'long_context'
    union all by name
    select '002.F6.lc_alpha_k' as id, scope, 'arm_pct' as stat, model as m, series as c, u, arm, alpha_k as x, g, layer, 'these models' as estimand from sp where span = 'long_context'
    union all by name
    select '002.F6.lc_mu_q_a' as id, scope, 'arm_pct' as stat, model as m, series as c, u, arm, mu_q_a as x, g, layer, 'these models' as estimand from sp where span = 'long_context'
    union all by name
    select '002.F6.lc_abs_r_k_a' as id, scope, 'arm_diff' as stat, model as m, series as c, u, arm, abs(r_k_a) as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_abs_r_k_a as x_bias from sp where span = 'long_context'
    union all by name
    select '002.F6.lc_separation' as id, scope, 'arm_pct' as stat, model as m, series as c, u, arm, separation_strength as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max from sp where span = 'long_context'
    union all by name
    select '002.F6.lc_plane_var' as id, scope, 'arm_pct' as stat, model as m, series as c, u, arm, plane_var_fraction as x, g, layer, 'these models' as estimand, 0 as x_min, 1 as x_max, b_plane_var as x_bias from sp where span = 'long_context'
)
select
    id,
    scope,
    stat,
    m as model,
    c as cluster,
    u as unit,
    grp::varchar as grp,
    arm::integer as arm,
    layer::integer as layer,
    g as kv_group,
    estimand::varchar as estimand,
    x::double as x,
    y::double as y,
    x_min::double as x_min,
    x_max::double as x_max,
    x_bias::double as x_bias,
    y_bias::double as y_bias,
    n_vec::bigint as n_vec,
    x_text_var::double as x_text_var
from rows

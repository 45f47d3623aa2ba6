-- Thresholds and tolerances every finding view reads: one row; change it in SQL to re-run the findings with other cut-offs.
-- Seed: taxonomy thresholds 0.7 (high) and 0.3 (low) of seed 003; rotation planes of seed 002 Finding 4.
-- plane_alpha is the level ingest uses for complement.active and rope_planes.rotating (ingest/circular.py
-- PLANE_ALPHA; docs/rotation-planes.md): 1 % family-wise per head keeps false flags to a few heads per model.
-- Depends:
-- Change it for one session (works on a read-only connection too; a temp view shadows this one
-- for every view that reads `params`):
--     create temp view params as select * replace (0.8 as taxonomy_high) from qk.main.params;
-- Change it for good (on a writable connection; qkdb keeps a *table* named params when it
-- re-creates the views):
--     create table params_new as select * replace (0.8 as taxonomy_high) from params;
--     drop view params; alter table params_new rename to params;
-- Column taxonomy_high: A PC0 correlation above this is high: r_q > taxonomy_high, |r_k| > taxonomy_high (seed 003: 0.7).
-- Column taxonomy_low: A PC0 correlation below this is low: r_q < taxonomy_low, |r_k| < taxonomy_low (seed 003: 0.3).
-- Column plane_alpha: Family-wise level of the plane tests of a head: a complement pair is active, and a RoPE plane (turning at least once) rotating, when its Holm-adjusted p-value (p_adjusted) is below this.
-- Column long_context_phase: LIKE pattern on models.phase marking long-context training checkpoints ('lc%' matches SmolLM3's 'lc-4k-to-32k', 'lc-32k-to-64k').
-- Column early_end_step: Last training step of the "early training" window of seed 003 Finding 5 and seed 002 Finding 6 (first 1.2M steps).
-- Column margin_share: findings: equivalence margin of a share (a fraction of heads or of variance) around the seed's value, in absolute terms. Why 0.10: other texts, positions and head samples move a share by a few points, and the seed's own families differ by 10-30 points, so a closer match is not a claim the seed makes.
-- Column margin_r: findings: equivalence margin of a correlation around the seed's value, in absolute terms. Why 0.10: the seed quotes correlations to two digits and its families differ by more than 0.1.
-- Column margin_odds: findings: near 0 or 1 a share must also lie within this factor of the seed's odds (a correlation r: of the odds (1 + r)/(1 - r)). Why 2: 7% does not match a claimed 1%, nor 90% a claimed 99%; a factor 2 on the odds is 0.5-2% around 1% and +-10 points near 50%.
-- Column margin_ratio: findings: equivalence margin of a magnitude (Fisher ratio, units, slope ratio) as a factor around the seed's value. Why 2: these scale with head dimension, text and model size, which the seed does not fix.
-- Column margin_change: findings: a change between checkpoints is tested against this fraction of the seed's change. Why 0.5: "bias collapses by 91%" is not confirmed by a 10% drop; half the seed's change, in its direction, is.
-- Column benchmark_mode: LIKE pattern on benchmark_scores.mode that the benchmark views read: 'nonthinking' (the default; a captured base model cannot think), 'thinking', or '%' for every mode (each mode stays its own rows and fits; modes are never averaged).
-- Column benchmark_truncated: Whether retention, per-length joins and fits use length slices longer than their run's context budget (benchmark_scores.truncated: inputs cut to the budget, so not the length they are named for). Default FALSE: left out, and counted in plasticity_length.n_truncated_left_out.
-- Column sink_epsilon: sink_rate: a head is a sink head when its mean attention weight on token 0 exceeds this (Gu et al. 2025, Table 1: 0.3).
-- Column sink_context: sink_rate: the mean is over queries at positions below this (Gu et al.: 64-token texts); an edge of attention_mass's bins (4, 16, 64, 256, 1024, ...).
-- Column lemma_max: findings: the drift lemma holds when max residual_pos_r is below this. Why 1e-10: float64 round-off is ~1e-14; a real failure of the lemma is of order 1.
select
    0.7::double as taxonomy_high,
    0.3::double as taxonomy_low,
    0.01::double as plane_alpha,
    'lc%'::varchar as long_context_phase,
    1200000::bigint as early_end_step,
    0.10::double as margin_share,
    0.10::double as margin_r,
    2.0::double as margin_odds,
    2.0::double as margin_ratio,
    0.5::double as margin_change,
    1e-10::double as lemma_max,
    'nonthinking'::varchar as benchmark_mode,
    false as benchmark_truncated,
    0.3::double as sink_epsilon,
    64::bigint as sink_context

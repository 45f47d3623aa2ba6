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
-- Column tol_abs: findings: a fraction or correlation holds "approximately" when within this absolute distance of the seed's value.
-- Column tol_ratio: findings: a magnitude (Fisher ratio, units, slope ratio) holds when within this factor of the seed's value; a change holds when at least 1/tol_ratio of the seed's change, same sign.
-- Column lemma_max: findings: the drift lemma holds when max residual_pos_r is below this (float64 round-off is ~1e-14).
select
    0.7::double as taxonomy_high,
    0.3::double as taxonomy_low,
    0.01::double as plane_alpha,
    'lc%'::varchar as long_context_phase,
    1200000::bigint as early_end_step,
    0.10::double as tol_abs,
    2.0::double as tol_ratio,
    1e-10::double as lemma_max

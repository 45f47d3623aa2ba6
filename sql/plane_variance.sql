-- Share of Q+K variance in the {a, b} plane, and whether axis b carries more than axis a, per model, family and overall.
-- Seed: the plane holds 38% of variance on average (range 29-46%); var_b > var_a in 88% of heads (seed 002 Finding 3).
-- Depends: scoped_heads
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with rotation metrics.
-- Column mean_plane_var_fraction: Mean var_frac_a + var_frac_b.
-- Column median_plane_var_fraction: Median plane_var_fraction.
-- Column min_plane_var_fraction: Smallest plane_var_fraction of any head.
-- Column max_plane_var_fraction: Largest plane_var_fraction of any head.
-- Column mean_var_frac_a: Mean share of variance on the drift axis a.
-- Column mean_var_frac_b: Mean share of variance on the separation axis b.
-- Column share_b_above_a: Share of heads with var_frac_b > var_frac_a.
-- Column mean_complement_fraction: 1 - mean_plane_var_fraction: variance left to the d-2 complement.
select
    s.scope,
    s.family,
    s.model,
    count(distinct s.source_model) as n_models,
    count(s.plane_var_fraction) as n_heads,
    avg(s.plane_var_fraction) as mean_plane_var_fraction,
    median(s.plane_var_fraction) as median_plane_var_fraction,
    min(s.plane_var_fraction) as min_plane_var_fraction,
    max(s.plane_var_fraction) as max_plane_var_fraction,
    avg(s.var_frac_a) as mean_var_frac_a,
    avg(s.var_frac_b) as mean_var_frac_b,
    avg((s.var_frac_b > s.var_frac_a)::int) as share_b_above_a,
    1 - avg(s.plane_var_fraction) as mean_complement_fraction
from scoped_heads s
group by s.scope, s.family, s.model
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model

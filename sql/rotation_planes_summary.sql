-- Rotation planes per model, family and overall, RoPE layers apart from NoPE layers (the control).
-- Seed: 18-29 of 30 active SVD pairs per head holding 44-89% of complement variance (seed 002 Finding 4); NoPE layers should show no rotating RoPE plane.
-- Depends: scoped_heads, rotation_planes
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column layers: 'rope' for layers with positional encoding, 'nope' for NoPE layers.
-- Column n_models: Models in the group.
-- Column n_heads: Heads in the group.
-- Column n_heads_complement: Heads with complement pairs computed.
-- Column mean_n_pairs: Mean complement pairs analysed per head.
-- Column mean_n_active: Mean active pairs per head (phase depends on position: Holm-adjusted p below params.plane_alpha).
-- Column min_n_active: Fewest active pairs of any head.
-- Column max_n_active: Most active pairs of any head.
-- Column mean_active_share_of_pairs: Mean n_active / n_pairs.
-- Column mean_active_var_share: Mean share of complement variance in active pairs.
-- Column mean_active_qk_accuracy: Mean Q-vs-K accuracy on active pairs.
-- Column max_angle_r: Largest angle_r of any pair.
-- Column n_heads_rope_planes: Heads with RoPE planes computed.
-- Column mean_n_rotating: Mean rotating RoPE planes per head (turning at least once, Holm-adjusted p below params.plane_alpha).
-- Column mean_rotating_var_share: Mean share of total variance in rotating RoPE planes.
-- Column share_heads_rotating: Share of heads with at least one rotating RoPE plane (0 expected for NoPE layers).
select
    s.scope,
    s.family,
    s.model,
    case when coalesce(s.is_nope, false) then 'nope' else 'rope' end as layers,
    count(distinct s.source_model) as n_models,
    count(*) as n_heads,
    count(rp.n_pairs) as n_heads_complement,
    avg(rp.n_pairs) as mean_n_pairs,
    avg(rp.n_active) as mean_n_active,
    min(rp.n_active) as min_n_active,
    max(rp.n_active) as max_n_active,
    avg(rp.active_share_of_pairs) as mean_active_share_of_pairs,
    avg(rp.active_var_share) as mean_active_var_share,
    avg(rp.mean_active_qk_accuracy) as mean_active_qk_accuracy,
    max(rp.max_angle_r) as max_angle_r,
    count(rp.n_rope_planes) as n_heads_rope_planes,
    avg(rp.n_rotating) as mean_n_rotating,
    avg(rp.rotating_var_share) as mean_rotating_var_share,
    avg((rp.n_rotating > 0)::int) as share_heads_rotating
from scoped_heads s
join rotation_planes rp on rp.model = s.source_model and rp.layer = s.layer and rp.head = s.head
group by s.scope, s.family, s.model, layers
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model, layers desc

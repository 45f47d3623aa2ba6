-- Rotation planes of every head: active SVD pairs of the complement of {a, b} and rotating RoPE planes, with their variance shares.
-- Seed: 18-29 of 30 complement SVD pairs per head are active rotation planes, holding 44-89% of complement variance; Q and K are indistinguishable on them (~50% accuracy); angle_r up to 1.0 (seed 002 Finding 4).
-- Depends: head_metrics, params
-- Both flags are re-derived here from params (Holm-adjusted p-value below plane_alpha), so changing
-- the level in SQL changes every count; the stored complement.active / rope_planes.rotating hold
-- the default used at ingest. RoPE planes turning less than once over the positions are not tested
-- (p_adjusted is NaN): they cannot be rotating. Rows ingested before the tests existed have no
-- p_adjusted at all (NULL): they keep their stored flag (threshold rules) until re-ingested.
-- NoPE layers (is_nope) are the built-in control: they should have no rotating RoPE plane.
-- Counts are NULL (not 0) for a head whose complement or rope_planes rows were not computed.
-- Column model: Model name.
-- Column family: Model family.
-- Column layer: Layer index, 0-based.
-- Column head: Query-head index within the layer, 0-based.
-- Column depth_bin: min(9, floor(10 * depth)).
-- Column is_nope: Layer has no positional encoding (the control).
-- Column n_pairs: Complement SVD pairs analysed (min(30, (d-2)//2)).
-- Column n_active: Pairs whose phase depends on position: Holm-adjusted p-value below params.plane_alpha.
-- Column active_share_of_pairs: n_active / n_pairs.
-- Column active_var_share: Share of complement variance in the active pairs.
-- Column pairs_var_share: Share of complement variance in all analysed pairs.
-- Column max_angle_r: Largest circular-linear correlation of a pair's angle with position.
-- Column mean_active_qk_accuracy: Mean balanced Q-vs-K accuracy on the active pairs (~0.5 on a shared ring).
-- Column n_rope_planes: RoPE planes analysed (d/2).
-- Column n_rotating: RoPE planes carrying a ring: turning at least once, Holm-adjusted p-value below params.plane_alpha.
-- Column rotating_var_share: Share of total pooled variance in the rotating RoPE planes.
-- Column strongest_rope_plane: Index j of the rotating plane with the highest de-rotated coherence.
-- Column strongest_rope_omega: Its frequency in rad/token.
with pairs as (
    -- NaN (a degenerate pair) would compare as larger than any number in DuckDB; NULLIF makes it
    -- fail the test, as in ingest.
    select
        c.model, c.layer, c.head, c.var_frac, c.qk_accuracy,
        nullif(c.angle_r, 'nan'::double) as angle_r,
        (case when c.p_adjusted is null then c.active
              else nullif(c.p_adjusted, 'nan'::double) < p.plane_alpha end) is true as is_active
    from complement c
    cross join params p
), c as (
    select
        pairs.model,
        pairs.layer,
        pairs.head,
        count(*) as n_pairs,
        count(*) filter (where pairs.is_active) as n_active,
        coalesce(sum(pairs.var_frac) filter (where pairs.is_active), 0) as active_var_share,
        sum(pairs.var_frac) as pairs_var_share,
        max(pairs.angle_r) as max_angle_r,
        avg(pairs.qk_accuracy) filter (where pairs.is_active) as mean_active_qk_accuracy
    from pairs
    group by pairs.model, pairs.layer, pairs.head
), planes as (
    select
        r.model, r.layer, r.head, r.j, r.omega, r.var_frac,
        greatest(nullif(r.coherence_q, 'nan'::double), nullif(r.coherence_k, 'nan'::double)) as coherence,
        (case when r.p_adjusted is null then r.rotating
              else nullif(r.p_adjusted, 'nan'::double) < p.plane_alpha end) is true as is_rotating
    from rope_planes r
    cross join params p
), r as (
    select
        planes.model,
        planes.layer,
        planes.head,
        count(*) as n_rope_planes,
        count(*) filter (where planes.is_rotating) as n_rotating,
        coalesce(sum(planes.var_frac) filter (where planes.is_rotating), 0) as rotating_var_share,
        arg_max(planes.j, planes.coherence) filter (where planes.is_rotating) as strongest_rope_plane,
        arg_max(planes.omega, planes.coherence) filter (where planes.is_rotating) as strongest_rope_omega
    from planes
    group by planes.model, planes.layer, planes.head
)
select
    h.model,
    h.family,
    h.layer,
    h.head,
    h.depth_bin,
    h.is_nope,
    c.n_pairs,
    c.n_active,
    c.n_active / c.n_pairs as active_share_of_pairs,
    c.active_var_share,
    c.pairs_var_share,
    c.max_angle_r,
    c.mean_active_qk_accuracy,
    r.n_rope_planes,
    r.n_rotating,
    r.rotating_var_share,
    r.strongest_rope_plane,
    r.strongest_rope_omega
from head_metrics h
left join c on c.model = h.model and c.layer = h.layer and c.head = h.head
left join r on r.model = h.model and r.layer = h.layer and r.head = h.head
order by h.model, h.layer, h.head

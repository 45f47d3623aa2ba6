-- Which RoPE frequencies each layer's logits are built from: per model, layer and plane, the heads' mean share of the logit's magnitude, with the layer's critical plane.
-- Seed: Barbero et al. 2025 (queries and keys carry their norm in the lowest frequencies) and Liu et al. 2023 (the critical dimension: the first plane that does not finish a turn in the trained context); SPEC §4.8.
-- Depends: frequency_usage
-- Planes are numbered as rope_planes' (j = 0 turns fastest: order by j is order of falling frequency
-- for every RoPE qkdb derives or records). NoPE layers and models without RoPE have no rows.
-- Column model: The model.
-- Column layer: The layer.
-- Column j: The RoPE plane.
-- Column omega: The plane's frequency (rad/token) as applied; the heads' mean where the frequencies were fitted per head.
-- Column turns_trained: Turns the plane makes over the trained context (NULL when unknown).
-- Column critical_plane: The layer's critical plane (NULL when unknown or when every plane turns).
-- Column low_band: The plane is at or past the critical plane.
-- Column n_heads: Query heads of the layer with rows.
-- Column mean_logit_share: Mean over the layer's heads of the plane's logit_share.
-- Column sd_logit_share: Their standard deviation (NULL for one head).
-- Column mean_logit_mean: Mean over the heads of the plane's signed mean logit part.
-- Column mean_bound_share: Mean over the heads of the plane's bound_share (radius_q * radius_k).
-- Column mean_nonrotating_share: Mean over the heads of the non-rotating dims' share (0 for full rotary).
-- Column mean_low_band_excess: Mean over the layer's heads of low_band_excess (the same on every plane's row).
select
    model,
    layer,
    j,
    avg(omega) as omega,
    avg(turns_trained) as turns_trained,
    -- (one value per layer: the layer's frequencies and trained context are every head's)
    min(critical_plane) as critical_plane,
    bool_or(low_band) as low_band,
    count(*) as n_heads,
    avg(logit_share) as mean_logit_share,
    stddev_samp(logit_share) as sd_logit_share,
    avg(logit_mean) as mean_logit_mean,
    avg(bound_share) as mean_bound_share,
    avg(nonrotating_share) as mean_nonrotating_share,
    avg(low_band_excess) as mean_low_band_excess
from frequency_usage
group by model, layer, j
order by model, layer, j

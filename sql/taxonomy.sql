-- Category of every head from its PC0 r_q and |r_k| (seed 003 Finding 4 taxonomy; thresholds in params).
-- Seed: position-dominated r_q > 0.7 and |r_k| > 0.7; Q-positional r_q > 0.7, |r_k| < 0.3; K-positional r_q < 0.3, |r_k| > 0.7; content-focused both < 0.3; mixed otherwise.
-- Depends: head_metrics, params
-- r_q is the sign-canonical PC0 correlation (>= 0 unless its sign was fixed by r_k, and then |r_q| < 0.05).
-- A head whose r_q or r_k is NULL (zero variance) gets no category.
-- Column model: Model name.
-- Column family: Model family.
-- Column series: Training-checkpoint series, NULL for a standalone model.
-- Column series_order: Order of the checkpoint within its series.
-- Column layer: Layer index, 0-based.
-- Column head: Query-head index within the layer, 0-based.
-- Column depth: Relative depth layer / (n_layers - 1).
-- Column depth_bin: min(9, floor(10 * depth)).
-- Column is_nope: Layer has no positional encoding (registry nope_layers).
-- Column r_q: PC0 Pearson r of Q projections with Q positions (sign-canonical).
-- Column r_k: PC0 Pearson r of K projections with K positions (positive: K's gradient agrees with Q's).
-- Column abs_r_k: |r_k| on PC0.
-- Column category: 'position-dominated', 'q-positional', 'k-positional', 'content-focused' or 'mixed'; NULL when r_q or r_k is NULL.
-- Column category_order: 1..5 in the order above (for sorting and chart legends).
with t as (
    select
        h.model,
        h.family,
        h.series,
        h.series_order,
        h.layer,
        h.head,
        h.depth,
        h.depth_bin,
        h.is_nope,
        h.r_q,
        h.r_k,
        abs(h.r_k) as abs_r_k,
        case
            when h.r_q is null or h.r_k is null then null
            when h.r_q > p.taxonomy_high and abs(h.r_k) > p.taxonomy_high then 'position-dominated'
            when h.r_q > p.taxonomy_high and abs(h.r_k) < p.taxonomy_low then 'q-positional'
            when h.r_q < p.taxonomy_low and abs(h.r_k) > p.taxonomy_high then 'k-positional'
            when h.r_q < p.taxonomy_low and abs(h.r_k) < p.taxonomy_low then 'content-focused'
            else 'mixed'
        end as category
    from head_metrics h
    cross join params p
)
select
    t.*,
    case t.category
        when 'position-dominated' then 1
        when 'q-positional' then 2
        when 'k-positional' then 3
        when 'content-focused' then 4
        when 'mixed' then 5
    end as category_order
from t
order by t.model, t.layer, t.head

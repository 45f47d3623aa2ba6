-- Mean explained variance of every principal component of the combined Q/K PCA, per model, family and overall.
-- Seed: PC0 captures ~34% of combined Q/K variance (seed 003 figure 05, Finding 2).
-- Depends: scoped_heads
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column pc: Principal component index, 0-based.
-- Column n_models: Models in the group.
-- Column n_heads: Heads with this PC.
-- Column mean_explained_variance: Mean share of pooled Q/K variance on this PC.
-- Column median_explained_variance: Median across heads.
-- Column sd_explained_variance: Sample standard deviation across heads.
-- Column cumulative_explained_variance: Sum of mean_explained_variance over PCs 0..pc.
with g as (
    select
        s.scope,
        s.family,
        s.model,
        p.pc,
        count(distinct s.source_model) as n_models,
        count(*) as n_heads,
        avg(p.explained_variance) as mean_explained_variance,
        median(p.explained_variance) as median_explained_variance,
        stddev_samp(p.explained_variance) as sd_explained_variance
    from scoped_heads s
    join pca p on p.model = s.source_model and p.layer = s.layer and p.head = s.head
    group by s.scope, s.family, s.model, p.pc
)
select
    g.*,
    sum(g.mean_explained_variance) over (
        partition by g.scope, g.family, g.model order by g.pc rows between unbounded preceding and current row
    ) as cumulative_explained_variance
from g
order by case g.scope when 'overall' then 0 when 'family' then 1 else 2 end, g.family, g.model, g.pc

-- The measured value of every (finding, scope) of the findings view: its rows of finding_inputs combined with its statistic.
-- Seed: -
-- Depends: finding_inputs
-- The heavy half of `findings` (every head's rows; the rest joins the values with their intervals
-- and the seeds' claims): a view of its own so that a refresh of the findings computes it while the
-- intervals are resampled (qkdb/warehouse/results.py). One row per (id, scope) with data.
-- Column id: The finding (findings.id).
-- Column scope: The finding's scope, as findings.scope shows it.
-- Column stat: How its rows combine into the value (finding_inputs.stat).
-- Column estimand: 'models like these' when more than one model has data for a claim about models like these, else 'these models'.
-- Column value: The measured value.
-- Column value_lo: For a claim about every model's own value: the lowest model's value.
-- Column value_hi: For a claim about every model's own value: the highest model's value.
-- Column v_from: For a change between checkpoints: the mean at the earlier one.
-- Column v_to: For a change between checkpoints: the mean at the later one.
-- Column input_x: For a difference or ratio of two means: the first (mean x); for a group's lead: the group's mean.
-- Column input_y: For a difference or ratio of two means: the second (mean y); for a group's lead: the highest other group's mean.
-- Column n_input_x: For a difference or ratio of two groups' means (x and y on different heads): the heads behind the first.
-- Column n_input_y: The heads behind the second.
-- Column sum_x: Sum of the rows' x.
-- Column n_models: Models with rows.
-- Column models: The models whose heads have values here (findings names the ingested layers of those captured in part).
-- Column n_heads: Heads behind the value (pairs for a correlation; the later checkpoint's for a change).
with
-- (only the columns used below: the copy is every head's rows, ~30 a head)
fi as materialized (select id, scope, stat, estimand, cluster, model, grp, arm, x, y from finding_inputs),
-- Each pair's means, for a correlation computed in two passes from compensated sums: DuckDB's
-- corr() merges its threads' partial sums in whatever order they finish, so its last bits vary.
pair_means as (
    select fi.id, fi.scope, favg(fi.x) as mx, favg(fi.y) as my
    from fi
    where fi.x is not null and fi.y is not null
    group by fi.id, fi.scope
),
centred as (
    select fi.*, fi.x - pm.mx as dx, fi.y - pm.my as dy
    from fi
    left join pair_means pm on pm.id = fi.id and pm.scope = fi.scope
),
-- The measured value of every (finding, scope), from its rows, as its statistic says.
agg as (
    select
        fi.id,
        fi.scope,
        any_value(fi.stat) as stat,
        -- About models like these only where more than one model has data (else: this model).
        case
            when any_value(fi.estimand) = 'models like these'
                and count(distinct fi.cluster) filter (where fi.x is not null or fi.y is not null) > 1
            then 'models like these'
            else 'these models'
        end as estimand,
        count(distinct fi.model) as n_models,
        list(distinct fi.model order by fi.model) filter (where fi.x is not null or fi.y is not null) as models,
        count(fi.x) as n_x,
        count(fi.y) as n_y,
        count(fi.x) filter (where fi.arm = 1) as n_x1,
        count(*) filter (where fi.x is not null and fi.y is not null) as n_xy,
        -- fsum/favg (compensated sums): a mean over heads must not depend on how DuckDB's threads
        -- split the rows, or the same warehouse would show other last bits from run to run.
        fsum(fi.x) as sum_x,
        favg(fi.x) as mean_x,
        favg(fi.y) as mean_y,
        median(fi.x) as median_x,
        max(fi.x) as max_x,
        -- Pearson's r, NULL (not NaN) when a side has no variance (SPEC §4).
        case
            when count(*) filter (where fi.x is not null and fi.y is not null) > 1
                and fsum(fi.dx * fi.dx) filter (where fi.y is not null) > 0
                and fsum(fi.dy * fi.dy) filter (where fi.x is not null) > 0
            then fsum(fi.dx * fi.dy) / sqrt(fsum(fi.dx * fi.dx) filter (where fi.y is not null)
                                            * fsum(fi.dy * fi.dy) filter (where fi.x is not null))
        end as r,
        favg(fi.x) filter (where fi.arm = 0) as mean_0,
        favg(fi.x) filter (where fi.arm = 1) as mean_1
    from centred as fi
    group by fi.id, fi.scope
),
model_means as (
    select fi.id, fi.scope, fi.model, favg(fi.x) as mean_x
    from fi
    where fi.stat in ('model_range_mean', 'model_range_share')
    group by fi.id, fi.scope, fi.model
),
ranges as (
    select id, scope, min(mean_x) as value_lo, max(mean_x) as value_hi
    from model_means
    group by id, scope
),
group_means as (
    select fi.id, fi.scope, fi.grp, fi.arm, favg(fi.x) as mean_x
    from fi
    where fi.stat = 'lead'
    group by fi.id, fi.scope, fi.grp, fi.arm
),
leads as (
    select id, scope, max(mean_x) filter (where arm = 1) - max(mean_x) filter (where arm = 0) as value,
           max(mean_x) filter (where arm = 1) as input_x, max(mean_x) filter (where arm = 0) as input_y
    from group_means
    group by id, scope
),
est as (
    select
        a.id,
        a.scope,
        a.stat,
        a.estimand,
        case a.stat
            when 'mean' then a.mean_x
            when 'share' then a.mean_x
            when 'median' then a.median_x
            when 'ratio_of_means' then a.mean_x / nullif(a.mean_y, 0)
            when 'diff_of_means' then a.mean_x - a.mean_y
            when 'corr' then a.r
            when 'max' then a.max_x
            when 'exact_max' then a.max_x
            when 'model_range_mean' then a.mean_x
            when 'model_range_share' then a.mean_x
            when 'lead' then l.value
            when 'arm_diff' then a.mean_1 - a.mean_0
            when 'arm_ratio' then a.mean_1 / nullif(a.mean_0, 0)
            when 'arm_pct' then 100 * (a.mean_1 - a.mean_0) / nullif(abs(a.mean_0), 0)
        end::double as value,
        rg.value_lo,
        rg.value_hi,
        case when a.stat like 'arm%' then a.mean_0 end as v_from,
        case when a.stat like 'arm%' then a.mean_1 end as v_to,
        -- The two means a difference, ratio or lead combines, so that its value can be read as a - b.
        case when a.stat in ('diff_of_means', 'ratio_of_means') then a.mean_x when a.stat = 'lead' then l.input_x end as input_x,
        case when a.stat in ('diff_of_means', 'ratio_of_means') then a.mean_y when a.stat = 'lead' then l.input_y end as input_y,
        -- A difference of two groups' means (x and y on different heads: the taxonomy's categories)
        -- with each group's head count, which the two means alone do not show.
        case when a.stat in ('diff_of_means', 'ratio_of_means') and a.n_xy = 0 then a.n_x end as n_input_x,
        case when a.stat in ('diff_of_means', 'ratio_of_means') and a.n_xy = 0 then a.n_y end as n_input_y,
        a.sum_x,
        a.n_models,
        a.models,
        case
            when a.stat = 'corr' then a.n_xy
            when a.stat like 'arm%' then a.n_x1
            else a.n_x
        end as n_heads
    from agg a
    left join ranges rg on rg.id = a.id and rg.scope = a.scope
    left join leads l on l.id = a.id and l.scope = a.scope
)
select * from est
order by id, scope

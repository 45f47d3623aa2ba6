-- The fits of plasticity_benchmark_fit, of one source only (only_source; NULL: every source): a table macro.
-- Parameters: only_source
-- Depends: plasticity_benchmark, plasticity_length
-- Why a macro: the findings need only qkdb's own fits, and DuckDB does not push a filter on source
-- through the materialised CTEs below, so a view read with `where source = 'qkdb'` still enumerated
-- every permutation of the author's 8-model fits (~1 s of every findings evaluation).
-- Two kinds of pair: a metric against the overall score (plasticity_benchmark), and AP retention
-- against score retention over the same span of lengths (plasticity_length; models whose spans
-- differ are different fits). Modes and sources are never pooled: each is its own row.
-- The permutation p is exact: every one of the n! pairings of the y values with the x values is
-- enumerated (a recursive CTE; n <= 9 is 362,880 pairings), p = the share whose |r| (or |rho|)
-- reaches the observed one (two-sided; the observed pairing counts). Above 9 models it is NULL.
-- The interval resamples models (2,000 draws with replacement, percentile); DuckDB's hash of
-- (fit, draw, slot) picks the models, so the interval is the same on every run. Resamples whose x
-- or y are all equal have no r and are left out (n_boot says how many count). Below 5 models there
-- is no interval: resampling 3 or 4 points gives r = +-1 from any two of them.
-- descriptive_only: with fewer than 10 models, or any match that is not exact (a base checkpoint
-- against its instruct model's score), a fit describes these models; it is not evidence about
-- models in general, and the findings never call it 'holds' (docs/benchmarks-join.md).
-- Every ordering of 1..n for each n <= 9 that some fit has.
-- Centred x against permuted y: the permutation statistic is sum(cx * y[pi]) (Pearson's r is it
-- over a constant), and the same with ranks for Spearman.
with recursive
pts as (
    select source, benchmark, mode, metric as x_metric, 'overall' as y_metric, null::varchar as span,
        model, family, match_kind, value as x, score as y, 0 as left_out
    from plasticity_benchmark
    where only_source is null or source = only_source
    union all by name
    select distinct source, benchmark, mode, 'ap_length_retention' as x_metric, 'score_length_retention' as y_metric,
        printf('%dk-%dk', first_length // 1024, last_length // 1024) as span,
        model, family, match_kind, ap_retention as x, score_retention as y, n_truncated_left_out as left_out
    from plasticity_length
    where ap_retention is not null and score_retention is not null
        and (only_source is null or source = only_source)
),
keyed as (
    select *,
        hash(source, benchmark, mode, x_metric, y_metric, coalesce(span, '')) as gid
    from pts
    where isfinite(x) and isfinite(y)
),
ranked as (
    select *,
        row_number() over (partition by gid order by model) as i,
        -- average ranks: the mean of the rank from below and the rank from above
        (rank() over (partition by gid order by x) + count(*) over (partition by gid) + 1
            - rank() over (partition by gid order by x desc)) / 2.0 as rx,
        (rank() over (partition by gid order by y) + count(*) over (partition by gid) + 1
            - rank() over (partition by gid order by y desc)) / 2.0 as ry,
        x - avg(x) over (partition by gid) as xc,
        (count(*) over (partition by gid) + 1) / 2.0 as mid_rank
    from keyed
),
g as (
    select
        gid, source, benchmark, mode, x_metric, y_metric, span,
        count(*) as n,
        count(*) filter (where match_kind = 'exact') as n_exact,
        corr(x, y) as pearson_r,
        corr(rx, ry) as spearman_rho,
        list(xc order by i) as cx,
        list(y order by i) as ys,
        list(rx - mid_rank order by i) as crx,
        list(ry order by i) as rys,
        sqrt(sum(xc * xc) * sum(y * y)) as scale,
        sqrt(sum((rx - mid_rank) * (rx - mid_rank)) * sum(ry * ry)) as scale_rank,
        sum(left_out) as n_truncated_left_out,
        string_agg(model || case when match_kind <> 'exact' then ' (' || match_kind || ')' else '' end, ', ' order by model) as models
    from ranked
    group by gid, source, benchmark, mode, x_metric, y_metric, span
),
-- Every ordering of 1..n for each n <= 9 that some fit has.
perm(n, p) as (
    select distinct n, []::integer[] from g where n between 3 and 9
    union all
    select perm.n, list_append(perm.p, k::integer)
    from perm, range(1, 10) t(k)
    where len(perm.p) < perm.n and k <= perm.n and not list_contains(perm.p, k::integer)
),
-- Centred x against permuted y: the permutation statistic is sum(cx * y[pi]) (Pearson's r is it
-- over a constant), and the same with ranks for Spearman.
pstat as (
    select g.gid,
        list_dot_product(g.cx, g.ys) as s_obs,
        list_dot_product(g.crx, g.rys) as s_rank_obs,
        list_dot_product(g.cx, list_select(g.ys, pm.p)) as s,
        list_dot_product(g.crx, list_select(g.rys, pm.p)) as s_rank,
        g.scale,
        g.scale_rank
    from g
    join perm pm on pm.n = g.n and len(pm.p) = g.n
),
pv as (
    select gid,
        avg((abs(s) >= abs(s_obs) - 1e-9 * scale)::double) as perm_p_pearson,
        avg((abs(s_rank) >= abs(s_rank_obs) - 1e-9 * scale_rank)::double) as perm_p_spearman
    from pstat
    group by gid
),
draws as (
    select k.gid, b.b, corr(k.x, k.y) as r
    from g
    cross join range(1, 2001) b(b)
    cross join lateral (select unnest(range(1, g.n + 1)) as slot) sl
    join ranked k on k.gid = g.gid and k.i = 1 + (hash(g.gid, b.b, sl.slot) % g.n::ubigint)::bigint
    where g.n >= 5
    group by k.gid, b.b
),
boot as (
    -- (a resample whose x or y are all equal has r NaN or NULL: left out)
    select gid,
        quantile_cont(r, 0.025) filter (where isfinite(r)) as ci_low,
        quantile_cont(r, 0.975) filter (where isfinite(r)) as ci_high,
        count(r) filter (where isfinite(r)) as n_boot
    from draws
    group by gid
)
select
    g.source, g.benchmark, g.mode, g.x_metric, g.y_metric, g.span,
    g.n, g.n_exact, g.pearson_r, g.spearman_rho,
    pv.perm_p_pearson, pv.perm_p_spearman,
    b.ci_low, b.ci_high, b.n_boot,
    g.n < 10 or g.n_exact < g.n as descriptive_only,
    case when g.n < 10 or g.n_exact < g.n then
        concat_ws('; ',
            case when g.n < 10 then printf('%d models (fewer than 10)', g.n) end,
            case when g.n_exact < g.n then printf('%d of %d matches not exact', g.n - g.n_exact, g.n) end)
    end as why,
    g.models,
    g.n_truncated_left_out
from g
left join pv using (gid)
left join boot b using (gid)
order by g.source, g.benchmark, g.mode, g.y_metric, g.x_metric, g.span

-- What the findings' intervals were computed for: the published models and the params, as one fingerprint.
-- Seed: -
-- Depends: params
-- qkdb stores the fingerprint next to every interval it computes (table finding_intervals); the
-- findings view uses an interval only while the fingerprint still matches, so re-ingesting,
-- removing or restricting models, or shadowing params in a session, never pairs a value with an
-- interval computed for other data.
-- The benchmark tables count too (a score or a mapping imported changes the effective-context
-- findings): their imported rows, by a hash of each (the shipped rows change with qkdb's version,
-- which rebuilds the catalog and so the findings anyway).
-- Column fingerprint: md5 of every model with its publish time, of the params row and of the imported benchmark rows.
select md5(
    coalesce((select string_agg(m.model || '@' || coalesce(m.ingested_at::varchar, ''), ',' order by m.model) from models m), '')
    || '|' || (select to_json(p)::varchar from params p)
    || '|' || (select count(*) || ':' || coalesce(sum(hash(s)), 0) from benchmark_scores s where s.origin = 'imported')
    || '|' || (select count(*) || ':' || coalesce(sum(hash(b)), 0) from benchmark_models b where b.origin = 'imported')
    || '|' || (select count(*) || ':' || coalesce(sum(hash(r)), 0) from reference_metrics r where r.origin = 'imported')
) as fingerprint

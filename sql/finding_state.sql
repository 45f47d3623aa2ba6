-- What the findings' intervals were computed for: the published models and the params, as one fingerprint.
-- Seed: -
-- Depends: params
-- qkdb stores the fingerprint next to every interval it computes (table finding_intervals); the
-- findings view uses an interval only while the fingerprint still matches, so re-ingesting,
-- removing or restricting models, or shadowing params in a session, never pairs a value with an
-- interval computed for other data.
-- Column fingerprint: md5 of every model with its publish time, and of the params row.
select md5(
    coalesce((select string_agg(m.model || '@' || coalesce(m.ingested_at::varchar, ''), ',' order by m.model) from models m), '')
    || '|' || (select to_json(p)::varchar from params p)
) as fingerprint

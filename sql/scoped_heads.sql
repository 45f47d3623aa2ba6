-- Every head once per scope it counts in (its model; its family and overall when the model is pooled): the base of the grouped views.
-- Seed: the seeds report every statistic per model, per family and over all 11 models.
-- Depends: head_metrics, model_pool, taxonomy
-- Grouping this by (scope, family, model) gives model, family and overall rows with one set of
-- aggregate expressions; GROUPING SETS could not drop the non-pooled checkpoints from the coarser
-- sets only. Family and overall rows read pooled models only (see model_pool).
-- Column scope: 'model', 'family' or 'overall'.
-- Column source_model: The head's own model (set on every row, also when model is NULL).
-- Column model: The model for 'model' rows; NULL for 'family' and 'overall' rows.
-- Column family: The family for 'model' and 'family' rows; NULL for 'overall' rows.
-- Column category: Taxonomy category of the head (view taxonomy).
-- Column pooled: The head's model counts in family and overall aggregates (view model_pool).
-- Column long_context: The head's model is a long-context training checkpoint (view model_pool).
with h as (
    select hm.*, t.category, mp.pooled, mp.long_context
    from head_metrics hm
    join model_pool mp on mp.model = hm.model
    left join taxonomy t on t.model = hm.model and t.layer = hm.layer and t.head = hm.head
)
select 'model' as scope, h.model as source_model, h.*
from h
union all by name
select 'family' as scope, h.model as source_model, h.* replace (null::varchar as model)
from h
where h.pooled
union all by name
select 'overall' as scope, h.model as source_model, h.* replace (null::varchar as model, null::varchar as family)
from h
where h.pooled

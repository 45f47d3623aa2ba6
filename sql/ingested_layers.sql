-- Which layers of each model are ingested: all of them, or a subset. A model's findings, and their intervals, are about the layers ingested.
-- Seed: none (what every finding is about: docs/findings.md, "A subset of layers").
-- Depends: head_metrics
-- A capture of some layers only (`qkdb ingest --heads 0-3`, a capture of the full-attention layers
-- only, a sniff of the first layers) gives findings about those layers: a model's layers are its
-- own, not a sample of its layers, and the ones never captured say nothing. The intervals resample
-- heads within the ingested layers; `qkdb findings` and the report name every model whose layers
-- are a subset.
-- Column model: The model.
-- Column n_layers: Its layers (models.n_layers; NULL when unknown).
-- Column layers_ingested: How many of them have at least one ingested head.
-- Column layers: The ingested layers, in order.
-- Column subset: Whether fewer layers are ingested than the model has (FALSE when n_layers is unknown).
-- Column description: The ingested layers in words: 'layers 0-3 of 16', '4 of 16 layers (0, 8, 11, 12)', '26 of 30 layers (all but 3, 9, 17, 28)', or 'all 16 layers'.
-- Column note: For a subset, the line `qkdb findings` and the report print about it; NULL otherwise.
with per_model as (
    select model, any_value(n_layers) as n_layers, list(distinct layer order by layer) as layers
    from head_metrics
    group by model
),
described as (
    select
        *,
        len(layers) as layers_ingested,
        coalesce(len(layers) < n_layers, false) as subset,
        -- consecutive layers as a range, others listed (the first eight)
        layers[len(layers)] - layers[1] + 1 = len(layers) as contiguous
    from per_model
)
select
    model,
    n_layers,
    layers_ingested,
    layers,
    subset,
    description,
    case when subset then model || ': ' || description || ' ingested: its findings and their intervals are about '
        || case when layers_ingested = 1 then 'that layer' else 'those layers' end
        || ', not the layers never captured (docs/findings.md, "A subset of layers")' end as note
from (
select
    model,
    n_layers,
    layers_ingested,
    layers,
    subset,
    case
        when not subset then 'all ' || coalesce(n_layers, layers_ingested) || ' layers'
        when contiguous and layers_ingested > 1 then printf('layers %d-%d of %d', layers[1], layers[len(layers)], n_layers)
        when layers_ingested = 1 then printf('layer %d of %d', layers[1], n_layers)
        -- a few layers missing: those are the ones to name
        when layers_ingested > 8 and n_layers - layers_ingested <= 8 then printf('%d of %d layers (all but %s)', layers_ingested, n_layers,
            array_to_string(list_filter(range(n_layers), lambda l: not list_contains(layers, l)), ', '))
        else printf('%d of %d layers (%s%s)', layers_ingested, n_layers,
                    array_to_string(layers[1:8], ', '), case when layers_ingested > 8 then ', ...' else '' end)
    end as description
from described
)
order by model

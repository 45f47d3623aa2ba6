-- Every ingested model with its training-series facts, and whether it counts toward family and overall aggregates.
-- Seed: the seeds pool 11 models (3,239 heads) across families and study the 10 SmolLM3-3B checkpoints apart.
-- Depends: params
-- A training series would weigh in once per checkpoint if every checkpoint were pooled; instead it
-- counts once in family/overall aggregates, by its latest ingested checkpoint. Every checkpoint
-- still has its own 'model' rows in every view, and series_trajectory follows the whole series.
-- A capture of random or repeated tokens (Gu et al.'s controls for attention sinks) is not pooled:
-- the seeds' findings are about the geometry of natural text.
-- Column model: Model name (one checkpoint of a series is one model).
-- Column family: Model family.
-- Column series: Training-checkpoint series, NULL for a standalone model.
-- Column series_order: Order of the checkpoint within its series.
-- Column phase: Training phase of the checkpoint.
-- Column step: Training step of the checkpoint (it restarts in each long-context phase).
-- Column long_context: The checkpoint's phase matches params.long_context_phase.
-- Column input_kind: What its captured texts were (models.input_kind; NULL read as 'natural').
-- Column pooled: Counts in family and overall aggregates: a standalone model, or its series' latest ingested checkpoint, captured on natural text.
select
    m.model,
    m.family,
    m.series,
    m.series_order,
    m.phase,
    m.step,
    coalesce(m.phase like p.long_context_phase, false) as long_context,
    coalesce(m.input_kind, 'natural') as input_kind,
    coalesce(m.input_kind, 'natural') = 'natural' and (m.series is null
        or (m.series_order is not distinct from max(m.series_order) over (partition by m.series))) as pooled
from models m
cross join params p
order by m.family, m.series nulls first, m.series_order, m.model

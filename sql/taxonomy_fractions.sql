-- Share of heads in each taxonomy category per model, per family and overall.
-- Seed: overall mixed 55.4%, position-dominated 26.6%, Q-positional 14.2%, content-focused 3.8%, K-positional <0.1% (3,239 heads); Llama 3.2 38-50% position-dominated, Ministral3 77-84% mixed, small Qwen3 5-7% position-dominated and 39% Q-positional.
-- Depends: scoped_heads
-- Every group gets all five categories, with n_heads = 0 where none falls in one (the cross
-- join with the category list), so a missing category reads as 0%, not as an absent row.
-- Column scope: 'overall', 'family' or 'model'.
-- Column family: Family of 'family' and 'model' rows.
-- Column model: Model of 'model' rows.
-- Column category: Taxonomy category (view taxonomy).
-- Column category_order: 1 position-dominated, 2 q-positional, 3 k-positional, 4 content-focused, 5 mixed.
-- Column n_models: Models in the group.
-- Column n_heads: Heads of the group in this category.
-- Column n_classified: Heads of the group with a category (r_q and r_k not NULL).
-- Column fraction: n_heads / n_classified.
with categories(category, category_order) as (
    values
        ('position-dominated', 1),
        ('q-positional', 2),
        ('k-positional', 3),
        ('content-focused', 4),
        ('mixed', 5)
)
select
    s.scope,
    s.family,
    s.model,
    c.category,
    c.category_order,
    count(distinct s.source_model) as n_models,
    count(*) filter (where s.category = c.category) as n_heads,
    count(s.category) as n_classified,
    n_heads / nullif(n_classified, 0) as fraction
from scoped_heads s
cross join categories c
group by s.scope, s.family, s.model, c.category, c.category_order
order by case s.scope when 'overall' then 0 when 'family' then 1 else 2 end, s.family, s.model, c.category_order

-- Attention on token 0 per head and text (Gu et al. 2025's per-sequence alpha_1): the mean weight on token 0 of the text's queries below params.sink_context, and whether it exceeds params.sink_epsilon.
-- Seed: - (Gu et al. 2025, When Attention Sink Emerges, section 3.2: a head has a sink on a sequence when alpha_1 > epsilon)
-- Depends: params
-- From attention_mass_text (captures with each query's softmax normaliser). alpha0 is the width-
-- weighted mean of the text's position bins below sink_context: sum_b w_b alpha0_b / sum_b w_b,
-- w_b = q_hi - q_lo. A text counts only when every one of its positions below sink_context (or
-- below its end) was captured as a query that saw token 0 (a dense capture, --dense): then alpha0 is
-- exactly Gu et al.'s alpha_1 = (1/T) sum_{t<T} A_{t,0}, query 0 included. A sampled text's alpha0
-- would rest on a few queries per bin, and thresholding such noisy values moves the rate (on the
-- bundled sample's 44 heads: 58.6% per text from ~6 texts a head, against 67.3% from every position
-- of 100 texts), so a sampled capture has no rows here: its pooled rate (sink_heads) stands, and
-- sink_rate says that the per-text one needs --dense.
-- Column model: The model.
-- Column input_kind: What the captured texts were: 'natural', 'random' or 'repeated'.
-- Column layer: Layer index.
-- Column head: Query head index.
-- Column example_id: The text.
-- Column n_queries: The text's queries below sink_context (every position: all of them captured).
-- Column n_bins: Position bins below sink_context (all of them have such a query).
-- Column alpha0: The text's mean weight on token 0 over positions below sink_context (bins weighted by width).
-- Column is_sink: alpha0 > params.sink_epsilon: the head has a sink on this text.
select
    a.model,
    coalesce(a.input_kind, 'natural') as input_kind,
    a.layer,
    a.head,
    a.example_id,
    sum(a.n_queries) as n_queries,
    count(*) as n_bins,
    sum(a.alpha0 * (a.q_hi - a.q_lo)) / sum(a.q_hi - a.q_lo) as alpha0,
    sum(a.alpha0 * (a.q_hi - a.q_lo)) / sum(a.q_hi - a.q_lo) > any_value(p.sink_epsilon) as is_sink
from attention_mass_text a
cross join params p
where a.q_hi <= p.sink_context and a.n_queries > 0
group by a.model, coalesce(a.input_kind, 'natural'), a.layer, a.head, a.example_id
-- (every position from 0 up: bins are numbered 0, 1, 2, ... from position 0, bin b ending at
-- 4^(b+1), each holding a query per position; the last reaches sink_context, or the text ends inside it)
having count(*) = max(a.bin) + 1 and min(a.bin) = 0 and sum(a.n_queries) = sum(a.q_hi - a.q_lo)
    and (max(a.q_hi) >= any_value(p.sink_context) or max(a.q_hi) < pow(4, max(a.bin) + 1))
order by all

"""Fitting a table of text to a terminal's width, as the duckdb CLI does: the columns that fit, the rest elided.

A column is never squeezed below its header, nor below the width of its values when they are short
(ids, names, numbers: a key cut or broken over lines reads as another key). Only columns of long
text (a statement, a description) get less than their widest value, never less than
:data:`LONG_TEXT_MIN`, and wrap inside it. Columns are kept in their order of importance
(:func:`importance`: keys and labels, the values, the metrics, model facts, context, all-NULL columns) while they fit; the others are elided
behind one ``…`` column and named in a note.
"""

from __future__ import annotations

from dataclasses import dataclass

SHORT = 40  # values up to this wide are shown whole, on one line
LONG_TEXT_MIN = 24  # the narrowest a column of longer text gets (it wraps inside it)
ELIDED = "\u2026"  # the header and cells of the column that stands for the elided ones


@dataclass(frozen=True)
class Fit:
    """Which columns to show (indices into the table's) and how wide each is; ``elided`` counts the others."""

    columns: list[int]
    widths: list[int]
    elided: int


def frame_width(widths: list[int]) -> int:
    """Characters a boxed table with these column widths takes: a border and a space each side of every cell."""
    return sum(w + 3 for w in widths) + 1


# Columns that say which row this is (kept first), and the values a finding or view exists for
# (kept next, before any other number). Everything else that is text, and above all long text (a
# statement, a description, the seed's wording), is context: the first to go.
KEYS = frozenset({
    "model", "id", "scope", "family", "layer", "head", "kv_head", "pc", "plane", "estimator", "bin_kind", "bin", "benchmark",
    "bench_model", "name", "table", "column", "metric", "taxonomy", "category", "input_kind", "kind", "grp",
})
# What a row's model is (its series, counts, RoPE, provenance): the same on every row of a
# model, so after the metrics and labels a query asked for (`select * from head_metrics` must show
# metrics, not ten columns of model facts).
MODEL_FACTS = frozenset({
    "series", "series_order", "phase", "step", "checkpoint", "n_layers", "head_dim", "n_q", "n_k", "n_dropped",
    "position_min", "position_max", "n_texts", "sliding_window", "depth", "depth_bin", "is_nope", "in_paper", "hf_model",
    "model_revision", "n_q_heads", "n_kv_heads", "gqa_ratio", "rope_theta", "rope_pairing", "rope_scaling", "rope",
    "rotary_dims", "rotary_offset", "rope_source", "rope_inv_freq", "layer_rope_inv_freq", "attention_scale",
    "layer_rope_theta", "layer_rope_scaling", "position_scaling", "pre_rope", "weights_sha256", "nope_layers",
    "revision", "b_method", "capture", "ingested_at", "category_order", "sign_anchor",
})
VALUES = (  # in this order: a finding's measured value (with its interval) before its verdict, then the rest
    "measured", "status", "verdict", "ingested", "value", "fraction", "n", "n_heads", "n_models",
)
CONTEXT = frozenset({
    "seed", "finding", "statement", "estimand", "criterion", "ci_method", "seed_value", "description", "notes",
    "note", "why", "source", "location", "reads", "unit",
})


def importance(names: list[str], rows: list[list[str]]) -> tuple[list[int], int]:
    """The columns' indices from the most important to the least, and how many of them are essential.

    The order: keys and labels, the values (a finding's measured value and verdict, a fraction),
    other numbers (the metrics), short text, model facts (:data:`MODEL_FACTS`), context (long text,
    descriptions), and last the columns that are NULL on every row. Within a rank the table's own
    order is kept. The
    essential ones are the keys and the values: a narrow terminal wraps them before dropping them,
    and drops every other column from the end of the order first.
    """
    def numeric(i: int) -> bool:
        seen = False
        for r in rows:
            cell = r[i]
            if cell in ("NULL", "NaN", ""):
                continue
            try:
                float(cell)
            except ValueError:
                return False
            seen = True
        return seen

    def rank(i: int) -> tuple[int, int]:
        name = names[i].lower()
        if rows and all(r[i] in ("NULL", "") for r in rows):
            return 6, i  # says nothing on these rows: the first to go
        long = any(_longest_line(r[i]) > SHORT for r in rows)  # wraps: a key that wraps reads as two rows
        if name in KEYS and not long:
            return 0, i
        if name in VALUES:
            return 1, VALUES.index(name)
        if name in CONTEXT or long:
            return 5, i
        if name in MODEL_FACTS:
            return 4, i
        return (2 if numeric(i) else 3), i

    ranks = {i: rank(i) for i in range(len(names))}
    order = sorted(range(len(names)), key=ranks.__getitem__)
    return order, sum(ranks[i][0] <= 1 for i in order)


def fit_columns(names: list[str], rows: list[list[str]], width: int | None, order: list[int] | None = None,
                essential: int = 0) -> Fit:
    """The columns of a table (``names``, cells as text) that fit ``width`` characters, and their widths.

    ``width`` None: every column at its natural width (a file or a pipe has no edge). ``order``: the
    columns from the most important (default: the table's order); those that do not fit are dropped
    from its end, and the ones shown keep the table's order. The first ``essential`` of them may
    wrap their long values to make room for each other; the rest are added only while every value
    of up to :data:`SHORT` characters stays whole.
    """
    natural = [max([len(n)] + [_longest_line(r[i]) for r in rows]) for i, n in enumerate(names)]
    if width is None:
        return Fit(list(range(len(names))), natural, 0)
    # At least: the header, and every value of up to SHORT characters whole (one long value in a
    # column must not break the others); long text wraps, never in fewer than LONG_TEXT_MIN.
    least = [n if n <= SHORT else max([len(h), LONG_TEXT_MIN] + [k for r in rows if (k := _longest_line(r[i])) <= SHORT])
             for i, (h, n) in enumerate(zip(names, natural))]
    # Squeezed: a column with long values in LONG_TEXT_MIN (its short values may wrap too).
    squeezed = [n if n <= SHORT else max(len(h), LONG_TEXT_MIN) for h, n in zip(names, natural)]
    sizes = least
    shown: list[int] = []
    for pos, i in enumerate(order if order is not None else range(len(names))):
        rest = len(names) - len(shown) - 1  # columns after this one: if any, the elision column needs room

        def need(ws: list[int]) -> int:
            return frame_width([ws[j] for j in shown] + [ws[i]] + ([len(ELIDED)] if rest else []))

        if need(sizes) <= width:
            shown.append(i)
        elif pos < essential and need(squeezed) <= width:
            sizes = squeezed  # the essential columns wrap rather than one of them being dropped
            shown.append(i)
        else:
            break
    shown.sort()
    least = sizes
    if not shown:  # not even the first column fits: it gets what there is (a terminal narrower than a key)
        first = order[0] if order else 0
        others = len(ELIDED) + 3 if len(names) > 1 else 0
        return Fit([first], [max(1, width - frame_width([0]) - others)], len(names) - 1)
    widths = [least[i] for i in shown]
    elided = len(names) - len(shown)
    spare = width - frame_width(widths + ([len(ELIDED)] if elided else []))
    # What is left goes to the wrapping columns in proportion to what each lacks, none beyond its
    # natural width (a long description gets more than a short list of names).
    wants = [natural[i] - w for i, w in zip(shown, widths)]
    total = sum(wants)
    if total:
        gives = [min(want, spare * want // total) for want in wants]
        for k, give in enumerate(gives):
            widths[k] += give
        spare -= sum(gives)
        for k in sorted(range(len(wants)), key=lambda k: gives[k] - wants[k]):  # the rest, one each
            if spare and widths[k] < natural[shown[k]]:
                widths[k] += 1
                spare -= 1
    return Fit(shown, widths, elided)


def _longest_line(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def line_records(names: list[str], rows, write) -> int:
    """One record per row, ``name = value`` a line, names right-aligned, a blank line between records (duckdb's ``.mode line``).

    ``rows`` is an iterable of row tuples of text; ``write`` takes each chunk of text. Returns the row count.
    """
    pad = max((len(n) for n in names), default=0)
    n = 0
    for row in rows:
        write(("\n" if n else "") + "".join(f"{name:>{pad}} = {value}\n" for name, value in zip(names, row)))
        n += 1
    return n

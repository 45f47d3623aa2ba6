"""Fitting a table of text to a terminal's width, as the duckdb CLI does: the columns that fit, the rest elided.

A column is never squeezed below its header, nor below the width of its values when they are short
(ids, names, numbers: a key cut or broken over lines reads as another key). Only columns of long
text (a statement, a description) get less than their widest value, never less than
:data:`LONG_TEXT_MIN`, and wrap inside it. Columns are kept from the left (where the keys are)
while they fit; the others are elided behind one ``…`` column and counted for a note.
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


def fit_columns(names: list[str], rows: list[list[str]], width: int | None) -> Fit:
    """The columns of a table (``names``, cells as text) that fit ``width`` characters, and their widths.

    ``width`` None: every column at its natural width (a file or a pipe has no edge).
    """
    natural = [max([len(n)] + [_longest_line(r[i]) for r in rows]) for i, n in enumerate(names)]
    if width is None:
        return Fit(list(range(len(names))), natural, 0)
    least = [n if n <= SHORT else max(len(h), LONG_TEXT_MIN) for h, n in zip(names, natural)]
    shown: list[int] = []
    for i in range(len(names)):
        rest = len(names) - len(shown) - 1  # columns after this one: if any, the elision column needs room
        need = frame_width([least[j] for j in shown] + [least[i]] + ([len(ELIDED)] if rest else []))
        if need > width:
            break
        shown.append(i)
    if not shown:  # not even the first column fits: it gets what there is (a terminal narrower than a key)
        others = len(ELIDED) + 3 if len(names) > 1 else 0
        return Fit([0], [max(1, width - frame_width([0]) - others)], len(names) - 1)
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

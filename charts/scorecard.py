"""The report's scorecard: one verdict per claim of the seeds, from all of the claim's rows.

A claim (a :class:`~qkdb.charts.claims.ClaimGroup`) is measured by several ``findings`` rows: its
parts (Q and K shares, a mean and a difference of means), its scopes (overall, per family). The
scorecard's verdict for the claim is the verdict its rows with data agree on; where they disagree
it is **mixed**, and the claim's rows are listed under it, each with its own value and verdict, so
a claim never reads *holds* while one of its own measurements does not hold. A row that is a
difference or a ratio of two means (or a group's lead over the others) prints with its two inputs,
so that ``0.07`` reads as ``0.55 − 0.48``.
"""

from __future__ import annotations

import html
import re

import duckdb

from qkdb.charts import claims
from qkdb.charts.data import rows
from qkdb.charts.report_html import STATUSES, esc, status_class, verdict

MIXED = "mixed"
NO_DATA = "no data"

# The two inputs of every row whose value combines two means (sql/finding_inputs.sql, its `stat`).
_INPUTS = """
with fi as (
    select id, scope, stat, grp, arm, x, y from finding_inputs where stat in ('diff_of_means', 'ratio_of_means', 'lead')
),
groups as (
    select id, scope, grp, arm, avg(x) as mean_x from fi where stat = 'lead' group by all
)
select id, scope, any_value(stat) as stat, avg(x) as x, avg(y) as y, null::varchar as other
from fi where stat <> 'lead' group by id, scope
union all
select id, scope, 'lead', max(mean_x) filter (where arm = 1), max(mean_x) filter (where arm = 0),
       arg_max(grp, mean_x) filter (where arm = 0)
from groups group by id, scope
order by id, scope
"""
_OPERATOR = {"diff_of_means": "\u2212", "ratio_of_means": "\u00f7", "lead": "\u2212"}


def claim_verdict(rs: list[dict]) -> str:
    """The claim's verdict from its rows: the status its rows with data share, ``mixed`` when they differ, else ``no data``."""
    seen = {r.get("status") for r in rs if r.get("status") not in (None, NO_DATA)}
    if not seen:
        return NO_DATA
    return seen.pop() if len(seen) == 1 else MIXED


def inputs(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], dict]:
    """(id, scope) -> the two means a difference, ratio or lead row combines: ``stat``, ``x``, ``y``, ``other`` (the lead's runner-up group)."""
    return {(r["id"], r["scope"]): r for r in rows(con, _INPUTS)}


def _operands(statement: str, stat: str) -> tuple[str, str]:
    """The names of the two inputs, from the statement's formula (``...: mean r_q - mean |r_k|``)."""
    formula = statement.rsplit(": ", 1)[-1]
    parts = re.split(r" [-/] ", formula, maxsplit=1)
    if stat != "lead" and len(parts) == 2:
        return parts[0].strip(), parts[1].strip()
    return "its share", "the next group's"


_FIRST_NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(%?)")


def _number(v: float | None, like: str) -> str:
    """``v`` written as the measured value ``like`` writes its number (its decimals, a percent)."""
    if v is None:
        return "—"
    m = _FIRST_NUMBER.search(like)
    decimals = len(m.group(1) or "") if m else 3
    if m and m.group(2):
        return f"{100 * v:.{decimals}f}%"
    return f"{v:.{decimals}f}"


def measured_text(r: dict, given: dict[tuple[str, str], dict]) -> str:
    """A row's measured value, and for a difference, ratio or lead its two inputs: ``0.07 [0.01, 0.13] = mean r_q 0.55 − mean |r_k| 0.48``."""
    measured = r.get("measured") or ""
    two = given.get((r.get("id"), r.get("scope")))
    if not measured or two is None or two["x"] is None:
        return measured
    a, b = _operands(r.get("statement") or "", two["stat"])
    if two["stat"] == "lead":
        b = f"{two['other']}'s" if two["other"] else b
    return (f"{measured} = {a} {_number(two['x'], measured)} {_OPERATOR[two['stat']]} "
            f"{b} {_number(two['y'], measured)}")


def group_rows(group: claims.ClaimGroup, findings: list[dict]) -> list[dict]:
    return [r for r in findings if claims.group_of(r["id"]) is group]


def headline(group: claims.ClaimGroup, rs: list[dict]) -> dict | None:
    """The row that stands for the claim: its headline row, else (without data) the first row with data."""
    with_data = [r for r in rs if r.get("status") not in (None, NO_DATA)]
    head = next((r for r in rs if r["id"] == group.headline), None)
    if head is not None and (head.get("status") not in (None, NO_DATA) or not with_data):
        return head
    return with_data[0] if with_data else (rs[0] if rs else None)


def tally(rs: list[dict]) -> str:
    """Chips counting a claim's rows by verdict."""
    chips = []
    for s in STATUSES:
        n = sum(r.get("status") == s for r in rs)
        if n:
            chips.append(f'<i class="{status_class(s)}" title="{n} {html.escape(s)}">{n}</i>')
    return f'<span class="tally">{"".join(chips)}</span>'


def scorecard(findings: list[dict], given: dict[tuple[str, str], dict]) -> str:
    """The scorecard table: a row per claim with its verdict; a mixed claim's rows with data listed under it."""
    out = ['<table class="scorecard"><colgroup><col style="width:40%"><col style="width:12%"><col style="width:24%">'
           '<col style="width:13%"><col style="width:11%"></colgroup>'
           '<thead><tr><th>claim</th><th>seed says</th><th>measured here [95% interval]</th>'
           "<th>verdict</th><th>all its rows</th></tr></thead><tbody>"]
    for g in claims.GROUPS:
        rs = group_rows(g, findings)
        status = claim_verdict(rs)
        h = headline(g, rs) or {}
        claim = (f'<span class="seedtag">{g.key.split(".")[0]} · {html.escape(g.label)}</span> '
                 f'<a href="#{g.anchor}">{html.escape(g.claim)}</a>')
        if status == MIXED:
            listed = [r for r in rs if r.get("status") not in (None, NO_DATA)]
            out.append(
                f'<tr class="{status_class(status)}" data-claim="{html.escape(g.key)}"><td class="claim">{claim}</td>'
                f'<td class="num"></td><td class="num">its {len(listed)} rows with data disagree:</td>'
                f'<td>{verdict(status)}</td><td>{tally(rs)}</td></tr>'
            )
            out.extend(
                f'<tr class="subrow {status_class(r.get("status"))}" data-claim="{html.escape(g.key)}" '
                f'data-row="{html.escape(r["id"])}"><td class="claim"><a href="#f-{html.escape(r["id"])}">'
                f'{esc(r.get("statement"))}</a>{_scope(r)}</td><td class="num">{esc(r.get("seed_value"))}</td>'
                f'<td class="num">{html.escape(measured_text(r, given))}</td><td>{verdict(r.get("status"))}</td><td></td></tr>'
                for r in listed
            )
            continue
        out.append(
            f'<tr class="{status_class(status)}" data-claim="{html.escape(g.key)}"><td class="claim">{claim}</td>'
            f'<td class="num">{esc(h.get("seed_value"))}</td>'
            f'<td class="num">{html.escape(measured_text(h, given)) or "—"}</td>'
            f'<td>{verdict(status)}</td><td>{tally(rs)}</td></tr>'
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _scope(r: dict) -> str:
    scope = r.get("scope")
    return "" if not scope or scope == "overall" else f' <span class="seedtag">· {html.escape(scope)}</span>'

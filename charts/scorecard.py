"""The report's scorecard: one verdict per claim of the seeds, from all of the claim's rows.

A claim (a :class:`~qkdb.charts.claims.ClaimGroup`) is measured by several ``findings`` rows: its
parts (Q and K shares, a mean and a difference of means), its scopes (overall, per family). The
scorecard's verdict for the claim is the verdict all its rows agree on. Where some rows have no data
it is **partly tested: k of n parts**, and where the rows with data disagree it is **mixed**; then
the claim's rows are listed under it, each with its own value and verdict, and the parts without
data are named, so a claim never reads *holds* while one of its parts does not hold or was not tested. A row that is a
difference or a ratio of two means (or a group's lead over the others) prints with its two inputs,
as ``findings.measured`` gives them, so that ``0.07`` reads as ``0.55 - 0.48 = 0.07``.
"""

from __future__ import annotations

import html

import duckdb

from qkdb.charts import claims
from qkdb.charts.data import rows
from qkdb.charts.report_html import STATUSES, esc, status_class, verdict

MIXED = claims.MIXED
NO_DATA = claims.NO_DATA

# The group a lead (sql/finding_inputs.sql, stat 'lead') is measured against: the highest other one.
# The two means themselves are in findings.measured ('45.0% - 30.0% = 15.0%', from finding_values).
_RUNNERS_UP = """
with groups as (
    select id, scope, grp, arm, favg(x) as mean_x from finding_inputs where stat = 'lead' group by all
)
select id, scope, arg_max(grp, mean_x) filter (where arm = 0) as other
from groups group by id, scope
order by id, scope
"""


def claim_verdict(rs: list[dict]) -> str:
    """The claim's verdict from all its rows (:func:`qkdb.charts.claims.claim_state`)."""
    return claims.claim_state(rs).status


def inputs(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], dict]:
    """(id, scope) -> ``other``: the group a lead row's group is measured against."""
    return {(r["id"], r["scope"]): r for r in rows(con, _RUNNERS_UP)}


def measured_text(r: dict, given: dict[tuple[str, str], dict]) -> str:
    """A row's measured value as ``findings.measured`` says it (a difference or ratio with its two
    means: ``0.55 - 0.48 = 0.07 [0.01, 0.13]``), a lead's with the group it leads: ``(vs Qwen 2.5)``."""
    measured = r.get("measured") or ""
    other = (given.get((r.get("id"), r.get("scope"))) or {}).get("other")
    return f"{measured} (vs {other})" if measured and other else measured


def group_rows(group: claims.ClaimGroup, findings: list[dict]) -> list[dict]:
    return [r for r in findings if claims.group_of(r["id"]) is group]


def headline(group: claims.ClaimGroup, rs: list[dict]) -> dict | None:
    """The claim's own headline row, with data or not: never a row picked because it has data."""
    return next((r for r in rs if r["id"] == group.headline), None)


def tally(rs: list[dict]) -> str:
    """Chips counting a claim's rows by verdict."""
    chips = []
    for s in STATUSES:
        n = sum(r.get("status") == s for r in rs)
        if n:
            chips.append(f'<i class="{status_class(s)}" title="{n} {html.escape(s)}">{n}</i>')
    return f'<span class="tally">{"".join(chips)}</span>'


def scorecard(findings: list[dict], given: dict[tuple[str, str], dict]) -> str:
    """The scorecard table: a row per claim with its verdict; a mixed or partly tested claim's parts listed under it."""
    out = ['<table class="scorecard"><colgroup><col style="width:40%"><col style="width:12%"><col style="width:24%">'
           '<col style="width:13%"><col style="width:11%"></colgroup>'
           '<thead><tr><th>claim</th><th>seed says</th><th>measured here [95% interval]</th>'
           "<th>verdict</th><th>all its rows</th></tr></thead><tbody>"]
    for g in claims.GROUPS:
        rs = group_rows(g, findings)
        state = claims.claim_state(rs)
        key = html.escape(g.key)
        claim = (f'<span class="seedtag">{g.key.split(".")[0]} · {html.escape(g.label)}</span> '
                 f'<a href="#{g.anchor}">{html.escape(g.claim)}</a>')
        if state.status in (MIXED, claims.PARTLY):
            said = (f"its {len(state.tested)} parts disagree:" if state.status == MIXED
                    else f"{len(state.tested)} of {len(state.parts)} parts tested:")
            out.append(
                f'<tr class="{status_class(state.status)}" data-claim="{key}"><td class="claim">{claim}</td>'
                f'<td class="num"></td><td class="num">{said}</td>'
                f'<td>{verdict(state.status, state.label)}</td><td>{tally(rs)}</td></tr>'
            )
            out.extend(
                f'<tr class="subrow {status_class(r.get("status"))}" data-claim="{key}" '
                f'data-row="{html.escape(r["id"])}"><td class="claim"><a href="#f-{html.escape(r["id"])}">'
                f'{esc(r.get("statement"))}</a>{_scope(r)}</td><td class="num">{esc(r.get("seed_value"))}</td>'
                f'<td class="num">{html.escape(measured_text(r, given))}</td><td>{verdict(r.get("status"))}</td><td></td></tr>'
                for r in state.tested
            )
            if state.untested:
                names = ", ".join(f'<a href="#f-{html.escape(r["id"])}">{html.escape(r["id"])}</a>' for r in state.untested)
                out.append(
                    f'<tr class="subrow no-data" data-claim="{key}" data-row="untested"><td class="claim" colspan="3">'
                    f"without data ({len(state.untested)} parts): {names}</td><td>{verdict(NO_DATA)}</td><td></td></tr>"
                )
            continue
        h = headline(g, rs) or {}
        out.append(
            f'<tr class="{status_class(state.status)}" data-claim="{key}"><td class="claim">{claim}</td>'
            f'<td class="num">{esc(h.get("seed_value"))}</td>'
            f'<td class="num">{html.escape(measured_text(h, given)) or "—"}</td>'
            f'<td>{verdict(state.status)}</td><td>{tally(rs)}</td></tr>'
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _scope(r: dict) -> str:
    scope = r.get("scope")
    return "" if not scope or scope == "overall" else f' <span class="seedtag">· {html.escape(scope)}</span>'

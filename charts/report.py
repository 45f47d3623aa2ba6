"""``qkdb report``: one self-contained HTML page of the findings and every figure the data supports.

The page reads top-down as a paper would: what was ingested; a scorecard of the seeds' claims,
each with the value measured here, its 95% interval and the verdict; the headline figures; a
contents list of every figure; then one section per claim group (:mod:`qkdb.charts.claims`) with
the claim, its findings rows and the figures that show it side by side, every figure captioned
with what it shows on this data; the full findings table (filterable) last. The cross-model
scatters link each head to its sampled points (:mod:`qkdb.charts.explorer`). It works offline:
see :mod:`qkdb.charts.report_html`.
"""

from __future__ import annotations

import datetime as dt
import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb
from qkdb.charts import claims, registry, scorecard, style
from qkdb.charts.caption import text_of
from qkdb.charts.data import ingested, one_read_of_models, resolve_models, rows, single_threaded
from qkdb.charts.explorer import shared as explorer_shared
from qkdb.charts.report_html import (
    STATUSES,
    DataStore,
    esc,
    figure_page,
    page,
    status_class,
    verdict,
)

from qkdb.errors import ChartError

if TYPE_CHECKING:
    from qkdb.charts.report_split import Helper

__all__ = ["Report", "build_report", "figure_page"]

MODEL_COLUMNS = (
    "model", "family", "series", "phase", "step", "n_layers", "n_q_heads", "n_kv_heads", "head_dim",
    "n_heads", "source", "ingested_at",
)
FINDING_COLUMNS = (
    "id", "seed", "finding", "statement", "scope", "seed_value", "measured", "status", "criterion", "ci_method",
    "n_models", "n_heads",
)
# The findings table's columns. The seed's place ("Finding 2") and the criterion are set inside the
# statement's cell, so that the table fits a 1,024-px window without losing either.
TABLE_COLUMNS = ("id", "statement", "scope", "seed_value", "measured", "status")


@dataclass
class Report:
    html: str
    findings: list[dict] = field(default_factory=list)  # the findings table's rows
    shown: list[str] = field(default_factory=list)  # "name" or "name (context)"
    missing: list[tuple[str, str]] = field(default_factory=list)  # (figure, reason)


@dataclass
class Drawn:
    """A figure the page shows."""

    number: int
    figure: registry.Figure
    context: str
    spec_id: str
    title: str
    subtitle: list[str]
    caption: str

    @property
    def anchor(self) -> str:
        return f"fig-{self.number}"

    @property
    def label(self) -> str:
        return self.figure.name + (f" ({self.context})" if self.context else "")


def _jobs(con: duckdb.DuckDBPyConnection, models, series) -> list[tuple[registry.Figure, dict, str]]:
    """(figure, builder options, context label) for every figure the report tries, in section order."""
    infos = ingested(con)
    if series:
        series_list = [series] if isinstance(series, str) else list(series)
    else:
        series_list = sorted({i.series for i in infos if i.series})
    if models:
        collage_models = [models] if isinstance(models, str) else list(models)
    else:
        pooled = resolve_models(con) if infos else []
        collage_models = pooled[:1]
    jobs = []
    for group in claims.GROUPS:
        for fig in (registry.FIGURES[name] for name in group.figures):
            if fig.scope == "models":
                jobs.append((fig, {"models": models}, ""))
            elif fig.scope == "model":
                for m in collage_models or [None]:
                    jobs.append((fig, {"models": m}, m or ""))
            else:
                for s in series_list or [None]:
                    jobs.append((fig, {"series": s}, s or ""))
    return jobs


def _split_title(spec: dict) -> tuple[dict, str, list[str]]:
    """The spec without its top-level title, and that title's text and subtitle lines.

    On the page the title and subtitle are HTML above and below the figure: the drawing keeps its
    whole width for the plot instead of a subtitle line as wide as the page.
    """
    spec = dict(spec)
    t = spec.pop("title", None)
    if isinstance(t, dict):
        text, sub = t.get("text", ""), t.get("subtitle", [])
    else:
        text, sub = t or "", []
    text = " ".join(text) if isinstance(text, list) else str(text)
    sub = [sub] if isinstance(sub, str) else [s for s in sub if s]
    return spec, text, sub


@dataclass(frozen=True)
class Made:
    """One figure job's outcome: its spec (title still in it), or why the data cannot support it."""

    spec: dict | None = None
    error: str | None = None


def make_figure(con: duckdb.DuckDBPyConnection, fig: registry.Figure, opts: dict) -> Made:
    """Build one figure job's spec (:func:`build_report` and the report's second process call it)."""
    from qkdb.charts.altair_copy import cheap_copies
    from qkdb.charts.api import chart

    try:
        with cheap_copies():
            built = chart(fig.name, con, **opts, **({"interactive": True} if fig.interactive else {}))
            # Not validated against the schema here (a third of the build time): the test-suite
            # validates every figure's spec, static and interactive.
            return Made(spec=built.to_dict(validate=False))
    except ChartError as exc:
        if fig.name in AUTHORS_FALLBACK and "source" not in opts:
            # No model of the user's meets a benchmark: the seeds' author's values still show the
            # join (the figure's subtitle says whose values they are), rather than nothing.
            try:
                with cheap_copies():
                    return Made(spec=chart(fig.name, con, **opts, source="thesis").to_dict(validate=False))
            except ChartError:
                pass
        return Made(error=str(exc))


# The benchmark figures: drawn from the seeds' author's values when none of the user's models is mapped.
AUTHORS_FALLBACK = ("plasticity-vs-benchmark", "plasticity-retention")


class _Figures:
    """The page's figures in page order, their specs (data in one store) and what was not shown."""

    def __init__(self):
        self.store = DataStore()
        self.specs: dict[str, dict] = {}
        self.drawn: list[Drawn] = []
        self.missing: list[tuple[str, str]] = []
        self.missing_by_group: dict[str, list[tuple[str, str, str]]] = {}

    def add(self, spec: dict) -> str:
        spec_id = f"s{len(self.specs) + 1}"
        self.specs[spec_id] = self.store.take(spec)
        return spec_id

    def record(self, group: claims.ClaimGroup, fig: registry.Figure, context: str, made: Made) -> Drawn | None:
        if made.spec is None:
            label = fig.name + (f" ({context})" if context else "")
            self.missing.append((label, made.error or ""))
            self.missing_by_group.setdefault(group.key, []).append((fig.name, context, made.error or ""))
            return None
        spec, title, sub = _split_title(made.spec)
        drawn = Drawn(len(self.drawn) + 1, fig, context, self.add(spec), title, sub, text_of(spec))
        self.drawn.append(drawn)
        return drawn

    def front(self) -> list[Drawn]:
        """The headline figures: the first ones drawn of :data:`claims.FRONT` (their specs are reused)."""
        out = []
        for name in claims.FRONT:
            d = next((d for d in self.drawn if d.figure.name == name), None)
            if d is not None:
                out.append(d)
            if len(out) == claims.N_FRONT:
                break
        # Chosen by preference, shown in the order of their numbers (Figure 6, 9, 14, 7 read as a mistake).
        return sorted(out, key=lambda d: d.number)


def _figure_html(d: Drawn, link: bool = False) -> str:
    tag = f"{html.escape(d.figure.seed_figure)} · <code>{html.escape(d.figure.name)}</code>"
    if d.context:
        tag += f" · {html.escape(d.context)}"
    title = f"Figure {d.number}. {html.escape(d.title)}"
    if link:
        title = f'<a href="#{d.anchor}">{title}</a>'
    sub = "".join(f'<span class="sub">{html.escape(s)}</span>' for s in d.subtitle)
    return (
        f'<figure id="{d.anchor if not link else d.anchor + "-front"}" data-figure="{html.escape(d.figure.name)}">'
        f'<div class="figtitle">{title} <span class="tag">{tag}</span></div>'
        f'<div class="vis" data-spec="{d.spec_id}"></div>'
        f"<figcaption>{sub}{html.escape(d.caption)}</figcaption></figure>"
    )


def _missing_html(name: str, context: str, reason: str) -> str:
    what = name + (f" ({context})" if context else "")
    return f'<p class="missing" data-missing="{html.escape(name)}">Not shown: <code>{html.escape(what)}</code>: {html.escape(reason)}</p>'


def _row_values(r: dict, given: dict) -> str:
    return f"seed {esc(r.get('seed_value'))} · here {html.escape(scorecard.measured_text(r, given)) or '—'}"


def _claim_section(group: claims.ClaimGroup, findings: list[dict], drawn: list[Drawn], fig_index: dict,
                   missing: list[tuple[str, str, str]], given: dict) -> str:
    rs = scorecard.group_rows(group, findings)
    h = scorecard.headline(group, rs)
    state = claims.claim_state(rs)
    card = [f'<div class="seedtag">{html.escape(claims.SEEDS[group.seed])} · {html.escape(group.label)}</div>',
            f'<h3 class="claimtext">{html.escape(group.claim)}</h3>']
    if h:
        why = ""
        if state.status == scorecard.MIXED:
            why = '<span class="vals">its rows disagree: each has its verdict below</span><br>'
        elif state.status == claims.PARTLY:
            why = (f'<span class="vals">{len(state.untested)} of its {len(state.parts)} parts have no data '
                   f'({html.escape(", ".join(r["id"] for r in state.untested))}); the tested ones '
                   f'{"agree: " + html.escape(state.tested_status) if state.tested_status != scorecard.MIXED else "disagree"}'
                   "</span><br>")
        card.append(
            f'<div class="headline">{verdict(state.status, state.label)} ' + why
            + f'<span class="value">{html.escape(scorecard.measured_text(h, given)) or "no data"}</span>'
            f'<br><span class="vals">{esc(h.get("statement"))} · seed {esc(h.get("seed_value"))} · '
            f'{esc(h.get("criterion"))}</span></div>'
        )
    # Rows that measure one statement in several scopes (per family, per group of models) share it.
    by_statement: dict[str, list[dict]] = {}
    for r in rs:
        by_statement.setdefault(r.get("statement") or "", []).append(r)
    for statement, group_rows in by_statement.items():
        card.append(f'<div class="stmt">{esc(statement)}</div><ul class="rows">')
        card.extend(
            f'<li id="c-{html.escape(r["id"])}">{verdict(r.get("status"))} '
            f'<a href="#f-{html.escape(r["id"])}" title="{html.escape(r["id"])}">{esc(r.get("scope"))}</a>'
            f'<span class="vals">{_row_values(r, given)}</span></li>'
            for r in group_rows
        )
        card.append("</ul>")
    see = [fig_index[n] for n in group.see if n in fig_index]
    if see:
        card.append('<div class="see">Also shown in: ' + ", ".join(
            f'<a href="#{d.anchor}">Figure {d.number}</a> (<code>{html.escape(d.figure.name)}</code>)' for d in see
        ) + "</div>")
    figs = [_figure_html(d) for d in drawn] + [_missing_html(*m) for m in missing]
    if not figs:
        figs = ['<p class="meta">No figure of its own: the claim is one number, in the table beside it.</p>']
    return (f'<section class="claim" id="{group.anchor}"><div class="claim-card">{"".join(card)}</div>'
            f'<div class="figures">{"".join(figs)}</div></section>')


def _findings_cell(c: str, r: dict, given: dict) -> str:
    if c == "statement":
        return (f'<span class="seedtag">{esc(r.get("finding"))}</span> {esc(r.get("statement"))}'
                f'<span class="crit">{esc(r.get("criterion"))}</span>')
    if c == "measured":
        text = scorecard.measured_text(r, given)
        if text and not text.endswith("]") and r.get("ci_method"):
            # No interval: a verdict without one is 'inconclusive', and the reader must see why.
            return f'{html.escape(text)}<span class="crit">no interval: {esc(r["ci_method"])}</span>'
        return html.escape(text)
    return esc(r.get(c))


def _findings_table(findings: list[dict], fig_index: dict, given: dict) -> str:
    scopes = sorted({r.get("scope") or "" for r in findings})
    options = lambda values: "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)  # noqa: E731
    filters = (
        '<div class="filters">'
        f'<label>verdict <select data-filter="status"><option value="">all</option>{options(STATUSES)}</select></label>'
        f'<label>seed <select data-filter="seed"><option value="">all</option>{options(["003", "002"])}</select></label>'
        f'<label>scope <select data-filter="scope"><option value="">all</option>{options(scopes)}</select></label>'
        '<label>text <input type="search" data-filter="text" placeholder="id, statement, …"></label>'
        '<span id="findings-shown" class="meta"></span></div>'
    )
    head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in TABLE_COLUMNS) + "<th>figures</th>"
    out = [filters, f'<table class="findings"><thead><tr>{head}</tr></thead><tbody>']
    for r in findings:
        figs = [fig_index[n] for n in claims.figures_for(r["id"]) if n in fig_index]
        links = " ".join(f'<a href="#{d.anchor}" title="{html.escape(d.figure.name)}">{d.number}</a>' for d in figs)
        cells = "".join(f'<td class="{c}">{_findings_cell(c, r, given)}</td>' for c in TABLE_COLUMNS)
        out.append(
            f'<tr id="f-{html.escape(r["id"])}" class="{status_class(r.get("status"))}" data-status="{esc(r.get("status"))}" '
            f'data-seed="{esc(r.get("seed"))}" data-scope="{esc(r.get("scope"))}">{cells}<td class="figs">{links}</td></tr>'
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _contents(drawn: list[Drawn]) -> str:
    out = ['<nav class="contents" id="contents"><h2>Figures</h2><ol>']
    current = None
    for d in drawn:
        g = claims.home_of(d.figure.name)
        if g.seed != current:
            current = g.seed
            out.append(f'<li class="group">{html.escape(claims.SEEDS[g.seed])}</li>')
        out.append(f'<li value="{d.number}"><a href="#{d.anchor}">{html.escape(d.title)}</a> '
                   f'<span class="seedtag">{html.escape(d.label)}</span></li>')
    out.append('</ol><p class="meta"><a href="#findings">The full findings table</a>'
               ' · <a href="#scorecard">the scorecard</a></p></nav>')
    return "\n".join(out)


def _ingested(con: duckdb.DuckDBPyConnection, infos) -> tuple[str, str]:
    """The lead paragraph on what was ingested, and the models table (collapsed)."""
    if not infos:
        return ('<p class="missing">No model is ingested: run <code>qkdb ingest --model NAME</code> first.</p>', "")
    # Timestamps as text: fetching TIMESTAMPTZ into Python would need pytz.
    cols = ", ".join(
        "strftime(ingested_at, '%Y-%m-%d %H:%M UTC') as ingested_at" if c == "ingested_at" else c for c in MODEL_COLUMNS
    )
    model_rows = rows(con, f"select {cols} from models")
    order = {i.model: k for k, i in enumerate(infos)}
    model_rows.sort(key=lambda r: order.get(r["model"], 0))
    pooled = [i.model for i in infos if i.pooled]
    n_heads = sum(r["n_heads"] or 0 for r in model_rows)
    n_pooled = sum(r["n_heads"] or 0 for r in model_rows if r["model"] in set(pooled))
    families = sorted({i.family for i in infos if i.family})
    series: dict[str, int] = {}
    for i in infos:
        if i.series:
            series[i.series] = series.get(i.series, 0) + 1
    sources: dict[str, int] = {}
    for r in model_rows:
        sources[r["source"] or "unknown"] = sources.get(r["source"] or "unknown", 0) + 1
    standalone = sum(1 for i in infos if not i.series)
    parts = [f"<b>{len(infos)} model{'s' if len(infos) != 1 else ''}</b> ingested, {n_heads:,} query heads: "
             f"{standalone} standalone"]
    if series:
        parts.append(" and " + ", ".join(f"training series <code>{html.escape(s)}</code> ({n} checkpoints)"
                                         for s, n in series.items()))
    parts.append(f"; {len(families)} famil{'ies' if len(families) != 1 else 'y'} ({html.escape(', '.join(families))}). ")
    parts.append(f"Cross-model figures and the family and overall findings pool {len(pooled)} model(s), {n_pooled:,} heads "
                 "(every standalone model and each series' latest checkpoint). ")
    parts.append("Sources: " + ", ".join(f"{html.escape(k)} ({v})" for k, v in sources.items()) + ".")
    if set(sources) == {"simulate"}:
        parts.append(" <b>All of them are simulated</b> (<code>qkdb simulate</code>): the numbers below test the "
                     "pipeline, they say nothing about real models.")
    # Models captured in some of their layers only: their findings are about those layers.
    for r in rows(con, "select note from ingested_layers where subset order by model"):
        parts.append(f' <b class="layers-note">{html.escape(r["note"])}.</b>')
    table = ['<details><summary>The ingested models</summary><table class="models"><thead><tr>'
             + "".join(f"<th>{html.escape(c)}</th>" for c in MODEL_COLUMNS) + "</tr></thead><tbody>"]
    table += ["<tr>" + "".join(f'<td class="{c}">{esc(r.get(c))}</td>' for c in MODEL_COLUMNS) + "</tr>" for r in model_rows]
    table.append("</tbody></table></details>")
    return f'<p class="lead">{"".join(parts)}</p>', "\n".join(table)


def _label(job) -> str:
    fig, _, context = job
    return fig.name + (f" ({context})" if context else "")


def _make_all(con, jobs: list, progress, helper: Helper | None) -> list[Made]:
    """Every job's outcome, in job order: what this process took, then the helper's (or, failing it, built here)."""
    labels = [_label(j) for j in jobs]
    made: list[Made | None] = [None] * len(jobs)

    def here(i: int) -> None:
        made[i] = make_figure(con, jobs[i][0], jobs[i][1])
        if progress:
            progress(labels[i], made[i].spec is not None)

    with explorer_shared(), single_threaded(con):
        for i in helper.take(labels) if helper is not None else range(len(jobs)):
            here(i)
        got = helper.results(labels) if helper is not None else {}
        theirs = helper.theirs(labels) if helper is not None else set()
        for i in sorted(theirs):
            if i in got:
                made[i] = got[i]
                if progress:
                    progress(_label(jobs[i]), got[i].spec is not None)
            else:  # the helper failed or saw other data: built here, as without it
                here(i)
    return made


def build_report(
    con: duckdb.DuckDBPyConnection,
    *,
    models=None,
    series=None,
    title: str = "qkdb report",
    progress=None,
    findings_from: str = "findings",
    helper: Helper | None = None,
) -> Report:
    """The report page and what it shows; ``progress(name, ok)`` is called after each figure.

    ``findings_from`` is what the findings rows are selected from: the ``findings`` view, or the
    rows stored at publish while they match the data (``qkdb.warehouse.findings_source``).
    ``helper`` is a second process building a share of the figures (:mod:`qkdb.charts.report_split`);
    the page is the same, byte for byte, with or without it.
    """
    with one_read_of_models():
        return _build_report(con, models=models, series=series, title=title, progress=progress,
                             findings_from=findings_from, helper=helper)


def _build_report(con, *, models, series, title, progress, findings_from, helper) -> Report:
    from qkdb._version import version

    claims.check()
    infos = ingested(con)
    report = Report(html="")
    lead, models_table = _ingested(con, infos)
    try:
        report.findings = rows(con, f"select {', '.join(FINDING_COLUMNS)} from {findings_from}")
        findings_error = None
    except ChartError as exc:
        findings_error = str(exc)
    findings = report.findings
    try:  # the two means behind each difference or ratio row, printed beside it
        given = scorecard.inputs(con) if findings else {}
    except ChartError:
        given = {}

    jobs = _jobs(con, models, series)
    made = _make_all(con, jobs, progress, helper)
    figs = _Figures()
    by_group: dict[str, list[Drawn]] = {}
    for group in claims.GROUPS:
        for i, (fig, _, context) in enumerate(jobs):
            if fig.name in group.figures:
                d = figs.record(group, fig, context, made[i])
                if d is not None:
                    by_group.setdefault(group.key, []).append(d)
    # Figures are numbered in page order: sections follow claims.GROUPS, as the jobs do.
    front = figs.front()
    fig_index = {}
    for d in figs.drawn:
        fig_index.setdefault(d.figure.name, d)
    report.shown = [d.label for d in figs.drawn]
    report.missing = figs.missing

    now = _generated_at().strftime("%Y-%m-%d %H:%M UTC")
    counts = {s: sum(1 for f in findings if f.get("status") == s) for s in STATUSES}
    body = ["<main>", f"<h1>{html.escape(title)}</h1>",
            f'<p class="meta">Generated {now} by qkdb {html.escape(version())} · the seeds: combined Q/K PCA '
            "(seed 003) and planar rotation (seed 002) · every number below is computed from the warehouse.</p>",
            lead, models_table]
    body.append('<h2 id="scorecard" style="margin-top:22px">Scorecard: the seeds\' claims, measured here</h2>')
    if findings_error:
        body.append(f'<p class="missing">The findings view cannot be read: {html.escape(findings_error)}</p>')
    else:
        body.append('<p class="verdicts">' + "".join(
            f'<span class="{status_class(s)}">{counts[s]} {html.escape(s)}</span>' for s in STATUSES
        ) + f'<span class="meta">of {len(findings)} findings rows</span></p>')
        body.append(f'<p class="meta claims-count">Claims: {html.escape(claims.claim_counts(claims.claim_states(findings).values()))}</p>')
        body.append(
            '<p class="meta">One row per claim: the seed\'s value, the value measured on the ingested models with its 95% '
            "interval, and the verdict. A row <em>holds</em> or <em>does not hold</em> only when the interval decides it "
            "against the criterion; otherwise it is <em>inconclusive</em> (docs/findings.md). Every row of a claim is one "
            "of its parts. A claim takes the verdict all its parts agree on; where some have no data it reads "
            "<em>partly tested: k of n parts</em>, where those with data disagree <em>mixed</em>, and its parts are "
            "listed under it. "
            "A difference or ratio of two means is printed with the two. The chips count all the claim's rows by "
            "verdict; the claim's section has each of them.</p>"
        )
        body.append(scorecard.scorecard(findings, given))
    if front:
        body.append('<h2 id="headline-figures" style="margin-top:26px">Headline figures</h2><div class="front-figures">')
        body.extend(_figure_html(d, link=True) for d in front)
        body.append("</div>")
    body.append(_contents(figs.drawn))
    for seed, seed_title in claims.SEEDS.items():
        body.append(f'<div class="part" id="seed-{seed}"><h2>{html.escape(seed_title)}</h2></div>')
        for group in (g for g in claims.GROUPS if g.seed == seed):
            body.append(_claim_section(group, findings, by_group.get(group.key, []), fig_index,
                                       figs.missing_by_group.get(group.key, []), given))
    body.append('<div class="part" id="findings"><h2>All findings</h2></div>')
    body.append(
        '<p class="meta">Every row of the <code>findings</code> view (<code>qkdb findings</code>, '
        "<code>qkdb describe findings</code>): the value measured here with its 95% interval in brackets, the verdict and "
        "its criterion; the last column links the figures that show the row's claim.</p>"
    )
    body.append(_findings_table(findings, fig_index, given) if findings else '<p class="meta">No findings rows.</p>')
    if report.missing:
        body.append('<div class="part" id="not-shown"><h2>Figures the data cannot support</h2></div><ul>')
        body.extend(f"<li><code>{html.escape(name)}</code>: {html.escape(reason)}</li>" for name, reason in report.missing)
        body.append("</ul>")
    body.append(f'<p class="meta">Fonts: {html.escape(style.FONT_STACK)}. Rendered in the browser from the inline '
                "Vega-Lite specs; the page loads nothing from the network.</p></main>")
    report.html = page(title, body, figs.specs, figs.store)
    return report


def _generated_at() -> dt.datetime:
    """When the page says it was made: now, or ``$SOURCE_DATE_EPOCH`` (the reproducible-builds convention).

    With it set, the same warehouse gives the same bytes, e.g. a pulled warehouse's report and its
    publisher's (docs/sharing.md).
    """
    import os

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc)
    return dt.datetime.now(dt.timezone.utc)

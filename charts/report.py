"""``qkdb report``: one self-contained HTML page with the models, the findings and every figure.

The page works offline: the Vega/Vega-Lite/vega-embed JavaScript comes inline from vl-convert's
bundle (no CDN), each figure's Vega-Lite spec sits in a ``<script type="application/json">``
block, and one small script renders them. Figures are grouped as the seeds group them
(cross-model PCA, cross-model rotation, training series); a figure the data cannot support is
listed in its place with the reason (what to ingest).
"""

from __future__ import annotations

import datetime as dt
import html
import json
from dataclasses import dataclass, field

import duckdb

from qkdb.charts import registry, style
from qkdb.charts.data import ingested, resolve_models, rows
from qkdb.errors import ChartError

MODEL_COLUMNS = (
    "model", "family", "series", "phase", "step", "n_layers", "n_q_heads", "n_kv_heads", "head_dim",
    "n_heads", "source", "ingested_at",
)
STATUSES = ("holds", "does not hold", "inconclusive", "no data")
FINDING_COLUMNS = ("id", "finding", "statement", "scope", "seed_value", "measured", "criterion", "status")

CSS = """
body { font-family: "DejaVu Sans", "Liberation Sans", Verdana, sans-serif; margin: 24px auto; max-width: 1500px;
       color: #222; padding: 0 16px; }
h1 { margin-bottom: 4px; } h2 { margin-top: 40px; border-bottom: 1px solid #ccc; padding-bottom: 4px; }
h3 { margin: 28px 0 6px; font-size: 16px; }
.meta, .desc { color: #666; font-size: 13px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; position: sticky; top: 0; }
tr.holds td.status { color: #1a7f37; font-weight: bold; }
tr.does-not-hold td.status { color: #b2182b; font-weight: bold; }
tr.inconclusive td.status { color: #8a5a00; font-weight: bold; }
tr.no-data td { color: #999; }
.verdicts span { font-weight: bold; margin-right: 1em; }
.verdicts .holds { color: #1a7f37; } .verdicts .does-not-hold { color: #b2182b; }
.verdicts .inconclusive { color: #8a5a00; } .verdicts .no-data { color: #999; }
.figure { margin: 8px 0 24px; overflow-x: auto; }
.missing { color: #8a5a00; background: #fff8e6; border-left: 3px solid #e0a800; padding: 6px 10px; font-size: 13px; }
nav ul { columns: 2; font-size: 13px; }
"""

EMBED = """
for (const el of document.querySelectorAll('script[type="application/json"][data-figure]')) {
  const target = document.getElementById(el.dataset.figure);
  vegaEmbed(target, JSON.parse(el.textContent), {actions: false, renderer: "svg"})
    .catch(err => { target.textContent = "figure failed to render: " + err; });
}
"""


def _esc(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return html.escape(f"{v:.6g}")
    return html.escape(str(v))


def _json_for_script(spec: dict) -> str:
    # "<", ">" and "&" as JSON escapes: no "</script>" or HTML entity can appear inside the block.
    text = json.dumps(spec, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _bundle() -> str:
    import vl_convert as vlc

    from qkdb.charts.render import vl_version

    return vlc.javascript_bundle(vl_version=vl_version()).replace("</script", "<\\/script")


def _page(title: str, body: list[str], has_figures: bool) -> str:
    head = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>", f"<style>{CSS}</style>",
    ]
    if has_figures:
        head.append(f'<script type="text/javascript">{_bundle()}</script>')
    tail = [f'<script type="text/javascript">{EMBED}</script>'] if has_figures else []
    return "\n".join([*head, "</head>", "<body>", *body, *tail, "</body>", "</html>", ""])


def _figure_block(fig_id: str, spec: dict) -> str:
    return (
        f'<div class="figure" id="{fig_id}"></div>\n'
        f'<script type="application/json" data-figure="{fig_id}">{_json_for_script(spec)}</script>'
    )


def figure_page(spec: dict, title: str = "qkdb figure") -> str:
    """One figure as a self-contained, offline HTML page."""
    return _page(title, [_figure_block("figure", spec)], has_figures=True)


def _table(columns: tuple[str, ...], data: list[dict], row_class=None) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>"]
    for d in data:
        cls = f' class="{row_class(d)}"' if row_class else ""
        cells = "".join(f'<td class="{c}">{_esc(d.get(c))}</td>' for c in columns)
        out.append(f"<tr{cls}>{cells}</tr>")
    out.append("</table>")
    return "\n".join(out)


@dataclass
class Report:
    html: str
    findings: list[dict] = field(default_factory=list)  # the findings table's rows
    shown: list[str] = field(default_factory=list)  # "name" or "name (context)"
    missing: list[tuple[str, str]] = field(default_factory=list)  # (figure, reason)


def _jobs(con: duckdb.DuckDBPyConnection, models, series) -> list[tuple[registry.Figure, dict, str]]:
    """(figure, builder options, context label) for every figure the report tries, in seed order."""
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
    for group in registry.GROUPS:
        for fig in (f for f in registry.FIGURES.values() if f.group == group):
            if fig.scope == "models":
                jobs.append((fig, {"models": models}, ""))
            elif fig.scope == "model":
                for m in collage_models or [None]:
                    jobs.append((fig, {"models": m}, m or ""))
            else:
                for s in series_list or [None]:
                    jobs.append((fig, {"series": s}, s or ""))
    return jobs


def build_report(
    con: duckdb.DuckDBPyConnection,
    *,
    models=None,
    series=None,
    title: str = "qkdb report",
    progress=None,
) -> Report:
    """The report page and what it shows; ``progress(name, ok)`` is called after each figure."""
    from qkdb import api
    from qkdb.charts.api import chart

    infos = ingested(con)
    report = Report(html="")
    body = [f"<h1>{html.escape(title)}</h1>"]
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body.append(
        f'<p class="meta">Generated {now} by qkdb {html.escape(api.version())}: {len(infos)} model(s) ingested. '
        "Figures follow the seeds: combined Q/K PCA (seed 003) and planar rotation (seed 002).</p>"
    )
    sections: list[str] = []
    # Models
    # Timestamps as text: fetching TIMESTAMPTZ into Python would need pytz.
    cols = ", ".join(
        "strftime(ingested_at, '%Y-%m-%d %H:%M UTC') as ingested_at" if c == "ingested_at" else c for c in MODEL_COLUMNS
    )
    model_rows = rows(con, f"select {cols} from models") if infos else []
    order = {i.model: k for k, i in enumerate(infos)}
    model_rows.sort(key=lambda r: order.get(r["model"], 0))
    sections.append('<h2 id="models">Models</h2>')
    sections.append(_table(MODEL_COLUMNS, model_rows) if model_rows else
                    '<p class="missing">No model is ingested: run `qkdb ingest --model NAME` first.</p>')
    # Findings
    sections.append('<h2 id="findings">Findings</h2>')
    try:
        findings = report.findings = rows(con, f"select {', '.join(FINDING_COLUMNS)} from findings")
        counts = {s: sum(1 for f in findings if f.get("status") == s) for s in STATUSES}
        sections.append(
            '<p class="verdicts">' + "".join(
                f'<span class="{s.replace(" ", "-")}">{counts[s]} {html.escape(s)}</span>' for s in STATUSES
            ) + "</p>"
        )
        sections.append(
            '<p class="desc">Each headline finding of the seeds, measured on the ingested models with its 95% '
            "interval in brackets (view <code>findings</code>). A claim <em>holds</em> or <em>does not hold</em> "
            "only when the interval decides it against the criterion; otherwise it is <em>inconclusive</em>. "
            "Methods and margins: <code>qkdb describe findings</code>, docs/findings.md.</p>"
        )
        sections.append(_table(FINDING_COLUMNS, findings, row_class=lambda d: (d.get("status") or "").replace(" ", "-")))
    except (ChartError, duckdb.Error) as exc:
        sections.append(f'<p class="missing">The findings view cannot be read: {html.escape(str(exc))}</p>')
    # Figures, grouped as the seeds group them
    toc = ['<li><a href="#models">Models</a></li>', '<li><a href="#findings">Findings</a></li>']
    current_group = None
    n = 0
    for fig, opts, context in _jobs(con, models, series):
        if fig.group != current_group:
            current_group = fig.group
            sections.append(f'<h2 id="group-{fig.group}">{html.escape(registry.GROUPS[fig.group])}</h2>')
            toc.append(f'<li><a href="#group-{fig.group}">{html.escape(registry.GROUPS[fig.group])}</a></li>')
        label = fig.name + (f" ({context})" if context else "")
        sections.append(
            f"<h3>{html.escape(fig.seed_figure)} · <code>{html.escape(fig.name)}</code>"
            + (f" · {html.escape(context)}" if context else "")
            + f'</h3>\n<p class="desc">{html.escape(fig.description)}</p>'
        )
        try:
            spec = chart(fig.name, con, **opts).to_dict(validate=True)
        except ChartError as exc:
            report.missing.append((label, str(exc)))
            sections.append(f'<p class="missing" data-missing="{html.escape(fig.name)}">Not shown: {html.escape(str(exc))}</p>')
            if progress:
                progress(label, False)
            continue
        n += 1
        report.shown.append(label)
        sections.append(_figure_block(f"fig-{n}-{fig.name}", spec))
        if progress:
            progress(label, True)
    if report.missing:
        sections.append('<h2 id="not-shown">Figures the data cannot support</h2><ul>')
        sections.extend(f"<li><code>{html.escape(name)}</code>: {html.escape(reason)}</li>" for name, reason in report.missing)
        sections.append("</ul>")
        toc.append('<li><a href="#not-shown">Figures the data cannot support</a></li>')
    body.append("<nav><ul>" + "".join(toc) + "</ul></nav>")
    body.extend(sections)
    body.append(f'<p class="meta">Fonts: {html.escape(style.FONT_STACK)}. Rendered offline with the bundled Vega-Lite.</p>')
    report.html = _page(title, body, has_figures=n > 0)
    return report

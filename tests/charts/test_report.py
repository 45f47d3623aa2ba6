"""`qkdb report`: one offline HTML page with the models, the findings and every supported figure.

Uses the warehouse of test_charts.py (built once per session): two standalone simulated models
and three checkpoints of the SmolLM3-3B series, so every figure is supported; and a warehouse
with a single model, where the series figures are listed with what to ingest.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

import qkdb
from qkdb.charts import registry
from qkdb.charts.report import build_report, figure_page
from qkdb.cli.app import app

try:  # pytest's default import mode puts tests/ on sys.path: share the session's warehouse
    from test_charts import bare_home, chart_home  # noqa: F401 (fixtures)
except ImportError:  # pragma: no cover - other import modes: load the module by path
    import importlib.util
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location("_qkdb_test_charts", Path(__file__).with_name("test_charts.py"))
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    bare_home, chart_home = _mod.bare_home, _mod.chart_home


class Page(HTMLParser):
    """Collects what matters for offline use: every URL-bearing attribute, the figure specs, tables."""

    URL_ATTRS = {"src", "href", "data", "action", "poster", "srcset", "xlink:href"}

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.specs: dict[str, dict] = {}
        self._spec_id: str | None = None
        self._buf: list[str] = []
        self.missing: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        for k, v in attrs:
            if k in self.URL_ATTRS and v is not None:
                self.urls.append((tag, k, v))
        if tag == "script" and a.get("type") == "application/json":
            self._spec_id = a["data-figure"]
            self._buf = []
        if tag == "p" and "data-missing" in a:
            self.missing.append(a["data-missing"])
        if tag == "table":
            self.tables += 1

    def handle_data(self, data):
        if self._spec_id is not None:
            self._buf.append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._spec_id is not None:
            self.specs[self._spec_id] = json.loads("".join(self._buf))
            self._spec_id = None


def parse(html: str) -> Page:
    p = Page()
    p.feed(html)
    p.close()
    return p


@pytest.fixture(scope="module")
def full_report(chart_home):
    con = qkdb.api.connect(chart_home)
    try:
        return build_report(con, title="test report")
    finally:
        con.close()


def test_report_contains_every_figure(full_report):
    page = parse(full_report.html)
    shown = [s["usermeta"]["qkdb"]["figure"] for s in page.specs.values()]
    assert sorted(shown) == sorted(registry.FIGURES)
    assert full_report.missing == [] and page.missing == []
    # Grouped as the seeds group them: cross-model PCA, cross-model rotation, then the series.
    order = [registry.FIGURES[n].group for n in shown]
    assert order == sorted(order, key=list(registry.GROUPS).index)
    for group_title in registry.GROUPS.values():
        assert group_title in full_report.html


def test_report_works_offline(full_report):
    page = parse(full_report.html)
    # No external resource at all: no script src, no stylesheet link, no image, no iframe;
    # the only URL-bearing attributes are the table of contents' in-page anchors.
    assert "link" not in page.tags and "img" not in page.tags and "iframe" not in page.tags
    assert all(v.startswith("#") for _, _, v in page.urls), page.urls
    assert not any("http" in v for _, _, v in page.urls)
    assert "vegaEmbed" in full_report.html and "window.vegaEmbed" in full_report.html  # the inline bundle
    # The specs carry their data inline: nothing to fetch.
    for spec in page.specs.values():
        assert "url" not in json.dumps(spec.get("data", {}))
        assert spec["datasets"]


def test_report_has_model_and_findings_tables(full_report):
    page = parse(full_report.html)
    assert page.tables == 2
    for model in ("sim-a-1b", "sim-b-2b", "smollm3-3b-stage1-step-40000", "smollm3-3b-lc-4k-to-32k-step-4000"):
        assert f'<td class="model">{model}</td>' in full_report.html
    ids = [r["id"] for r in full_report.findings]
    assert ids and len(set(ids)) == len(ids)
    assert all(f'<td class="id">{i}</td>' in full_report.html for i in ids)
    statuses = {r["status"] for r in full_report.findings}
    assert statuses <= {"holds", "does not hold", "inconclusive", "no data"}
    # Values with their intervals, the four verdicts counted and each drawn in its own colour.
    with_data = [r for r in full_report.findings if r["status"] != "no data" and r["id"] != "002.lemma"]
    assert with_data and all(r["measured"].endswith("]") for r in with_data)
    for status in ("holds", "does not hold", "inconclusive", "no data"):
        n = sum(r["status"] == status for r in full_report.findings)
        cls = status.replace(" ", "-")
        assert f'<span class="{cls}">{n} {status}</span>' in full_report.html
        assert f"tr.{cls} td" in full_report.html
        if n:
            assert f'<tr class="{cls}">' in full_report.html


def test_figure_page_escapes_script_end():
    spec = {"$schema": "x", "data": {"values": [{"a": "</script><b>&"}]}, "mark": "point"}
    page = parse(figure_page(spec, title="t"))
    assert page.specs["figure"]["data"]["values"][0]["a"] == "</script><b>&"


def test_report_makes_collages_for_each_given_model(chart_home):
    from qkdb.charts.report import _jobs

    con = qkdb.api.connect(chart_home)
    try:
        jobs = _jobs(con, ["sim-a-1b", "sim-b-2b"], None)
        default = _jobs(con, None, None)
    finally:
        con.close()
    collages = [(f.name, o) for f, o, _ in jobs if f.scope == "model"]
    assert collages == [(n, {"models": m}) for n in ("pca-collage", "ab-plane-collage", "complement-collage")
                        for m in ("sim-a-1b", "sim-b-2b")]
    assert [o for f, o, _ in default if f.scope == "model"] == [{"models": "sim-a-1b"}] * 3
    assert {o["series"] for f, o, _ in default if f.scope == "series"} == {"smollm3-3b"}


def test_cli_report_lists_what_the_data_cannot_support(runner, bare_home, tmp_path):
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", "-o", str(out), "--home", str(bare_home), "--title", "solo run"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    series_figures = {n for n, f in registry.FIGURES.items() if f.scope == "series"}
    n_shown = len(registry.FIGURES) - len(series_figures)
    assert f"{n_shown} figure(s), {len(series_figures)} not supported by the data" in result.stderr
    html = out.read_text(encoding="utf-8")
    page = parse(html)
    assert "<title>solo run</title>" in html
    assert set(page.missing) == series_figures
    assert html.count("no training series is ingested; ingest the checkpoints of a training series") == 2 * len(series_figures)
    assert "Figures the data cannot support" in html
    assert {s["usermeta"]["qkdb"]["figure"] for s in page.specs.values()} == set(registry.FIGURES) - series_figures
    result = runner.invoke(app, ["report", "-o", str(tmp_path / "r.pdf"), "--home", str(bare_home)])
    assert result.exit_code != 0 and "give -o FILE.html" in result.stderr

"""The Altair renderer ``qkdb``: charts inline in notebooks, offline, any number to a page.

The browser tests put outputs on one page the way the frontends do — JupyterLab sets an output's
HTML and re-creates each script in place, VS Code appends the re-created script to the output's
element — and need every chart drawn with no console message. Altair's own inline template in the
same page is the control: its second chart must fail there, or the page proves nothing.
"""

from __future__ import annotations

import html
import json
import re

import altair as alt
import pytest

from qkdb import api
from helpers.browser import console, run_chromium
from qkdb.charts.notebook import GLOBAL

FIGURES = ("bias-strength", "drift-bars", "pc-roles")


@pytest.fixture
def con(bare_home):
    con = api.connect(bare_home)
    yield con
    con.close()


def spec_of(output_html: str) -> dict:
    """The spec an output embeds (its ``application/json`` script)."""
    found = re.search(r'<script type="application/json" id="qkdb-chart-[0-9a-f]+-spec">(.*?)</script>', output_html, re.S)
    assert found, output_html[:500]
    return json.loads(found.group(1))


def test_altair_finds_the_renderer_by_name():
    # Through pyproject's entry point: enabling needs no import of qkdb first.
    assert "qkdb" in alt.renderers.names()
    with alt.renderers.enable("qkdb"):
        assert alt.renderers.active == "qkdb"
    assert alt.renderers.active != "qkdb"


def test_an_output_carries_its_javascript_and_its_spec(con):
    chart = api.chart("bias-strength", con)
    with alt.renderers.enable("qkdb"):
        bundle = chart._repr_mimebundle_()
    out = bundle["text/html"]
    # Nothing is fetched: no script source, no CDN, the library itself is inline.
    assert not re.search(r"<script[^>]*\bsrc=", out)
    assert "cdn.jsdelivr" not in out and "requirejs" not in out
    assert "window.vegaEmbed=" in out and GLOBAL in out
    assert len(out) > 500_000
    # One `</script` ends each of the two blocks: none inside the bundle or the spec.
    assert out.count("</script") == 2
    assert spec_of(out) == chart.to_dict()
    assert bundle["text/plain"].startswith("<qkdb chart bias-strength: ")
    # Until its script runs (an untrusted notebook), the element says what it is.
    assert "qkdb chart bias-strength: its JavaScript runs when" in out


def test_each_output_draws_into_its_own_element(con):
    chart = api.chart("drift-bars", con)
    with alt.renderers.enable("qkdb"):
        one, two = chart._repr_mimebundle_()["text/html"], chart._repr_mimebundle_()["text/html"]
    ids = [re.search(r'<div class="qkdb-chart" id="(qkdb-chart-[0-9a-f]+)"', h).group(1) for h in (one, two)]
    assert ids[0] != ids[1]


def test_embed_options_reach_vega_embed(con):
    chart = api.chart("drift-bars", con)
    with alt.renderers.enable("qkdb", embed_options={"actions": False}):
        out = chart._repr_mimebundle_()["text/html"]
    assert '{"mode":"vega-lite","actions":false}' in out


def test_any_altair_chart_renders_even_with_numbers_json_lacks():
    chart = alt.Chart(alt.Data(values=[{"x": 1.0}, {"x": float("nan")}, {"x": float("inf")}]), title=["two", "lines"])
    with alt.renderers.enable("qkdb"):
        bundle = chart.mark_point().encode(x="x:Q")._repr_mimebundle_()
    assert [row["x"] for row in spec_of(bundle["text/html"])["data"]["values"]] == [1.0, None, None]
    assert bundle["text/plain"] == "<qkdb chart: two lines>"


# The frontends' ways of running an output's scripts (JupyterLab: rendermime's renderHTML;
# VS Code: the notebook-renderers extension's domEval).
HOST = """<!DOCTYPE html>
<html><head><meta charset="utf-8"></head><body><div id="notebook"></div>
<script>
const outputs = JSON.parse(document.getElementById("outputs").textContent);
const frontend = %(frontend)s;
for (const markup of outputs) {
  const output = document.createElement("div");
  output.className = "output";
  document.getElementById("notebook").appendChild(output);
  output.innerHTML = markup;
  for (const old of Array.from(output.getElementsByTagName("script"))) {
    const fresh = document.createElement("script");
    for (const a of old.attributes) fresh.setAttribute(a.name, a.value);
    fresh.textContent = old.textContent;
    if (frontend === "jupyterlab") old.parentNode.replaceChild(fresh, old);
    else output.appendChild(fresh).parentNode.removeChild(fresh);
  }
}
document.body.dataset.done = "1";
</script>
</body></html>
"""


def notebook_page(tmp_path, outputs: list[str], frontend: str):
    # The outputs travel as JSON in a data block read before the host script runs.
    data = json.dumps(outputs).replace("<", "\\u003c")
    page = HOST % {"frontend": json.dumps(frontend)}
    page = page.replace('<div id="notebook"></div>',
                        f'<div id="notebook"></div>\n<script type="application/json" id="outputs">{data}</script>')
    path = tmp_path / f"{frontend}.html"
    path.write_text(page, encoding="utf-8")
    return path


def drawn(dom: str) -> int:
    """How many charts vega-embed drew (each has one `marks` SVG or canvas)."""
    return dom.count('class="marks"')


@pytest.mark.browser
@pytest.mark.parametrize("frontend", ["jupyterlab", "vscode"])
def test_every_chart_of_a_notebook_page_draws_offline(con, tmp_path, frontend):
    charts = [api.chart(name, con) for name in FIGURES]
    with alt.renderers.enable("qkdb"):
        outputs = [c._repr_mimebundle_()["text/html"] for c in charts]
    result = run_chromium(tmp_path, notebook_page(tmp_path, outputs, frontend), "--dump-dom")
    dom = result.stdout
    assert 'data-done="1"' in dom, result.stderr[-2000:]
    assert console(result.stderr) == [], console(result.stderr)
    assert drawn(dom) == len(FIGURES), dom[-3000:]
    # The placeholder text is gone from every element (the scripts ran and replaced it).
    elements = re.findall(r'<div class="qkdb-chart[^"]*" id="qkdb-chart-[0-9a-f]+"[^>]*>(.{0,200})', dom)
    assert len(elements) == len(FIGURES)
    assert not any(html.unescape(e).startswith("qkdb chart") for e in elements), elements


@pytest.mark.browser
def test_altairs_inline_template_draws_only_the_first_chart_of_a_page(con, tmp_path):
    """The control: the reason for the renderer, and proof the page above can fail."""
    charts = [api.chart(name, con) for name in FIGURES[:2]]
    with alt.renderers.enable("html", template="inline"):
        outputs = [c._repr_mimebundle_()["text/html"] for c in charts]
    result = run_chromium(tmp_path, notebook_page(tmp_path, outputs, "jupyterlab"), "--dump-dom")
    assert drawn(result.stdout) == 1
    assert any("has already been declared" in line for line in console(result.stderr)), console(result.stderr)

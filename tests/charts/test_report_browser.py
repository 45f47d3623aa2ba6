"""The report in a real browser: Debian's chromium, headless, offline (flags from ../shared/NOTES.md).

Every figure must render (an SVG per figure target) with no console message at all, a click on a
head of the cross-model scatter must show that head's points, and a screenshot of the front page
must have the window's size and not be blank. `.ci/run` installs chromium and sets
QKDB_REQUIRE_BROWSER=1, so there a missing browser fails these tests; elsewhere they skip, saying why.
"""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import pytest

import qkdb
from helpers.browser import console, run_chromium
from qkdb.charts.report import build_report



# Needs Debian's chromium: marked `browser`, which the default run deselects and .ci/run runs.
pytestmark = pytest.mark.browser

WINDOW = (1400, 1000)


@pytest.fixture(scope="module")
def report_file(chart_home, tmp_path_factory) -> Path:
    con = qkdb.api.connect(chart_home)
    try:
        html = build_report(con, title="browser test").html
    finally:
        con.close()
    path = tmp_path_factory.mktemp("browser") / "report.html"
    path.write_text(html, encoding="utf-8")
    return path


def figure_targets(dom: str) -> list[tuple[str, str]]:
    """(spec id, the target's inner HTML) of every figure target in a dumped DOM."""
    out = []
    for m in re.finditer(r'<div class="vis[ "]([^>]*)>', dom):  # vega-embed adds a class of its own
        spec = re.search(r'data-spec="([^"]+)"', m.group(1)).group(1)
        rest = dom[m.end():]
        end = rest.find("<figcaption")
        out.append((spec, m.group(1) + rest[:end if end >= 0 else 2000]))
    return out


def test_every_figure_renders_without_a_console_message(report_file, tmp_path):
    result = run_chromium(tmp_path, report_file, "--dump-dom")
    dom = result.stdout
    targets = figure_targets(dom)
    html = report_file.read_text(encoding="utf-8")
    assert len(targets) == html.count('<div class="vis"') >= 22
    for spec, inner in targets:
        assert 'data-rendered="1"' in inner, f"figure {spec} did not render: {inner[:300]}"
        assert '<svg' in inner and 'class="marks"' in inner or "<canvas" in inner, spec
    assert f'data-figures="{len(targets)}"' in dom
    assert console(result.stderr) == [], console(result.stderr)


CLICK = """
<script>
(function () {
  // After the figures render, click another outlined head of the r_q/r_k scatter and record the
  // detail panel's header (which head it shows) and how many points it draws, before and after.
  function state(fig) {
    const texts = Array.from(fig.querySelectorAll("text")).map(t => t.textContent);
    const header = texts.find(t => / · layer \\d+, head \\d+$/.test(t)) || "";
    return {header: header, points: fig.querySelectorAll("g.mark-symbol path").length};
  }
  function run() {
    if (!document.body.dataset.figures) { setTimeout(run, 100); return; }
    const fig = document.querySelector('figure[data-figure="rq-vs-rk"]:not([id$="-front"]) .vis');
    const before = state(fig);
    const cells = fig.querySelectorAll('g[class*="rq_vs_rk_pick_0_voronoi"] path');
    const target = cells[Math.floor(cells.length / 2)];
    target.dispatchEvent(new MouseEvent("click", {bubbles: true, clientX: 0, clientY: 0}));
    setTimeout(function () {
      document.body.dataset.click = JSON.stringify({cells: cells.length, before: before, after: state(fig)});
    }, 500);
  }
  run();
})();
</script>
"""


def test_a_click_on_a_head_shows_its_points(report_file, tmp_path):
    page = tmp_path / "click.html"
    head, tail = report_file.read_text(encoding="utf-8").rsplit("</body>", 1)  # the bundle has its own "</body>"
    page.write_text(head + CLICK + "</body>" + tail, encoding="utf-8")
    result = run_chromium(tmp_path, page, "--dump-dom")
    got = re.search(r'data-click="([^"]*)"', result.stdout)
    assert got, "the click script did not finish"
    import html
    import json

    click = json.loads(html.unescape(got.group(1)))
    assert click["cells"] > 1
    assert click["before"]["header"] and click["after"]["header"]
    assert click["after"]["header"] != click["before"]["header"], click
    assert console(result.stderr) == [], console(result.stderr)


def png_pixels_summary(data: bytes) -> tuple[int, int, float]:
    """(width, height, share of non-zero filtered bytes): a blank page filters to zeros, content does not."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    depth, color = data[24], data[25]
    channels = {2: 3, 6: 4, 0: 1, 4: 2}[color]
    idat, pos = b"", 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + width * channels * depth // 8
    assert len(raw) == stride * height
    # Drop each scanline's filter-type byte; a uniform image leaves only zeros after filtering.
    body = b"".join(raw[i * stride + 1:(i + 1) * stride] for i in range(height))
    return width, height, 1 - body.count(0) / len(body)


def test_front_page_screenshot_has_the_window_size_and_content(report_file, tmp_path):
    shot = tmp_path / "front.png"
    result = run_chromium(tmp_path, report_file, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}")
    assert shot.exists(), result.stderr[-2000:]
    width, height, busy = png_pixels_summary(shot.read_bytes())
    assert (width, height) == WINDOW
    assert busy > 0.02, f"the front page looks blank ({busy:.2%} of the filtered bytes vary)"
    assert console(result.stderr) == [], console(result.stderr)


def test_blank_detector_detects_blank():
    """The screenshot check is not vacuous: a uniform image reads as blank, a varied one does not."""
    def png(rows: list[bytes], w: int) -> bytes:
        def chunk(kind, body):
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        raw = b"".join(b"\x02" + r for r in rows)  # filter "Up": a uniform image is zeros after row 0
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, len(rows), 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

    white = [b"\xff" * 30] + [b"\x00" * 30] * 9
    assert png_pixels_summary(png(white, 10))[2] < 0.11
    varied = [bytes((i * 7 + j) % 256 for j in range(30)) for i in range(10)]
    assert png_pixels_summary(png(varied, 10))[2] > 0.5


WIDTHS = """
<script>
(function () {
  // After the figures render: how far right the findings table and the scorecard reach, against
  // the page's own width (a horizontal scroll bar appears when the document is wider).
  function run() {
    if (!document.body.dataset.figures) { setTimeout(run, 100); return; }
    const right = sel => Math.ceil(document.querySelector(sel).getBoundingClientRect().right);
    document.body.dataset.widths = JSON.stringify({
      findings: right("table.findings"), scorecard: right("table.scorecard"),
      page: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth,
    });
  }
  run();
})();
</script>
"""


@pytest.mark.parametrize("width", [1024, 1200, 1400])
def test_the_findings_table_fits_windows_from_1024_px(report_file, tmp_path, width):
    import html
    import json

    page = tmp_path / "widths.html"
    head, tail = report_file.read_text(encoding="utf-8").rsplit("</body>", 1)
    page.write_text(head + WIDTHS + "</body>" + tail, encoding="utf-8")
    result = run_chromium(tmp_path, page, "--dump-dom", f"--window-size={width},1000")
    got = re.search(r'data-widths="([^"]*)"', result.stdout)
    assert got, "the measuring script did not finish"
    w = json.loads(html.unescape(got.group(1)))
    assert w["findings"] <= w["page"] and w["scorecard"] <= w["page"], w
    assert w["scroll"] <= w["page"], w  # no horizontal scrolling at all


def test_the_plasticity_part_renders_its_figures_and_the_estimator_menu(report_file, tmp_path):
    # issue 38: the report's part "Plasticity and effective context", in reading order after the seeds'
    html = report_file.read_text(encoding="utf-8")
    assert html.index("Plasticity and effective context") > html.index("Seed 002 · planar rotation")
    dom = run_chromium(tmp_path, report_file, "--dump-dom").stdout
    drawn = {}
    for m in re.finditer(r'<figure[^>]*data-figure="([^"]+)"[^>]*>(.*?)</figure>', dom, flags=re.S):
        drawn.setdefault(m.group(1), []).append(m.group(2))
    for name in ("plasticity-profile", "plasticity-heatmap", "plasticity-by-taxonomy", "recency-check",
                 "series-plasticity"):
        assert name in drawn, name
        assert any('data-rendered="1"' in inner and 'class="marks"' in inner for inner in drawn[name]), name
    # the profile's menu: vega-embed binds the estimator param to a <select> with the three estimators
    profile = drawn["plasticity-profile"][0]
    options = re.findall(r"<option[^>]*>([a-z]+)</option>", profile)
    assert options == ["empirical", "gaussian", "thesis"], options


# After the page settles: every scorecard cell whose content is wider than the cell (in a fixed
# layout such text runs over the next cell's text), and every pair of the cells' own text boxes
# in one row that intersect.
OVERLAP_PROBE = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  const bad = [];
  for (const row of document.querySelectorAll("table.scorecard tr")) {
    const cells = [...row.children];
    for (const td of cells) {
      if (td.scrollWidth > td.clientWidth + 1) bad.push("overflow: " + td.textContent.trim().slice(0, 60));
    }
    const boxes = cells.map(td => {
      const r = document.createRange(); r.selectNodeContents(td); return [...r.getClientRects()];
    });
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++)
      for (const a of boxes[i]) for (const b of boxes[j])
        if (a.width && b.width && a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
          bad.push("overlap: " + cells[i].textContent.trim().slice(0, 40) + " | " + cells[j].textContent.trim().slice(0, 40));
  }
  const out = document.createElement("pre"); out.id = "overlap-probe";
  out.textContent = JSON.stringify({rows: document.querySelectorAll("table.scorecard tr").length, bad});
  document.body.appendChild(out);
}, 500));
</script>
"""


_REPORTS: dict[str, str] = {}


@pytest.mark.parametrize("width", [1000, 1400])
@pytest.mark.parametrize("which", ["series", "one model", "demo"])
def test_the_scorecard_never_prints_text_over_text(request, tmp_path, width, which):
    import json

    if which == "series":  # (the chart warehouse's report: the module's own)
        _REPORTS[which] = request.getfixturevalue("report_file").read_text(encoding="utf-8")
    if which not in _REPORTS:  # (one report per warehouse, for both widths)
        home = request.getfixturevalue({"one model": "bare_home", "demo": "demo_home"}[which])
        con = qkdb.api.connect(home, read_only=True)
        try:
            _REPORTS[which] = build_report(con, title="overlap").html
        finally:
            con.close()
    html = _REPORTS[which]
    page = tmp_path / "report.html"
    page.write_text(html.replace("</body>", OVERLAP_PROBE + "</body>"), encoding="utf-8")
    dom = run_chromium(tmp_path, page, "--dump-dom", f"--window-size={width},1000").stdout
    found = re.search(r'<pre id="overlap-probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    probe = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert probe["rows"] > 10
    assert probe["bad"] == []

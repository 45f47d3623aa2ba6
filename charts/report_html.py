"""The HTML of the report and of one-figure pages: the page shell, its style sheet and script, and
the data store that keeps each dataset once however many figures use it.

Everything is inline (no CDN, no request): the Vega/Vega-Lite/vega-embed bundle from vl-convert,
each figure's spec in a ``<script type="application/json">`` block, the datasets in one more such
block, and one small script that restores the datasets into the specs, embeds them, sizes each
figure to its column and filters the findings table.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
from pathlib import Path

STATUSES = ("holds", "does not hold", "inconclusive", "no data")
DATA_PREFIX = "qkdb-data:"

CSS = """
:root { --holds: #1a7f37; --fails: #b2182b; --inconclusive: #9a6700; --nodata: #8c8c8c; --mixed: #6639ba;
        --rule: #d8dee4; }
* { box-sizing: border-box; }
body { font-family: "DejaVu Sans", "Liberation Sans", Verdana, sans-serif; margin: 0; color: #1f2328; background: #fff;
       font-size: 14px; line-height: 1.45; }
main { max-width: 1560px; margin: 0 auto; padding: 18px 28px 80px; }
h1 { font-size: 26px; margin: 6px 0 4px; }
h2 { font-size: 20px; margin: 0 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
a { color: #0b5cad; text-decoration: none; } a:hover { text-decoration: underline; }
code { font-size: 12.5px; background: #f3f4f6; padding: 0 3px; border-radius: 3px; }
.meta { color: #59636e; font-size: 13px; margin: 0 0 10px; }
.lead { font-size: 15.5px; max-width: 1180px; margin: 8px 0 6px; }
.part { margin-top: 34px; padding-top: 6px; border-top: 3px solid #1f2328; }
.part > h2 { font-size: 22px; margin-bottom: 2px; }
.verdict { display: inline-block; padding: 1px 9px; border-radius: 10px; font-size: 12px; font-weight: bold; color: #fff;
           white-space: nowrap; }
.verdict.holds { background: var(--holds); } .verdict.does-not-hold { background: var(--fails); }
.verdict.inconclusive { background: var(--inconclusive); } .verdict.no-data { background: var(--nodata); }
.verdict.mixed { background: var(--mixed); }
/* A claim with parts untested: never the colour of a verdict, so it cannot be read as one. */
.verdict.partly-tested { background: #fff; color: #59636e; border: 1.5px dashed #8c8c8c; white-space: normal; }
.verdicts span { font-weight: bold; margin-right: 1.2em; font-size: 15px; }
.verdicts .holds { color: var(--holds); } .verdicts .does-not-hold { color: var(--fails); }
.verdicts .inconclusive { color: var(--inconclusive); } .verdicts .no-data { color: var(--nodata); }
.tally i { display: inline-block; min-width: 20px; padding: 0 4px; margin-right: 2px; border-radius: 3px; color: #fff;
           font-style: normal; font-size: 11px; text-align: center; }
.tally i.holds { background: var(--holds); } .tally i.does-not-hold { background: var(--fails); }
.tally i.inconclusive { background: var(--inconclusive); } .tally i.no-data { background: var(--nodata); }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid var(--rule); padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; position: sticky; top: 0; z-index: 1; }
table.scorecard { width: 100%; margin: 6px 0 4px; table-layout: fixed; }
table.scorecard td { overflow-wrap: anywhere; }
/* In a fixed layout a line that cannot break runs over the next cell's text: a scope wraps here. */
table.scorecard .seedtag { white-space: normal; }
table.scorecard tr.subrow td { font-size: 12px; border-bottom: 1px dotted var(--rule); padding-top: 2px; padding-bottom: 2px; }
table.scorecard tr.subrow td.claim { padding-left: 28px; }
table.scorecard tr.subrow .verdict { font-size: 10.5px; padding: 0 6px; }
.seedtag { color: #59636e; font-size: 12px; white-space: nowrap; }
.front-figures { margin-top: 12px; }
section.claim { display: grid; grid-template-columns: minmax(280px, 390px) minmax(0, 1fr); gap: 30px;
                border-top: 1px solid var(--rule); padding: 22px 0 8px; }
.claim-card { position: sticky; top: 10px; align-self: start; }
.claim-card .claimtext { font-size: 15.5px; font-weight: bold; margin: 2px 0 10px; }
.claim-card .headline { background: #f6f8fa; border-radius: 6px; padding: 8px 10px; margin-bottom: 10px; }
.claim-card .headline .value { font-size: 17px; font-weight: bold; }
.claim-card .stmt { font-size: 12.5px; font-weight: bold; color: #24292f; margin: 10px 0 2px; }
ul.rows { list-style: none; padding: 0; margin: 0; font-size: 12.5px; }
ul.rows li { padding: 3px 0; border-bottom: 1px dotted var(--rule); }
ul.rows li .verdict { font-size: 10.5px; padding: 0 6px; }
ul.rows li .vals { display: block; color: #59636e; padding-left: 2px; }
li:target { background: #fff5b1; }
.see { font-size: 12.5px; color: #59636e; margin-top: 8px; }
figure { margin: 0 0 30px; min-width: 0; }
figure .figtitle { font-weight: bold; font-size: 14.5px; margin: 0 0 4px; }
figure .figtitle .tag { color: #59636e; font-weight: normal; font-size: 12.5px; }
.vis { min-height: 60px; }
.vis svg.marks { width: 100%; height: auto; display: block; }
figure.side { display: grid; grid-template-columns: max-content minmax(240px, 1fr); column-gap: 28px; align-items: start; }
figure.side .figtitle { grid-column: 1 / -1; }
figure.side figcaption { margin-top: 28px; }
.vis .vega-bindings { font-size: 13px; margin: 6px 0 0; }
.vis .vega-bindings .vega-bind { display: inline-block; margin-right: 18px; }
figcaption { font-size: 13px; color: #24292f; max-width: 1100px; margin-top: 6px; }
figcaption .sub { color: #59636e; display: block; margin-bottom: 3px; }
.missing { color: #6d4c00; background: #fff8e6; border-left: 3px solid #e0a800; padding: 6px 10px; font-size: 13px; }
nav.contents ol { columns: 3; column-gap: 36px; font-size: 13px; padding-left: 22px; margin: 6px 0; }
nav.contents li { break-inside: avoid; margin-bottom: 2px; }
nav.contents li.group { list-style: none; margin-left: -22px; font-weight: bold; margin-top: 6px; }
.filters { margin: 8px 0; font-size: 13px; } .filters label { margin-right: 16px; }
.filters select, .filters input { font: inherit; font-size: 13px; }
table.findings { width: 100%; }
table.findings td.id { white-space: nowrap; width: 1%; }
table.findings td.status { white-space: nowrap; }
table.findings td.measured { min-width: 9em; }
table.findings td.statement { width: 36%; }
table.findings .crit { display: block; color: #59636e; font-size: 12px; margin-top: 2px; }
tr.holds td.status { color: var(--holds); font-weight: bold; }
tr.does-not-hold td.status { color: var(--fails); font-weight: bold; }
tr.inconclusive td.status { color: var(--inconclusive); font-weight: bold; }
tr.no-data td { color: #999; }
tr:target td { background: #fff5b1; }
details summary { cursor: pointer; color: #0b5cad; font-size: 13px; }
@media (max-width: 1100px) {
  section.claim { grid-template-columns: minmax(0, 1fr); }
  figure.side { display: block; }
  .claim-card { position: static; }
  nav.contents ol { columns: 1; }
}
"""

# Figures keep their aspect ratio and grow to their column, to at most 1.3× their natural size; one
# narrower than 60% of its column keeps its natural size and has its caption beside it. Each figure
# records whether it rendered (data-rendered) and a failure goes to the console, where a browser
# test sees it.
SCRIPT = r"""
(function () {
  "use strict";
  const storeEl = document.getElementById("qkdb-data");
  const store = storeEl ? JSON.parse(storeEl.textContent) : {};
  const texts = {};
  for (const el of document.querySelectorAll('script[type="application/json"][data-spec]')) {
    texts[el.dataset.spec] = el.textContent;
  }
  const PREFIX = "qkdb-data:";
  function value(v) {
    return (typeof v === "string" && v.startsWith(PREFIX)) ? store[v.slice(PREFIX.length)] : v;
  }
  function restore(node) {
    if (Array.isArray(node)) { node.forEach(restore); return; }
    if (!node || typeof node !== "object") return;
    if (node.datasets) for (const k of Object.keys(node.datasets)) node.datasets[k] = value(node.datasets[k]);
    if (node.data && typeof node.data === "object" && "values" in node.data) node.data.values = value(node.data.values);
    for (const k of Object.keys(node)) if (k !== "datasets" && k !== "data") restore(node[k]);
  }
  function size(el) {
    const svg = el.querySelector("svg.marks");
    const fig = el.closest("figure");
    if (!svg || !fig) return;
    const natural = parseFloat(svg.getAttribute("width"));
    const side = window.innerWidth > 1100 && natural < 0.6 * fig.clientWidth;
    fig.classList.toggle("side", side);
    svg.style.maxWidth = Math.round(side ? natural : natural * 1.3) + "px";
  }
  const jobs = [];
  for (const el of document.querySelectorAll(".vis[data-spec]")) {
    let spec;
    try { spec = JSON.parse(texts[el.dataset.spec]); restore(spec); }
    catch (err) { console.error("qkdb: figure " + el.dataset.spec + " has no readable spec: " + err); continue; }
    jobs.push(vegaEmbed(el, spec, {actions: false, renderer: "svg"})
      .then(function () { size(el); el.dataset.rendered = "1"; })
      .catch(function (err) {
        el.dataset.rendered = "0";
        el.textContent = "figure failed to render: " + err;
        console.error("qkdb: figure " + el.dataset.spec + " failed to render: " + err);
      }));
  }
  Promise.all(jobs).then(function () {
    document.body.dataset.figures = String(document.querySelectorAll('.vis[data-rendered="1"]').length);
  });
  window.addEventListener("resize", function () {
    for (const el of document.querySelectorAll('.vis[data-rendered="1"]')) size(el);
  });
  const table = document.querySelector("table.findings");
  if (table) {
    const controls = document.querySelectorAll(".filters [data-filter]");
    const apply = function () {
      const want = {};
      for (const c of controls) want[c.dataset.filter] = c.value.trim().toLowerCase();
      for (const row of table.tBodies[0].rows) {
        let show = true;
        for (const key of Object.keys(want)) {
          if (!want[key]) continue;
          const have = key === "text" ? row.textContent.toLowerCase() : (row.dataset[key] || "").toLowerCase();
          if (key === "text" ? !have.includes(want[key]) : have !== want[key]) show = false;
        }
        row.hidden = !show;
      }
      const n = table.tBodies[0].querySelectorAll("tr:not([hidden])").length;
      document.getElementById("findings-shown").textContent = n + " of " + table.tBodies[0].rows.length + " rows";
    };
    for (const c of controls) c.addEventListener("input", apply);
    apply();
  }
})();
"""


def esc(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return html.escape(f"{v:.6g}")
    return html.escape(str(v))


def status_class(status: str | None) -> str:
    return (status or "no data").replace(" ", "-")


def verdict(status: str | None, label: str | None = None) -> str:
    s = status or "no data"
    return f'<span class="verdict {status_class(s)}">{html.escape(label or s)}</span>'


def json_for_script(obj) -> str:
    # "<", ">" and "&" as JSON escapes: no "</script>" or HTML entity can appear inside the block.
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class DataStore:
    """Datasets taken out of the specs, each stored once under its content hash.

    The two cross-model scatters embed the same sampled points, and a front-page figure repeats its
    section's data; the page carries each only once.
    """

    def __init__(self):
        self.items: dict[str, object] = {}

    def _put(self, values) -> str:
        text = json.dumps(values, allow_nan=False, separators=(",", ":"))
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        self.items.setdefault(key, values)
        return DATA_PREFIX + key

    def take(self, spec: dict) -> dict:
        """A copy of ``spec`` whose datasets are references into the store (the script puts them back)."""
        def walk(node):
            if isinstance(node, list):
                return [walk(v) for v in node]
            if not isinstance(node, dict):
                return node
            out = {}
            for k, v in node.items():
                if k == "datasets" and isinstance(v, dict):
                    out[k] = {name: self._put(rows) for name, rows in v.items()}
                elif k == "data" and isinstance(v, dict) and isinstance(v.get("values"), (list, str)):
                    out[k] = {**v, "values": self._put(v["values"])}
                else:
                    out[k] = walk(v)
            return out

        return walk(spec)

    def script(self) -> str:
        return f'<script type="application/json" id="qkdb-data">{json_for_script(self.items)}</script>'


def bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one inline script, cached on disk per vl-convert version.

    vl-convert assembles the bundle in ~0.9 s on every call; it depends on nothing but the two
    versions, so a report after the first reads it back instead (the user cache dir; a cache that
    cannot be written only costs the time).
    """
    import vl_convert as vlc

    from qkdb.charts.render import vl_version

    version = vl_version()
    cached = _bundle_cache() / f"vl-convert-{vlc.__version__}-vega-lite-{version or 'default'}.js"
    try:
        return cached.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    text = vlc.javascript_bundle(vl_version=version).replace("</script", "<\\/script")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, cached)  # whole or absent: a reader never sees half a bundle
    except OSError:
        pass
    return text


def _bundle_cache() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("qkdb", appauthor=False)) / "js"


def page(title: str, body: list[str], specs: dict[str, dict], store: DataStore) -> str:
    """The whole page: ``body`` HTML, the specs (by id) and the store, with the JavaScript inline."""
    head = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>", f"<style>{CSS}</style>",
    ]
    tail = []
    if specs:
        head.append(f'<script type="text/javascript">{bundle()}</script>')
        tail.append(store.script())
        tail.extend(
            f'<script type="application/json" data-spec="{html.escape(k)}">{json_for_script(v)}</script>'
            for k, v in specs.items()
        )
    tail.append(f'<script type="text/javascript">{SCRIPT}</script>')
    return "\n".join([*head, "</head>", "<body>", *body, *tail, "</body>", "</html>", ""])


def figure_page(spec: dict, title: str = "qkdb figure") -> str:
    """One figure as a self-contained, offline HTML page."""
    store = DataStore()
    return page(title, ['<main><div class="vis" id="figure" data-spec="figure"></div></main>'],
                {"figure": store.take(spec)}, store)

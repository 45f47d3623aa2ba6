"""Charts inline in Jupyter and VS Code with no network: the Altair renderer ``qkdb``.

``alt.renderers.enable("qkdb")`` (pyproject registers it in Altair's renderer entry points) makes
every Altair chart display as HTML that carries Vega, Vega-Lite and vega-embed itself. Altair's
own renderers do not do that in a notebook:

* the default one loads the three libraries from cdn.jsdelivr.net: offline the output reads
  "Error loading script";
* ``alt.renderers.enable("html", template="inline")`` embeds vl-convert's bundle, but as
  top-level declarations of a classic script. JupyterLab, Notebook 7 and VS Code run every
  output's scripts in one page, so from the second chart on the browser refuses them
  ("Identifier '…' has already been declared") and only the first chart draws.

Here the bundle runs inside a function, once per page (a later output finds it loaded), and
each output draws into its own element, found from the script that draws it. Every output still
carries the bundle (~0.9 MB), so that any one of them draws by itself when the notebook is opened
again. Outputs of an untrusted notebook have their scripts removed by the frontend: the element
then says so instead of drawing.
"""

from __future__ import annotations

import html
import math
import uuid

from qkdb.charts.report_html import bundle, json_for_script

# Where the loaded library is kept on the page; ours, so that another renderer's vega-embed
# (another version, say) and ours never replace each other.
GLOBAL = "__qkdbVegaEmbed"

PLACEHOLDER = ("qkdb chart{name}: its JavaScript runs when the cell runs, or when the notebook is "
               "trusted (Jupyter removes the scripts of untrusted outputs).")

_DRAW = """
(function () {
  var id = %(id)s;
  var me = document.currentScript;
  // JupyterLab re-creates each script in place; VS Code appends it to the output's element; an
  // HTML page leaves it where it is. In all three the output's element is the script's parent.
  var scope = (me && me.parentNode) || document;
  var target = scope.querySelector("#" + id) || document.getElementById(id);
  var specNode = scope.querySelector("#" + id + "-spec") || document.getElementById(id + "-spec");
  if (!target || !specNode) { return; }
  if (!window[%(global)s]) {
    var before = {vegaEmbed: window.vegaEmbed, vega: window.vega, vegaLite: window.vegaLite};
    (function () {
%(bundle)s
    })();
    window[%(global)s] = window.vegaEmbed;
    // The bundle sets these globals; give back any another library had set.
    for (var k in before) { if (before[k] !== undefined) { window[k] = before[k]; } }
  }
  target.textContent = "";
  window[%(global)s](target, JSON.parse(specNode.textContent), %(options)s).catch(function (err) {
    target.textContent = "qkdb chart: " + err;
    console.error(err);
  });
})();
"""


def renderer(spec: dict, embed_options: dict | None = None, **_metadata) -> dict[str, str]:
    """Altair renderer: the chart as HTML that draws itself offline (see the module's docstring).

    ``embed_options`` are vega-embed's (``alt.renderers.enable("qkdb", embed_options=...)``); the
    plain-text representation names the chart for frontends that show no HTML.
    """
    uid = f"qkdb-chart-{uuid.uuid4().hex}"
    usermeta = spec.get("usermeta")
    name = usermeta.get("qkdb", {}).get("figure") if isinstance(usermeta, dict) else None
    label = f" {name}" if name else ""
    script = _DRAW % {
        "id": json_for_script(uid), "global": json_for_script(GLOBAL), "bundle": bundle(),
        "options": json_for_script({"mode": "vega-lite", **(embed_options or {})}),
    }
    body = "\n".join([
        f'<div class="qkdb-chart" id="{uid}">{html.escape(PLACEHOLDER.format(name=label))}</div>',
        f'<script type="application/json" id="{uid}-spec">{_spec_json(spec)}</script>',
        f'<script type="text/javascript">{script}</script>',
    ])
    from qkdb.charts.render import title_text

    title = title_text(spec, default="")
    return {"text/html": body, "text/plain": f"<qkdb chart{label}" + (f": {title}" if title else "") + ">"}


def _spec_json(spec: dict) -> str:
    try:
        return json_for_script(spec)
    except ValueError:
        # NaN or infinity in a chart's data (a chart of the user's own, say): JSON has no such
        # number, and Vega reads null as missing, which is what they stand for.
        return json_for_script(_finite(spec))


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value

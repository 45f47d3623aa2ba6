"""docs/quickstart.ipynb, run top to bottom in a fresh kernel the way a researcher runs it.

nbclient drives an IPython kernel of this interpreter (a kernelspec written to the test's tmp
dir, so the notebook imports the qkdb under test, not whatever a user's `python3` kernel runs).
Every cell must run without an error, offline, and the outputs must say the right things: the
sample's 44 heads ingested into the notebook's own home, the DataFrames' columns, charts that
carry their spec and their JavaScript, and the findings the warehouse holds.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from qkdb import api

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "quickstart.ipynb"
KERNEL = "qkdb-quickstart-test"
HEAD_COLUMNS = ["layer", "head", "r_q", "r_k", "r_q_a", "r_k_a", "bias_strength"]
STATUSES = {"holds", "does not hold", "inconclusive", "no data"}

# What the test reads back from the kernel after the notebook's own cells (appended, not stored).
PROBE = """
import json as _json
print("PROBE " + _json.dumps({
    "home": str(HOME),
    "heads": len(heads),
    "head_columns": list(heads.columns),
    "findings": len(findings),
    "measured": len(measured),
    "finding_columns": list(findings.columns),
    "statuses": findings.status.value_counts().to_dict(),
}))
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook after a run in `work` (its folder), with the run's wall time."""
    root = tmp_path_factory.mktemp("notebook")
    mp = pytest.MonkeyPatch()
    # Jupyter's and IPython's state (kernelspecs, connection files, history) in tmp, none in ~.
    for var, sub in (("JUPYTER_PATH", "jupyter"), ("JUPYTER_DATA_DIR", "jupyter"), ("JUPYTER_CONFIG_DIR", "config"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        mp.setenv(var, str(root / sub))
    spec = root / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "qkdb under test", "language": "python",
    }))
    work = root / "work"
    work.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE.strip(), id="test-probe"))
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=120, resources={"metadata": {"path": str(work)}})
    t0 = time.perf_counter()
    try:
        client.execute()  # raises CellExecutionError on the first cell that fails
    finally:
        mp.undo()
    return nb, work, time.perf_counter() - t0


def cells(nb, tag: str) -> list:
    found = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert found, f"no cell tagged {tag!r}"
    return found


def text_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def result_of(cell) -> dict:
    (res,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    return res["data"]


def body_rows(table_html: str) -> int:
    """Rows of a DataFrame's HTML table (pandas' header rows carry a style, the body's none)."""
    return table_html.split("<tbody>", 1)[1].count("<tr>")


def probe(nb) -> dict:
    (line,) = [ln for ln in text_of(nb.cells[-1]).splitlines() if ln.startswith("PROBE ")]
    return json.loads(line[len("PROBE "):])


def test_the_stored_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


def test_the_notebook_runs_top_to_bottom_quickly(executed):
    nb, _, seconds = executed
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    assert seconds < 60, f"the quickstart took {seconds:.0f} s"


def test_it_ingests_the_sample_into_its_own_home(executed):
    nb, work, _ = executed
    (ingest,) = cells(nb, "ingest")
    assert "ingested 44 heads" in text_of(ingest)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct: 44 query heads" in text_of(ingest)
    home = Path(probe(nb)["home"])
    assert home == work / "qkdb-quickstart"  # next to the notebook, not the user's warehouse
    con = api.connect(home)
    try:
        assert con.sql("select model, count(*) from heads group by model").fetchall() == [("smollm2-135m", 44)]
    finally:
        con.close()


def test_the_query_lands_in_a_dataframe(executed):
    nb, _, _ = executed
    facts = probe(nb)
    assert facts["heads"] == 44 and facts["head_columns"] == HEAD_COLUMNS
    (query,) = cells(nb, "query")
    shown = result_of(query)["text/html"]
    assert all(f"<th>{col}</th>" in shown for col in HEAD_COLUMNS)
    assert body_rows(shown) == 8  # heads.head(8)
    (pandas_cell,) = cells(nb, "pandas")
    assert re.search(r"\d+\.\d% of the heads have a positive \(recency\) bias", text_of(pandas_cell))
    grouped = result_of(pandas_cell)["text/plain"]
    assert all(label in grouped for label in ("early layers", "middle layers", "late layers"))


def test_the_charts_are_drawn_inline_with_their_javascript(executed):
    nb, _, _ = executed
    charts = cells(nb, "chart")
    assert len(charts) == 2
    for cell, figure in zip(charts, ("bias-strength", "rq-vs-rk")):
        data = result_of(cell)
        out = data["text/html"]
        assert data["text/plain"].startswith(f"<qkdb chart {figure}: ")
        assert not re.search(r"<script[^>]*\bsrc=", out) and "cdn.jsdelivr" not in out
        assert "window.vegaEmbed=" in out
        spec = json.loads(re.search(r'<script type="application/json" id="[^"]+-spec">(.*?)</script>', out, re.S).group(1))
        assert spec["usermeta"]["qkdb"]["figure"] == figure
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6")
        (rows,) = spec["datasets"].values()
        if figure == "rq-vs-rk":
            assert len(rows) == 44  # a point per head
        else:
            assert {r["n"] for r in rows} == {44} and sum(r["count"] for r in rows) == 44
    assert "44 heads of 1 model" in text_of(charts[0])  # the caption, printed


def test_the_findings_match_the_warehouse(executed):
    nb, work, _ = executed
    facts = probe(nb)
    assert facts["finding_columns"] == ["id", "statement", "seed_value", "measured", "status", "n_heads"]
    assert set(facts["statuses"]) <= STATUSES and {"holds", "no data"} <= set(facts["statuses"])
    con = api.connect(work / "qkdb-quickstart")
    try:
        expected = dict(con.sql("select status, count(*) from findings group by status").fetchall())
        with_data = [r[0] for r in con.sql("select id from findings where status <> 'no data'").fetchall()]
    finally:
        con.close()
    assert facts["statuses"] == expected
    assert facts["findings"] == sum(expected.values())
    assert facts["measured"] == sum(n for s, n in expected.items() if s != "no data") > 0
    counted, shown = cells(nb, "findings")
    assert all(status in result_of(counted)["text/plain"] for status in expected)
    table = result_of(shown)["text/html"]
    assert body_rows(table) == facts["measured"]
    assert "no data" not in table and all(f">{i}<" in table for i in with_data)

"""The report's second process (charts/report_split.py): same page, real forks, failures fall back.

A helper may only be forked from a process running one thread, and pytest's is not one (DuckDB
connections of other tests keep theirs), so each check runs in a fresh Python process, as the
CLI does. The warehouse is test_charts.py's (every figure supported).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from qkdb.charts import report_split
from qkdb.charts.report import build_report

import qkdb

TWO_CORES = len(os.sched_getaffinity(0)) >= 2 if hasattr(os, "sched_getaffinity") else False
needs_two_cores = pytest.mark.skipif(not TWO_CORES, reason="the helper is forked only with two usable cores")

PREAMBLE = """
import os, sys
from qkdb import api, warehouse
from qkdb.charts import report_split
from qkdb.charts.report import _jobs, _label, build_report, make_figure

HOME = sys.argv[1]

def prepared(home=HOME):
    con = api.connect(home, read_only=True)
    warehouse.snapshot(con)
    return con
"""


def run(script: str, *args, stderr: list | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", PREAMBLE + textwrap.dedent(script), *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    if stderr is not None:
        stderr.append(done.stderr)
    return done.stdout


def serial_page(home) -> str:
    con = qkdb.api.connect(home, read_only=True)
    try:
        qkdb.warehouse.snapshot(con)
        return build_report(con, title="qkdb report").html
    finally:
        con.close()


def undated(html: str) -> str:
    return re.sub(r"Generated [0-9: -]+UTC", "Generated", html)


def test_units_are_every_job_once_heaviest_first():
    labels = ["pc-roles", "rq-vs-rk", "bias-vs-separation", "complement-collage (m1)", "pca-collage (m1)",
              "drift-bars", "series-taxonomy (s)", "series-trajectory (s)", "depth-heatmaps", "explained-variance",
              "series-explained-variance (s)", "slope-ratio", "variance-decomposition"]
    order = report_split.units(labels)
    assert order == report_split.units(labels)
    assert sorted(i for u in order for i in u) == list(range(len(labels)))
    costs = [sum(report_split._cost(labels[i]) for i in u) for u in order]
    assert costs == sorted(costs, reverse=True)
    # The head explorer's two figures are taken together (one process reads the explorer's points once).
    assert [1, 2] in order
    assert report_split.units([]) == []


def test_the_queue_hands_each_unit_to_one_process_and_records_whose_it_is():
    queue = report_split._Queue()
    labels = [f"figure-{i}" for i in range(7)]
    mine = []
    for i in report_split._taken(queue, labels, report_split.PARENT):
        mine.append(i)
        if len(mine) == 3:
            break
    theirs = list(report_split._taken(queue, labels, report_split.HELPER))
    assert sorted(mine + theirs) == list(range(7)) and not set(mine) & set(theirs)
    order = report_split.units(labels)
    assert {i for p in queue.taken_by(len(order), report_split.HELPER) for i in order[p]} == set(theirs)
    assert list(report_split._taken(queue, labels, report_split.PARENT)) == []  # none left


@needs_two_cores
def test_helper_builds_its_share_as_the_parent_would(chart_home):
    out = run("""
        import time
        helper = report_split.Helper.start(prepared)
        assert helper is not None, "no helper forked"
        deadline = time.monotonic() + 60
        con = prepared()
        jobs = _jobs(con, None, None)
        labels = [_label(j) for j in jobs]
        mine = []
        for i in helper.take(labels):
            make_figure(con, jobs[i][0], jobs[i][1])
            mine.append(i)
            # (the first unit built, this process waits for the helper to take one: its share is then
            # not empty however fast this process is)
            while len(mine) == 1 and not helper.theirs(labels) and time.monotonic() < deadline:
                time.sleep(0.01)
        got = helper.results(labels)
        theirs = helper.theirs(labels)
        assert theirs and set(got) == theirs, (theirs, set(got))
        assert sorted(mine + sorted(theirs)) == list(range(len(jobs)))
        for i in theirs:
            assert got[i] == make_figure(con, jobs[i][0], jobs[i][1]), labels[i]
        assert helper.pid == 0  # reaped
        print(len(theirs), len(jobs))
    """, chart_home)
    n_theirs, n_jobs = map(int, out.split())
    assert 0 < n_theirs < n_jobs


@needs_two_cores
@pytest.mark.parametrize("broken", ["raises", "other data"])
def test_a_failed_helper_leaves_the_page_unchanged(chart_home, bare_home, broken):
    # A helper whose connection fails, or that sees other models (an ingest published between the
    # two opens), sends nothing usable: the parent builds its share itself.
    opener = {"raises": "lambda: 1 / 0", "other data": "lambda: prepared(sys.argv[2])"}[broken]
    said: list[str] = []
    html = run(f"""
        first, helper = report_split.Helper.start({opener}), report_split.Helper.start({opener})
        assert first is not None and helper is not None
        con = prepared()
        assert first.results([_label(j) for j in _jobs(con, None, None)]) == {{}}
        sys.stderr.write(first.failure)
        sys.stdout.write(build_report(con, title="qkdb report", helper=helper).html)
        helper.close()
    """, chart_home, bare_home, stderr=said)
    assert undated(html) == undated(serial_page(chart_home))
    # Why the helper did not help, for the CLI's note.
    assert said[0] == {"raises": "ZeroDivisionError: division by zero",
                       "other data": "it saw other models or series (an ingest or removal landed as the report started)"}[broken]


def test_no_helper_on_one_core_or_with_threads_running(chart_home):
    out = run("""
        import duckdb
        con = duckdb.connect()  # DuckDB's worker threads now run in this process
        print(report_split.available(), report_split.Helper.start(prepared))
        con.close()
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        print(report_split.available(), report_split.Helper.start(prepared))
    """, chart_home)
    assert out.split() == ["False", "None", "False", "None"]


@needs_two_cores
def test_cli_report_with_its_helper_is_the_single_process_page(chart_home, tmp_path):
    out = tmp_path / "r.html"
    done = subprocess.run([sys.executable, "-m", "qkdb", "report", "--home", str(chart_home), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "did not help" not in done.stderr  # the helper's share was used
    # Every figure's progress line is said once, the helper's share included.
    shown = int(re.search(r"(\d+) figure\(s\)", done.stderr).group(1))
    assert shown == 30 and len(re.findall(r"^  ok ", done.stderr, flags=re.MULTILINE)) == shown
    assert undated(out.read_text()) == undated(serial_page(chart_home))

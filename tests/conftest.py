"""Shared fixtures: a temporary warehouse home, small planted datasets, a CLI runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers.datasets import make_dataset


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own warehouse home; nothing touches the user's, nor reads it.

    The user data dir is a fresh one too: where ``qkdb demo`` puts its sample (and whether it has
    run on this machine) changes what the commands suggest.
    """
    home = tmp_path / "home"
    monkeypatch.setenv("QKDB_HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))
    monkeypatch.delenv("QKDB_DEBUG", raising=False)
    return home


@pytest.fixture(autouse=True)
def _vector_math_settled():
    """The tests' own torch computations (the eager references) settle oneMKL as a capture does.

    A reference computed by a worker's first, multi-threaded cos/sin could be wrong on some CPUs
    (ingest/capture/vector_math.py). Every test file that uses torch imports it when collected.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        from qkdb.ingest.capture import vector_math

        vector_math.settle(torch)


@pytest.fixture
def home(_isolated_home) -> Path:
    return _isolated_home


@pytest.fixture
def dataset(tmp_path) -> Path:
    return make_dataset(tmp_path / "ds")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


# -- where the suite's time goes, per file (issue 48: `.ci/run` prints it with --file-durations 15) --


def pytest_addoption(parser):
    parser.addoption("--file-durations", type=int, default=0, metavar="N",
                     help="print the N test files that took longest (setup, call and teardown summed)")


_FILE_SECONDS: dict[str, float] = {}
_FILE_TESTS: dict[str, int] = {}


def pytest_runtest_logreport(report):
    # (under xdist this runs in the controller for every worker's reports: the sums are the whole run's)
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)
    if report.when == "call":
        _FILE_TESTS[path] = _FILE_TESTS.get(path, 0) + 1


def pytest_terminal_summary(terminalreporter, config):
    n = config.getoption("--file-durations")
    if not n or not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"slowest {n} test files (of {total / 60:.1f} worker-minutes in all)")
    for path, secs in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:n]:
        terminalreporter.write_line(f"{secs:8.1f}s {secs / total:6.1%}  {_FILE_TESTS.get(path, 0):4d} tests  {path}")


# -- the slowest files first (issue 48): with `--dist loadfile` a worker takes the next file when it is
# free, so a long file taken last keeps one core busy after the other has finished. xdist's own
# order (most tests first) put the single-test files that take a minute or more at the very end (the
# last 10 % of a CI run took a third of its time). Worker-seconds from `.ci/run --file-durations`
# (2026-11-29, fourth round; single long tests from --durations); files not listed keep their order, after
# these. Only the order changes.
SLOW_FILES = {
    "tests/ingest/engine/test_cluster.py": 108,
    "tests/ingest/capture/test_sniff_smollm2.py": 91,
    "tests/charts/test_report_browser.py": 91,
    "tests/sharing/test_publish_pull.py": 84,
    "tests/charts/test_charts.py": 68,
    "tests/ingest/capture/test_sniff_series.py": 65,
    "tests/sql/test_verdicts.py": 63,
    "tests/sharing/test_sharing_cli.py": 56,
    "tests/ingest/sources/test_input_guards.py": 53,
    "tests/ingest/sources/test_hub.py": 53,
    "tests/sql/test_findings_cli.py": 53,
    "tests/ingest/capture/test_sniff_rope_planes.py": 51,
    "tests/cli/test_cli.py": 42,
    "tests/warehouse/test_intervals.py": 41,
    "tests/warehouse/test_warehouse.py": 39,
    "tests/cli/test_demo.py": 36,
    "tests/test_benchmark_quick.py": 33,
    "tests/test_calibration_quick.py": 29,
}


def pytest_collection_modifyitems(session, config, items):
    def weight(item) -> float:
        return SLOW_FILES.get(item.nodeid.split("::", 1)[0], 0.0)

    items.sort(key=lambda item: -weight(item))  # (stable: each file's tests keep their order)

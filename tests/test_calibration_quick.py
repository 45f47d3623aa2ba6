"""The calibration benchmark's quick mode: the findings' intervals still cover planted truths.

A regression check, not the calibration itself (benchmarks/calibration.py, docs/findings.md):
two replications of three settings (whole GQA groups of near-copies, heads of a layer alike, three
models about models like them) with small models and small truths. Pooled over every finding, a
method that stopped following the dependence between heads would cover far less (the head
bootstrap covered 0.62-0.75 of some findings with whole GQA groups).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "calibration.py"


@pytest.mark.slow
def test_quick_calibration_covers_planted_truths(tmp_path):
    # Two replications (the quick mode's four took ~4 minutes of CI's 2 cores): 174 intervals
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--reps", "2", "--cache", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for setting in ("gqa", "layers", "pooled-3"):
        assert re.search(rf"^{setting}\s+\d+", out.stdout, re.M), setting
    found = re.search(r"^all: coverage (\d+)/(\d+) = [\d.]+, wrong verdicts (\d+)/\d+", out.stdout, re.M)
    assert found, out.stdout[-2000:]
    covered, n, wrong = (int(found.group(i)) for i in (1, 2, 3))
    assert n >= 170
    assert covered / n >= 0.88, out.stdout
    assert wrong / n <= 0.05, out.stdout


# (in a process of its own: a forkserver already running in this test process would not have the
# script's folder on its path)
_SAME_IN_A_WORKER = """
import calibration
calibration._set_sizes(calibration.QUICK)
task = ("gqa", 0, None)
here = calibration.replicate(task)
workers = calibration.pool(1)
there = workers.apply(calibration.replicate, (task,))
workers.close()
print(len(here[3]), there == here)
"""


def test_a_replication_is_the_same_in_a_worker_of_the_pool():
    # `--workers N` runs the replications in forkserver processes, which import the script afresh:
    # they must replicate at the sizes --quick set in this process (they once ran the full run's
    # models against the quick truths: gqa coverage 0.836 with two workers against 0.922 with one).
    out = subprocess.run([sys.executable, "-c", _SAME_IN_A_WORKER], capture_output=True, text=True,
                         timeout=300, cwd=SCRIPT.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    rows, same = out.stdout.split()
    assert int(rows) > 0 and same == "True", out.stdout

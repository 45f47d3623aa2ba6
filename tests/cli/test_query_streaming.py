"""Results stream: a huge query neither exhausts memory nor has to finish before output starts."""

from __future__ import annotations

import subprocess
import sys
import time

from qkdb.query import BATCH_ROWS, run_query


def test_first_batch_of_a_trillion_rows_arrives_at_once(home):
    from qkdb import api

    api.connect(home, read_only=False).close()  # an empty warehouse (a writer creates one; readers never do)
    start = time.monotonic()
    with run_query("select range as i from range(1000000000000)") as results:
        batch = results[0].reader().read_next_batch()
    assert batch.num_rows == BATCH_ROWS and batch.column(0)[0].as_py() == 0
    with run_query("select range as i from range(1000000000000)") as results:
        names, batches = results[0].rows()
        rows = next(batches)
    assert names == ["i"] and len(rows) == BATCH_ROWS and rows[0] == (0,)
    assert time.monotonic() - start < 30  # materialising 10^12 rows would never return


def test_cli_output_piped_into_head_stops_quietly(home, dataset):
    from qkdb import api

    api.ingest(dataset, "toy", family="Toy", gqa_ratio=2, n_layers=2, workers=1, points=0, home=home)
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkdb", "query", "select range as i from range(1000000000000)", "-f", "csv"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    _, err = proc.communicate(timeout=60)
    assert first.strip() == b'"i"'
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err

"""Crashes, concurrency and readers: the warehouse is never seen half-written."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import duckdb
import pytest

import qkdb
from qkdb.errors import EXIT_CODES
from qkdb.warehouse import store
from qkdb.warehouse.catalog import CATALOG_FORMAT

from helpers.datasets import make_dataset

from helpers.processes import FACTS, _ingest_cmd, _snapshot, _wait_for  # noqa: F401


@pytest.mark.parametrize("moment", ["after_head", "before_swap"])
def test_sigkill_leaves_old_model_complete_and_next_ingest_cleans_up(tmp_path, home, moment):
    ds = make_dataset(tmp_path / "ds")
    qkdb.ingest(ds, "toy", heads="0", workers=1, family="Toy", gqa_ratio=2, n_layers=2)
    before = _snapshot(home)
    assert before["heads"] == 4
    proc = subprocess.Popen(_ingest_cmd(ds, "toy", "--force", pause=moment), stderr=subprocess.PIPE)
    try:
        if moment == "after_head":
            # killed mid-compute: staging has data
            assert _wait_for(lambda: any((home / store.STAGING).glob("toy.*/heads/data.parquet")))
        else:
            # killed after the new version is in the store, before the swap
            assert _wait_for(lambda: len([p for p in (home / store.STORE / "toy").iterdir() if p.name != "current"]) == 2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _snapshot(home) == before  # readers see the old complete model
    con = qkdb.connect()
    con.close()
    qkdb.ingest(ds, "toy", workers=1, force=True, family="Toy", gqa_ratio=2, n_layers=2)
    after = _snapshot(home)
    assert after["heads"] == 8 and after["head_metrics"] == 8
    assert not list((home / store.STAGING).iterdir())
    assert sorted(p.name for p in (home / store.STORE / "toy").iterdir() if p.name != "current") == [
        os.readlink(home / store.STORE / "toy" / "current")
    ]


def test_sigkill_during_first_ingest_leaves_no_trace_for_readers(tmp_path, home):
    ds = make_dataset(tmp_path / "ds")
    proc = subprocess.Popen(_ingest_cmd(ds, "fresh", pause="before_swap"), stderr=subprocess.PIPE)
    try:
        assert _wait_for(lambda: (home / "heads" / "model=fresh").is_symlink())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    snap = _snapshot(home)
    assert all(v == 0 for v in snap.values()), snap


def test_two_models_at_once_both_land(tmp_path, home):
    a, b = make_dataset(tmp_path / "a", seed=1), make_dataset(tmp_path / "b", seed=2)
    procs = [subprocess.Popen(_ingest_cmd(a, "m-a"), stderr=subprocess.PIPE),
             subprocess.Popen(_ingest_cmd(b, "m-b"), stderr=subprocess.PIPE)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    con = qkdb.connect()
    try:
        rows = con.execute("select model, count(*) from heads group by model order by model").fetchall()
        assert rows == [("m-a", 8), ("m-b", 8)]
    finally:
        con.close()


def test_same_model_twice_at_once_one_fails_clearly(tmp_path, home):
    ds = make_dataset(tmp_path / "ds")
    first = subprocess.Popen(_ingest_cmd(ds, "toy", pause="after_head", seconds=0.3), stderr=subprocess.PIPE)
    assert _wait_for(lambda: any((home / store.STAGING).glob("toy.*")))
    second = subprocess.run(_ingest_cmd(ds, "toy"), capture_output=True, text=True)
    assert second.returncode == EXIT_CODES["busy"]
    assert "another qkdb process is ingesting or removing model 'toy'" in second.stderr
    assert "Traceback" not in second.stderr
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()


def test_an_open_reader_does_not_block_an_ingest(tmp_path, home):
    ds = make_dataset(tmp_path / "ds")
    qkdb.connect(read_only=False).close()  # an empty warehouse (readers never create one)
    reader = qkdb.connect()  # a notebook holding the catalog open read-only
    try:
        assert reader.execute("select count(*) from heads").fetchall()[0][0] == 0
        done = subprocess.run(_ingest_cmd(ds, "toy"), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        # the same connection sees the new model: views re-bind their globs on every query
        assert reader.execute("select count(*) from head_metrics").fetchall()[0][0] == 8
    finally:
        reader.close()


def test_catalog_from_a_newer_qkdb_is_refused(home, runner):
    from qkdb.cli.app import app

    qkdb.connect(read_only=False).close()
    con = duckdb.connect(str(home / "qk.duckdb"))
    con.execute("update qkdb_meta set value = ? where key = 'format'", [str(CATALOG_FORMAT + 1)])
    con.close()
    result = runner.invoke(app, ["describe", "heads"])  # (a reader that needs no model)
    assert result.exit_code == EXIT_CODES["input"] and "written by a newer qkdb" in result.stderr


def test_unwritable_home_is_a_clear_error(tmp_path, runner, dataset):
    from qkdb.cli.app import app

    if os.geteuid() == 0:
        target = Path("/proc/qkdb-cannot-write-here")  # root ignores permission bits; /proc refuses anyway
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target = ro / "home"
    result = runner.invoke(app, ["ingest", "--path", str(dataset), "--model", "toy", *FACTS, "-q", "--home", str(target)])
    assert result.exit_code == EXIT_CODES["system"] and "is not writable" in result.stderr

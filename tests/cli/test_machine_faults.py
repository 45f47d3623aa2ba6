"""Faults of the machine (a full disk, a read-only file system, a name too long): one line, the path,
the cause, the exit code of its kind, and the warehouse as it was.

A full disk is injected into the writer with the exact error pyarrow raises on one (checked on a
full tmpfs: ``OSError(28, 'Error writing bytes to file. Detail: [errno 28] No space left on
device')``, naming no file), and, where this machine lets the tests mount a small tmpfs, met for real.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import qkdb
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES

from helpers.datasets import make_dataset
from helpers.warehouse_state import rows, tree

FACTS = ["--family", "Toy", "--gqa-ratio", "2", "--n-layers", "2"]
PYARROW_ENOSPC = (errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")


def _ingest(runner, ds, model, home, *extra):
    return runner.invoke(app, ["ingest", "--path", str(ds), "--model", model, *FACTS, "-q", "-j", "1",
                               "--home", str(home), *extra])


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def warehouse_with_a_model(tmp_path):
    home = tmp_path / "home"
    ds = make_dataset(tmp_path / "ds", n=300)
    qkdb.ingest(ds, "first", family="Toy", gqa_ratio=2, n_layers=2, workers=1, home=home)
    return home, ds


@pytest.mark.parametrize("after", [0, 3], ids=["first table", "fourth table"])
def test_a_full_disk_while_staging_is_one_line_naming_the_file_and_nothing_changes(
    runner, monkeypatch, warehouse_with_a_model, after
):
    home, ds = warehouse_with_a_model
    before_tree, before_rows = tree(home, locks=False), rows(home)
    real, calls = pq.ParquetWriter.write_table, []

    def full_after_some(self, table, *args, **kwargs):
        calls.append(table)
        if len(calls) > after:
            raise OSError(*PYARROW_ENOSPC)
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full_after_some)
    result = _ingest(runner, ds, "second", home)
    assert result.exit_code == EXIT_CODES["system"]
    line = _one_line(result)
    assert line.startswith(f"error: {home}/.staging/second.") and "/data.parquet" in line  # the file it was writing
    assert line.endswith(": no space left on device (qkdb ingest)")
    monkeypatch.undo()
    assert tree(home, locks=False) == before_tree and rows(home) == before_rows
    assert not list(home.rglob("*.tmp"))


def _full_disk_for(monkeypatch, path_part: str):
    """pyarrow's full-disk error for writes whose path contains ``path_part``."""
    real = pq.write_table

    def write_table(table, where, **kwargs):
        if path_part in str(where):
            Path(where).write_bytes(b"PAR1" + b"\0" * 100)  # a partial file, as a full disk leaves one
            raise OSError(*PYARROW_ENOSPC)
        return real(table, where, **kwargs)

    monkeypatch.setattr(pq, "write_table", write_table)


def _models(home) -> set[str]:
    con = qkdb.connect(home)
    try:
        return {m for (m,) in con.execute("select model from models").fetchall()}
    finally:
        con.close()


def test_a_full_disk_after_the_publish_says_the_model_is_in(runner, monkeypatch, warehouse_with_a_model):
    home, ds = warehouse_with_a_model
    _full_disk_for(monkeypatch, "/ingest_runs/")
    result = _ingest(runner, ds, "second", home)
    assert result.exit_code == EXIT_CODES["system"]
    line = _one_line(result)
    assert f"{home}/ingest_runs/model=second/" in line
    assert line.endswith(": no space left on device (second is published, but its ingest_runs row was not written)")
    monkeypatch.undo()
    assert _models(home) == {"first", "second"} and not list(home.rglob("*.tmp"))


def test_a_full_disk_for_the_intervals_is_a_note_the_findings_recover_from(runner, monkeypatch, warehouse_with_a_model):
    home, ds = warehouse_with_a_model
    _full_disk_for(monkeypatch, "/finding_intervals/")
    result = _ingest(runner, ds, "second", home)
    assert result.exit_code == 0, result.stderr
    assert f"findings intervals not updated ({home}/finding_intervals/data.parquet: no space left on device" in result.stderr
    monkeypatch.undo()
    assert _models(home) == {"first", "second"}
    findings = runner.invoke(app, ["findings", "--home", str(home), "--format", "csv"])
    assert findings.exit_code == 0 and "intervals were out of date" in findings.stderr and "recomputed" in findings.stderr


def test_a_name_longer_than_the_file_system_allows(runner, tmp_path, warehouse_with_a_model):
    home, ds = warehouse_with_a_model
    before = tree(home)
    result = _ingest(runner, ds, "m" * 300, home)
    assert result.exit_code == EXIT_CODES["input"] and "300 characters long: at most 200" in _one_line(result)
    assert tree(home) == before
    # A folder name the file system itself refuses (255 bytes on ext4 and tmpfs).
    out = tmp_path / ("x" * 300)
    result = runner.invoke(app, ["simulate", "--out", str(out), "--layers", "1", "--vectors", "50"])
    assert result.exit_code == EXIT_CODES["system"]
    assert _one_line(result).endswith(f"{out}: file name too long for this file system (qkdb simulate)")


def test_a_missing_output_folder_is_said_before_the_work(runner, tmp_path, warehouse_with_a_model):
    home, _ = warehouse_with_a_model
    for args in (["chart", "bias-strength", "-o", str(tmp_path / "no" / "x.png")],
                 ["report", "-o", str(tmp_path / "no" / "r.html")],
                 ["query", "select 1", "-o", str(tmp_path / "no" / "q.csv")]):
        result = runner.invoke(app, [*args, "--home", str(home)])
        assert result.exit_code == EXIT_CODES["not_found"], args
        assert str(tmp_path / "no") in _one_line(result)
        assert "ok " not in result.stderr  # the report built no figure first


@pytest.fixture
def mount(tmp_path):
    """Mount a small tmpfs (root, or a user namespace that allows it); unmounted afterwards."""
    mounted = []

    def do(name: str, *options: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"this machine does not let the tests mount a tmpfs: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield do
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_real_full_disk(runner, tmp_path, mount, warehouse_with_a_model):
    _, ds = warehouse_with_a_model
    small = mount("small", "size=4m")
    home = small / "home"
    assert _ingest(runner, ds, "first", home).exit_code == 0  # fits
    before_tree, before_rows = tree(home, locks=False), rows(home)
    st = os.statvfs(small)
    (small / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - 64 * 1024))
    result = _ingest(runner, ds, "second", home)
    assert result.exit_code == EXIT_CODES["system"]
    line = _one_line(result)
    assert "no space left on device" in line and str(home) in line
    (small / "filler").unlink()
    assert tree(home, locks=False) == before_tree and rows(home) == before_rows
    assert _ingest(runner, ds, "second", home).exit_code == 0  # and it recovers once there is room


def test_a_read_only_file_system(runner, tmp_path, mount, warehouse_with_a_model):
    home, ds = warehouse_with_a_model
    ro = mount("ro", "ro", "size=1m")
    result = _ingest(runner, ds, "toy", ro / "home")
    assert result.exit_code == EXIT_CODES["system"]
    assert _one_line(result) == f"error: warehouse home {ro / 'home'} is not writable: read-only file system"
    result = runner.invoke(app, ["simulate", "--out", str(ro / "sim"), "--layers", "1", "--vectors", "50"])
    assert result.exit_code == EXIT_CODES["system"] and "read-only file system" in _one_line(result)
    result = runner.invoke(app, ["chart", "bias-strength", "-o", str(ro / "x.png"), "--home", str(home)])
    assert result.exit_code == EXIT_CODES["system"]
    assert _one_line(result) == f"error: cannot write '{ro / 'x.png'}': read-only file system"

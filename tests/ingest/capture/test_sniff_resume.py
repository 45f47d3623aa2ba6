"""A ``qkdb sniff`` killed at any moment continues when run again, and ends equal to an uninterrupted capture.

The kills are real: ``qkdb sniff`` runs in a process of its own, stopped at a point of the capture
(``ingest/capture/partial.py``'s ``PAUSES``, filled in that process before the CLI runs, as the
ingest's crash tests do) and killed there with SIGKILL — between a text's rows and its statistics,
in the middle of writing the dataset, and after the dataset was moved into place but before the
working folder was removed. After every kill nothing is at ``--out`` but a complete capture, and the
same command continues; the final dataset equals, row for row and byte for byte, one captured
without interruption.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402

from qkdb.errors import EXIT_CODES, SniffError  # noqa: E402
from qkdb.ingest.sources.layout import discover, read_metadata  # noqa: E402

N_TEXTS = 8


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer):
    return tm.build(tmp_path_factory.mktemp("tiny-llama"), "llama", *tokenizer)


def _args(model, corpus, out, *extra) -> list[str]:
    return ["sniff", "--model-path", str(model), "--out", str(out), "--text", str(corpus), "--texts", str(N_TEXTS),
            "--max-length", "48", "--q-heads", "5", "--vectors-per-head", "64", "--min-bucket-size", "8",
            "--seed", "3", "--model", "tiny", "-q", *extra]


def _start(args, pauses: dict | None = None) -> subprocess.Popen:
    code = "from qkdb.ingest.capture import partial\n"
    for point, seconds in (pauses or {}).items():
        code += f"partial.PAUSES[{point!r}] = {seconds!r}\n"
    code += "from qkdb.__main__ import main\nmain()\n"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the capture ended before the kill ({proc.returncode}): {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the capture never reached the point to kill it at")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _tables(out) -> dict:
    found = discover(out)
    return {p.path.parent.name: pq.read_table(p.path) for p in (*found.queries.values(), *found.keys.values())}


def test_a_capture_killed_anywhere_continues_and_equals_an_uninterrupted_one(model, family_corpus, tmp_path, runner):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    reference = tmp_path / "reference"
    sniff(SniffOptions(out=reference, model_path=model, text=str(family_corpus), n_texts=N_TEXTS, max_length=48,
                       q_heads=5, vectors_per_head=64, min_bucket_size=8, seed=3, model_name="tiny", threads=1))
    out = tmp_path / "killed"
    work = tmp_path / ".killed.partial"
    args = _args(model, family_corpus, out, "--threads", "1")

    # 1. between text 2's rows and its statistics
    proc = _start(args, {"rows_written:2": 60})
    _kill_when(proc, lambda: (work / "texts" / "000002.npy").is_file())
    assert not out.exists()
    assert sorted(p.name for p in (work / "texts").iterdir()) == [
        "000000.json", "000000.lse.npy", "000000.npy", "000001.json", "000001.lse.npy", "000001.npy",
        "000002.lse.npy", "000002.npy"]

    # 2. the same command continues (texts 0 and 1 complete; text 2's rows without statistics are not);
    #    killed again while the dataset is being written
    proc = _start(args, {"assembling": 60})
    _kill_when(proc, lambda: (work / "build").is_dir() and any((work / "build").iterdir()))
    assert not out.exists()
    assert len(list((work / "texts").glob("*.json"))) == N_TEXTS

    # 3. killed after the dataset was moved into place, before the working folder was removed
    proc = _start(args, {"published": 60})
    _kill_when(proc, lambda: out.is_dir())
    assert work.is_dir() and (out / "qkdb_dataset.json").is_file()

    # 4. the same command finds it complete and cleans up (nothing to kill: in this process)
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "already complete" in done.stderr and not work.exists()

    got, want = _tables(out), _tables(reference)
    assert got.keys() == want.keys() and len(got) > 5
    for name, table in got.items():
        assert table.equals(want[name]), name  # row for row, every column, the vectors' bytes included
        pairs = np.stack([table.column("example_id").to_numpy(), table.column("position").to_numpy()], axis=1)
        assert len(np.unique(pairs, axis=0)) == table.num_rows  # no (example_id, position) twice
    assert read_metadata(out) == read_metadata(reference)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _interrupted(model, corpus, out, after_text: int = 1, **kw):
    """A capture stopped by Ctrl-C after ``after_text`` texts (what it keeps is what a kill keeps)."""
    from qkdb.ingest.capture import partial
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    def stop(self, text, block, stats, lse=None, _orig=partial.PartialCapture.commit_text):
        _orig(self, text, block, stats, lse=lse)
        if text == after_text:
            raise KeyboardInterrupt

    opts = dict(out=out, model_path=model, text=str(corpus), n_texts=N_TEXTS, max_length=48, q_heads=5,
                vectors_per_head=64, min_bucket_size=8, seed=3, model_name="tiny")
    opts.update(kw)
    original = partial.PartialCapture.commit_text
    partial.PartialCapture.commit_text = stop
    try:
        with pytest.raises(KeyboardInterrupt):
            sniff(SniffOptions(**opts))
    finally:
        partial.PartialCapture.commit_text = original
    return opts


def test_other_options_are_refused_naming_the_difference_and_resume_takes_the_recorded_ones(
        model, family_corpus, tmp_path, runner):
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    out = tmp_path / "out"
    _interrupted(model, family_corpus, out)
    args = _args(model, family_corpus, out)
    r = runner.invoke(app, [*args[:-1], "--seed", "4", "--dtype", "float16", "-q"])
    assert r.exit_code == EXIT_CODES["input"], r.output
    line = r.output.strip()
    assert len(line.splitlines()) == 1 and "a partial capture with other options" in line
    assert "--dtype float16 (the partial capture's: float32)" in line and "--seed 4 (the partial capture's: 3)" in line
    assert not out.exists()
    # --resume alone continues with the options it was started with; given ones must agree
    r = runner.invoke(app, ["sniff", "--out", str(out), "--resume", "--seed", "9", "-q"])
    assert r.exit_code == EXIT_CODES["input"] and "--seed 9 (the partial capture's: 3)" in r.output
    r = runner.invoke(app, ["sniff", "--out", str(out), "--resume", "-q"])
    assert r.exit_code == 0, r.output
    assert "continued after 2 complete texts" in r.output
    meta = read_metadata(out)
    assert meta["capture"]["seed"] == 3 and meta["capture"]["texts"]["n_texts"] == N_TEXTS
    # nothing to resume: one line
    r = runner.invoke(app, ["sniff", "--out", str(tmp_path / "none"), "--resume", "-q"])
    assert r.exit_code == EXIT_CODES["not_found"] and "nothing to resume" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_force_discards_a_partial_capture_of_other_options(model, family_corpus, tmp_path):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    out = tmp_path / "out"
    opts = _interrupted(model, family_corpus, out)
    result = sniff(SniffOptions(**{**opts, "seed": 4, "force": True}))
    assert result.resumed_from == 0 and read_metadata(out)["capture"]["seed"] == 4


def test_a_model_that_changed_since_is_refused_and_the_partial_capture_kept(tokenizer, family_corpus, tmp_path):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    folder = tm.build(tmp_path / "model", "llama", *tokenizer, seed=0)
    out = tmp_path / "out"
    opts = _interrupted(folder, family_corpus, out)
    tm.build(folder, "llama", *tokenizer, seed=1)  # other weights, same files, same config
    with pytest.raises(SniffError, match=r"gives other vectors for the first text than the partial capture stored"):
        sniff(SniffOptions(**opts))
    assert (tmp_path / ".out.partial" / "texts" / "000001.json").is_file()  # kept: --force decides


def test_what_a_kill_leaves_half_written_is_never_taken_for_a_complete_text(model, family_corpus, tmp_path):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    out = tmp_path / "out"
    opts = _interrupted(model, family_corpus, out, after_text=2)
    texts = tmp_path / ".out.partial" / "texts"
    (texts / "000003.npy.tmp").write_bytes(b"half")  # killed while writing
    (texts / "000003.npy").write_bytes(b"\x93NUMPY garbage")  # rows renamed, statistics never written
    (texts / "000004.json").write_text(json.dumps({"text": 4}))  # (cannot happen: texts run in order)
    result = sniff(SniffOptions(**opts))
    assert result.resumed_from == 3
    reference = sniff(SniffOptions(**{**opts, "out": tmp_path / "reference"}))
    got, want = _tables(result.out), _tables(reference.out)
    assert all(got[k].equals(want[k]) for k in want)

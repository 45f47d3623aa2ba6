"""A series of checkpoints in one command: ``--revision`` several times, on this machine or one Ray task each.

The checkpoints are branches of a model repo on the local fake Hub (tests/helpers/hub_server.py,
``add_model``), downloaded by transformers as from the Hub; every run is a process of its own, since
transformers and huggingface_hub read ``HF_ENDPOINT`` at import. The captures of a series must be
paired — the same head files holding the same (example_id, position) rows — and differ only in
their vectors; a revision whose config would draw other heads is refused before any weights load.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.sniff

from helpers import tiny_models as tm  # noqa: E402
from helpers.hub_server import FakeHub  # noqa: E402

from qkdb.errors import EXIT_CODES  # noqa: E402
from qkdb.ingest.sources.layout import discover, read_head, read_metadata  # noqa: E402

REPO = "acme/tiny-ckpt"


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("checkpoints")
    with FakeHub() as fake:
        repo = fake.add_model(REPO)
        for step, seed in (("step1", 0), ("step2", 1), ("main", 1)):
            repo.push_dir(step, tm.build(root / step, "llama", *tokenizer, seed=seed))
        # a "checkpoint" of another shape: it would draw other heads
        repo.push_dir("wider", tm.build(root / "wider", "llama", *tokenizer, num_hidden_layers=4))
        yield fake


def _qkdb(hub, tmp_path, *args, timeout=300, env=None):
    env = env or {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "cache"),
                  "HF_HUB_DISABLE_XET": "1"}
    return subprocess.run([sys.executable, "-m", "qkdb", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _args(out, corpus, *revisions, extra=()):
    revs = [a for r in revisions for a in ("--revision", r)]
    return ["sniff", "--model-path", REPO, *revs, "--out", str(out), "--text", str(corpus), "--texts", "2",
            "--max-length", "48", "--q-heads", "4", "--vectors-per-head", "40", "--min-bucket-size", "8", "-q",
            *extra]


def _paired(a, b) -> None:
    fa, fb = discover(a), discover(b)
    assert fa.queries.keys() == fb.queries.keys() and fa.keys.keys() == fb.keys.keys()
    for table_a, table_b in ((fa.queries, fb.queries), (fa.keys, fb.keys)):
        for key, hf in table_a.items():
            ta, tb = pq.read_table(hf.path), pq.read_table(table_b[key].path)
            for col in ("example_id", "position", "bucket"):
                assert ta.column(col).equals(tb.column(col)), (key, col)


CPU = ["--device", "cpu"]  # the cluster's tasks compute on the CPU: the local series too, to compare


@pytest.fixture(scope="module")
def series(hub, family_corpus, tmp_path_factory):
    """``OUT`` of the series step1, step2 captured by one command (shared: every capture is a process)."""
    tmp = tmp_path_factory.mktemp("series")
    done = _qkdb(hub, tmp, *_args(tmp / "series", family_corpus, "step1", "step2", extra=CPU))
    assert done.returncode == 0, done.stderr
    return tmp / "series"


def test_a_series_captures_every_revision_paired_and_skips_those_done(hub, series, family_corpus, tmp_path):
    out = series
    assert sorted(p.name for p in out.iterdir()) == ["step1", "step2"]
    _paired(out / "step1", out / "step2")
    a, b = read_metadata(out / "step1"), read_metadata(out / "step2")
    assert (a["model"], b["model"]) == ("tiny-ckpt-step1", "tiny-ckpt-step2")
    assert (a["hf_model"], a["model_revision"], b["model_revision"]) == (REPO, "step1", "step2")
    commits = hub.models[REPO].branches
    assert (a["capture"]["model_commit"], b["capture"]["model_commit"]) == (commits["step1"], commits["step2"])
    assert a["capture"]["plan_sha256"] == b["capture"]["plan_sha256"]
    va = read_head(next(iter(discover(out / "step1").queries.values())).path).vectors
    vb = read_head(next(iter(discover(out / "step2").queries.values())).path).vectors
    assert not np.allclose(va, vb)  # two checkpoints
    # the same command again: both already there, nothing captured
    again = _qkdb(hub, tmp_path, *_args(out, family_corpus, "step1", "step2", extra=CPU))
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("already captured") == 2


def test_revisions_that_would_not_pair_are_refused_before_any_weights_load(hub, family_corpus, tmp_path):
    hub.clear_log()
    done = _qkdb(hub, tmp_path, *_args(tmp_path / "out", family_corpus, "step1", "wider"))
    assert done.returncode == EXIT_CODES["input"], done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "do not draw the same heads and positions" in line and "step1; wider" in line
    assert not any(r.path.endswith(".safetensors") for r in hub.log)  # no weights downloaded
    assert not (tmp_path / "out").exists()
    missing = _qkdb(hub, tmp_path, *_args(tmp_path / "m", family_corpus, "step9"))
    assert missing.returncode == EXIT_CODES["not_found"], missing.stderr
    assert f"model {REPO}: revision 'step9' not found on the Hub" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_one_revision_is_one_capture_and_like_pairs_it_with_the_series(hub, series, tmp_path, runner):
    first = series / "step1"
    later = tmp_path / "main"  # one --revision: the capture is --out itself
    done = _qkdb(hub, tmp_path, "sniff", "--model-path", REPO, "--revision", "main", "--out", str(later),
                 "--like", str(first), "-q")
    assert done.returncode == 0, done.stderr
    _paired(first, later)
    meta = read_metadata(later)
    assert meta["capture"]["like"]["model_revision"] == "step1" and meta["model_revision"] == "main"
    # Each capture's weights, by the Hub's LFS ids (nothing hashed again): main is step2 again (one seed), as
    # some Hub step branches are (issue 40); step1 is not.
    import hashlib

    weights = {rev: read_metadata(p)["capture"] for rev, p in (("step1", first), ("step2", series / "step2"),
                                                                 ("main", later))}
    repo = hub.models[REPO]
    for rev, cap in weights.items():
        files = repo.commits[repo.branches[rev]].files
        assert cap["weight_files"] == {"model.safetensors": {
            "sha256": hashlib.sha256(files["model.safetensors"]).hexdigest(), "from": "lfs oid"}}, rev
    assert weights["main"]["weights_sha256"] == weights["step2"]["weights_sha256"] != weights["step1"]["weights_sha256"]
    # (refused on the command line, before the Hub is asked: in this process)
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    clash = runner.invoke(app, ["sniff", "--model-path", REPO, "--out", str(tmp_path / "x"), "--like", str(first),
                                "--q-heads", "2", "--seed", "1", "-q"])
    assert clash.exit_code == EXIT_CODES["usage"], clash.output
    assert f"--like takes the texts, heads and positions from {first}: drop --q-heads" in clash.output
    assert not (tmp_path / "x").exists()


# -- on a Ray cluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_head(hub):
    from helpers.ray_head import running_head

    from qkdb.ingest.engine.runtime import scoped_env

    # the workers download the checkpoints from the fake Hub: the head (and so they) must know it
    with scoped_env({"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}), running_head() as head:
        yield head


@pytest.mark.cluster
def test_on_a_cluster_each_revision_is_a_task_and_the_captures_equal_local_ones(hub, ray_head, series,
                                                                                family_corpus, tmp_path):
    local = series
    out = tmp_path / "cluster"
    env = {**ray_head.env, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "cache")}
    done = _qkdb(hub, tmp_path, *_args(out, family_corpus, "step1", "step2",
                                       extra=[*CPU, "--cluster", ray_head.address]), env=env)
    assert done.returncode == 0, done.stderr
    for rev in ("step1", "step2"):
        _paired(local / rev, out / rev)
        a, b = discover(local / rev), discover(out / rev)
        for key, hf in a.queries.items():
            np.testing.assert_allclose(read_head(b.queries[key].path).vectors, read_head(hf.path).vectors,
                                       rtol=1e-5, atol=1e-6)
        ma, mb = read_metadata(local / rev), read_metadata(out / rev)
        assert ma["capture"]["plan_sha256"] == mb["capture"]["plan_sha256"]
        assert ma["capture"]["model_commit"] == mb["capture"]["model_commit"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]

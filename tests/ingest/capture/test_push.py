"""A capture pushed to a Hub branch (sniffed-qk layout and a dataset card) reads back through `qkdb ingest --repo --revision`.

Against the fake Hub (tests/helpers/hub_server.py) through the real huggingface_hub client (its Xet
upload path off: the fake speaks LFS). The last test runs `qkdb sniff --push-to-hub` on a tiny random
Llama (the ``sniff`` extra) in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from huggingface_hub import constants

import qkdb
from helpers.hub_server import FakeHub
from helpers.warehouse_state import metric_differences
from qkdb.errors import EXIT_CODES, HubError, InputError
from qkdb.ingest.capture.push import capture_files, push_capture
from qkdb.ingest.capture.simulate import simulate

REPO = "me/captures"
TOKEN = "hf_write_token"


@pytest.fixture(autouse=True)
def _lfs_uploads(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    return simulate(tmp_path_factory.mktemp("cap") / "sim", layers=2, q_heads=8, kv_heads=4, head_dim=16, vectors=200,
                    sample_q_heads=4, seed=1, workers=1, model="sim-x", family="Sim", rope_theta=5000.0)


@pytest.fixture
def hub():
    with FakeHub(page_size=50) as fake:
        yield fake


def test_the_branch_holds_the_capture_and_its_card_and_a_second_push_sends_nothing(hub, capture):
    done = push_capture(capture, REPO, "sim-x", endpoint=hub.url, token=TOKEN)
    assert done.created_repo and done.created_branch
    files = hub.repos[REPO].commits[done.commit].files
    local = capture_files(capture)
    assert set(files) == set(local) | {"README.md", ".gitattributes"}
    assert all(files[p] == f.read_bytes() for p, f in local.items())
    assert "qkdb_dataset.json" in local and "planted.json" in local and len([p for p in local if p.endswith("/data.parquet")]) == 7
    card = files["README.md"].decode()
    meta = json.loads(files["qkdb_dataset.json"])
    for needle in ("# sim-x:", "family Sim", "theta 5000", "pairing half", "4 query heads of 2 × 8",
                   "3 key heads", f"qkdb ingest --repo {REPO} --revision sim-x", json.dumps(meta, indent=2, sort_keys=True)):
        assert needle in card, needle
    hub.clear_log()
    again = push_capture(capture, REPO, "sim-x", endpoint=hub.url, token=TOKEN)
    assert not again.changed and again.commit == done.commit
    assert not [r for r in hub.log if r.method in ("PUT", "POST")]


def test_ingest_by_repo_and_revision_reads_the_pushed_capture_as_the_folder(hub, capture, tmp_path):
    push_capture(capture, REPO, "sim-x", endpoint=hub.url, token=TOKEN)
    from_hub = qkdb.ingest(repo=REPO, revision="sim-x", endpoint=hub.url, cache_dir=tmp_path / "hf", token=False,
                           home=tmp_path / "a", workers=1)
    from_path = qkdb.ingest(capture, home=tmp_path / "b", workers=1)
    assert from_hub.model == from_path.model == "sim-x" and from_hub.heads_done == from_path.heads_done == 4
    assert metric_differences(tmp_path / "a", tmp_path / "b") == []
    con = qkdb.connect(tmp_path / "a")
    try:
        assert con.sql("select commit from ingest_runs").fetchall() == [(hub.repos[REPO].branches["sim-x"],)]
    finally:
        con.close()


def test_a_branch_that_is_not_a_capture_is_not_written_over_unless_forced(hub, capture):
    repo = hub.add_repo(REPO)
    repo.push("main", {".gitattributes": b""})
    before = repo.push("sim-x", {"notes.txt": b"mine", ".gitattributes": b""})
    with pytest.raises(HubError) as err:
        push_capture(capture, REPO, "sim-x", endpoint=hub.url, token=TOKEN)
    assert err.value.exit_code == EXIT_CODES["input"] and "notes.txt" in str(err.value) and "--force" in str(err.value)
    assert repo.branches["sim-x"] == before
    done = push_capture(capture, REPO, "sim-x", endpoint=hub.url, token=TOKEN, force=True)
    assert done.deleted == ["notes.txt"]


def test_a_folder_that_is_not_a_capture_is_refused_before_any_request(hub, tmp_path, capture):
    with pytest.raises(InputError) as err:
        push_capture(tmp_path / "nothing", REPO, "b", endpoint=hub.url, token=TOKEN)
    assert err.value.exit_code == EXIT_CODES["not_found"]
    bare = tmp_path / "bare"
    head = next(p for p in sorted(capture.iterdir()) if p.name.endswith("q"))
    (bare / head.name).mkdir(parents=True)
    (bare / head.name / "data.parquet").write_bytes((head / "data.parquet").read_bytes())
    with pytest.raises(InputError, match="no qkdb_dataset.json"):
        push_capture(bare, REPO, "b", endpoint=hub.url, token=TOKEN)
    assert hub.log == []


@pytest.mark.sniff
def test_sniff_push_to_hub_then_ingest_reads_it_back(hub, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from helpers import tiny_models
    from qkdb.ingest.capture import texts

    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in texts.pydoc_documents()[40:44]))
    model = tiny_models.build(tmp_path / "tiny-llama", "llama", *tiny_models.train_tokenizer(tmp_path / "tok"))
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_CACHE": str(tmp_path / "hf")}
    out = tmp_path / "sniffed"
    done = subprocess.run(
        [sys.executable, "-m", "qkdb", "sniff", "--model-path", str(model), "--out", str(out), "--text", str(corpus),
         "--texts", "2", "--max-length", "64", "--q-heads", "3", "--vectors-per-head", "40", "--model", "tiny",
         "--family", "Tiny", "-q", "--push-to-hub", REPO, "--branch", "tiny-capture"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "pushed" in done.stderr and f"next: qkdb ingest --repo {REPO} --revision tiny-capture" in done.stderr
    files = hub.repos[REPO].commits[hub.repos[REPO].branches["tiny-capture"]].files
    card = files["README.md"].decode()
    for needle in ("# tiny:", "family Tiny", "texts from", "positions", "3 query heads", "transformers"):
        assert needle in card, needle
    ingested = subprocess.run([sys.executable, "-m", "qkdb", "ingest", "--repo", REPO, "--revision", "tiny-capture",
                               "-j", "1", "-q", "--home", str(tmp_path / "a")], env=env, capture_output=True, text=True)
    assert ingested.returncode == 0, ingested.stderr
    qkdb.ingest(out, home=tmp_path / "b", workers=1)
    assert metric_differences(tmp_path / "a", tmp_path / "b") == []
    # Offline, the push is refused before the capture starts.
    offline = subprocess.run([sys.executable, "-m", "qkdb", "sniff", "--model-path", str(model), "--out",
                              str(tmp_path / "o"), "--push-to-hub", REPO], env={**env, "HF_HUB_OFFLINE": "1"},
                             capture_output=True, text=True)
    assert offline.returncode == EXIT_CODES["network"] and "offline" in offline.stderr and not (tmp_path / "o").exists()

"""The sharing workflows end to end, as a user runs them: `qkdb` in its own process against the fake Hub.

``HF_ENDPOINT`` is read by huggingface_hub at import, so every command is a subprocess with it in
its environment (and a token of its own in ``HF_TOKEN``, the cache in ``HF_HUB_CACHE``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

import qkdb
from helpers.datasets import make_dataset
from helpers.hub_server import FakeHub
from helpers.warehouse_state import metric_differences
from qkdb.errors import EXIT_CODES

FACTS = ["--family", "Toy", "--gqa-ratio", "2", "--n-layers", "2", "-j", "1", "-q"]


@pytest.fixture
def hub():
    with FakeHub(page_size=50) as fake:
        yield fake


@pytest.fixture
def run(hub, tmp_path):
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf-cache"), "HF_TOKEN": "hf_write_token",
           "HF_HUB_DISABLE_XET": "1", "SOURCE_DATE_EPOCH": "1700000000", "COLUMNS": "200"}
    env.pop("QKDB_HOME", None)

    def qkdb_cli(*args, **extra_env):
        return subprocess.run([sys.executable, "-m", "qkdb", *map(str, args)], env={**env, **extra_env},
                              capture_output=True, text=True, timeout=600)

    return qkdb_cli


def _one_error_line(done, kind):
    assert done.returncode == EXIT_CODES[kind], done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in done.stderr
    return lines[-1]


def test_publish_pull_and_the_pulled_findings_and_report_are_the_publishers_byte_for_byte(run, hub, tmp_path):
    pub, pulled = tmp_path / "pub", tmp_path / "pulled"
    for i, name in enumerate(("toy-a", "toy-b")):
        assert run("ingest", "--path", make_dataset(tmp_path / f"ds{i}", seed=i), "--model", name, *FACTS,
                   "--home", pub).returncode == 0
    done = run("publish", "me/wh", "--home", pub)
    assert done.returncode == 0, done.stderr
    assert "published 2 model(s) to me/wh@main in one commit" in done.stderr and done.stdout == ""
    again = run("publish", "me/wh", "--home", pub)
    assert again.returncode == 0 and "nothing uploaded, no commit" in again.stderr
    got = run("pull", "me/wh", "--home", pulled)
    assert got.returncode == 0, got.stderr
    assert "added toy-a, toy-b" in got.stderr and "the same as the publisher's, row for row" in got.stderr
    for fmt in ("table", "csv", "json"):
        ours, theirs = run("findings", "-f", fmt, "--home", pulled), run("findings", "-f", fmt, "--home", pub)
        assert ours.returncode == 0 and ours.stdout == theirs.stdout and ours.stdout, fmt
    reports = []
    for home in (pub, pulled):
        out = tmp_path / f"report-{home.name}.html"
        assert run("report", "-o", out, "--home", home).returncode == 0
        reports.append(out.read_bytes())
    assert reports[0] == reports[1] and len(reports[0]) > 10_000
    # Offline, once pulled: into another home, from the cache alone.
    offline = run("pull", "me/wh", "--home", tmp_path / "offline", HF_HUB_OFFLINE="1")
    assert offline.returncode == 0 and "offline:" in offline.stderr and "added toy-a, toy-b" in offline.stderr
    # The commit a user cites by its first 12 characters (issue 41): the Hub resolves only whole shas.
    head = hub.repos["me/wh"].branches["main"]
    assert head in done.stderr  # (publish prints it whole)
    short = run("pull", f"me/wh@{head[:12]}", "--home", tmp_path / "short")
    assert short.returncode == 0 and "added toy-a, toy-b" in short.stderr, short.stderr


def test_refusals_are_one_line_with_the_code_of_their_kind(run, hub, tmp_path):
    pub = tmp_path / "pub"
    assert run("ingest", "--path", make_dataset(tmp_path / "ds"), "--model", "toy", *FACTS, "--home", pub).returncode == 0
    line = _one_error_line(run("publish", "me/wh", "--home", pub, "--no-figures", HF_TOKEN="hf_valid_token"), "input")
    assert "write access" in line
    hub.model_repos.add("me/model")
    assert "is a model repo" in _one_error_line(run("publish", "me/model", "--home", pub, "--no-figures"), "input")
    assert "is a model repo" in _one_error_line(run("pull", "me/model", "--home", tmp_path / "h"), "not_found")
    assert run("publish", "me/wh", "--home", pub, "--no-figures").returncode == 0
    line = _one_error_line(run("pull", "me/wh@nope", "--home", tmp_path / "h"), "not_found")
    assert "'nope' not found" in line and "1 branch (" in line
    # The command the refusal suggests works, and shows the branch there is.
    (suggested,) = re.findall(r"`qkdb ([^`]+)`", line)
    listed = run(*shlex.split(suggested))
    assert listed.returncode == 0 and "main" in listed.stdout, listed.stderr
    assert "owner/name" in _one_error_line(run("pull", "not-a-repo", "--home", tmp_path / "h"), "usage")
    assert not (tmp_path / "h").exists()
    hub.commit_failure = "before"
    assert run("ingest", "--path", make_dataset(tmp_path / "ds2", seed=5), "--model", "toy2", *FACTS,
               "--home", pub).returncode == 0
    line = _one_error_line(run("publish", "me/wh", "--home", pub, "--no-figures"), "network")
    assert "me/wh@main is unchanged" in line


def test_hub_push_then_ingest_by_repo_and_revision_alone(run, hub, tmp_path):
    data = tmp_path / "sim"
    assert run("simulate", "--out", data, "--layers", "2", "--q-heads", "8", "--kv-heads", "4", "--head-dim", "16",
               "--vectors", "200", "--sample-heads", "4", "--model", "sim-x", "--family", "Sim").returncode == 0
    done = run("hub", "push", data, "--repo", "me/captures")
    assert done.returncode == 0, done.stderr
    assert "pushed" in done.stderr and "next: qkdb ingest --repo me/captures --revision sim-x" in done.stderr
    from_hub = run("ingest", "--repo", "me/captures", "--revision", "sim-x", "-j", "1", "-q", "--home", tmp_path / "a")
    assert from_hub.returncode == 0, from_hub.stderr
    assert run("ingest", "--path", data, "-j", "1", "-q", "--home", tmp_path / "b").returncode == 0
    assert metric_differences(tmp_path / "a", tmp_path / "b") == []
    con = qkdb.connect(tmp_path / "a")
    try:
        assert con.sql("select source, location, revision from models").fetchall() == [("hub", "me/captures", "sim-x")]
    finally:
        con.close()
    assert "nothing uploaded" in run("hub", "push", data, "--repo", "me/captures").stderr
    assert "give --branch" in _one_error_line(run("hub", "push", tmp_path / "a", "--repo", "me/captures"), "usage")

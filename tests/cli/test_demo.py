"""The bundled real sample and ``qkdb demo``, end to end, offline.

The sample holds real vectors of SmolLM2-135M-Instruct (see scripts/make_sample.sh); these tests
check that it is what the script says, that the demo ingests it into a fresh home without any
network, and that the seeds' qualitative findings hold on it.
"""

from __future__ import annotations

import importlib.util
import re
import socket
from pathlib import Path

import numpy as np
import pytest

import qkdb
from qkdb.cli.app import app
from qkdb.ingest.capture import sampling
from qkdb.ingest.sources.layout import discover, read_head, read_metadata
from qkdb.ingest.capture.sniff_sample import SAMPLE_FAMILY, SAMPLE_MODEL, sample_path

import qkdb.cli.demo  # noqa: F401,E402  (registers the command if the app does not yet)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def offline(monkeypatch):
    """Any attempt to open a network connection in this process fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("qkdb demo tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _script_flags() -> dict[str, str]:
    text = (REPO / "scripts" / "make_sample.sh").read_text()
    return dict(re.findall(r"--([a-z-]+) ([^\s\\-][^\s\\]*)", text))


def test_sample_is_what_the_script_says_and_fits_the_budget():
    with sample_path() as root:
        meta = read_metadata(root)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        found = discover(root)
        flags = _script_flags()
        assert size <= 12_000_000
        assert meta["model"] == SAMPLE_MODEL == flags["model"] and meta["family"] == SAMPLE_FAMILY
        assert (meta["n_layers"], meta["n_q_heads"], meta["n_kv_heads"], meta["head_dim"]) == (30, 9, 3, 64)
        assert meta["rope_theta"] == 100000.0 and meta["source"] == "sniff"
        cap = meta["capture"]
        assert cap["texts"]["source"] == flags["text"] == "pydoc"
        assert cap["max_length"] == int(flags["max-length"]) and cap["seed"] == int(flags["seed"])
        assert cap["q_heads"] == int(flags["q-heads"]) and cap["dtype"] == flags["dtype"] == "float16"
        assert cap["positions"]["vectors_per_head"] == int(flags["vectors-per-head"])
        assert cap["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and cap["pre_rope"] is False
        # the heads are the seeded sample and the key heads their GQA groups
        q = sampling.sample_query_heads(30, 9, cap["q_heads"], cap["seed"])
        assert sorted(found.queries) == q
        assert sorted(found.keys) == sampling.key_heads_for(q, 9, 3)
        one = read_head(found.queries[q[0]].path)
        assert one.vectors.shape == (cap["positions"]["vectors_per_head"], 64) and one.n_dropped == 0
        assert one.positions.max() >= 1024 and one.positions.min() < 128
        assert len(np.unique(one.example_id)) == cap["texts"]["n_texts"]


def test_demo_end_to_end_offline(tmp_path, runner, offline):
    home = tmp_path / "demo-home"
    result = runner.invoke(app, ["demo", "--home", str(home), "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "Continue with" in result.stderr and "Continue with" not in result.stdout
    # the sample records each query's normaliser: the demo measures attention sinks (pooled: it is sampled)
    assert re.search(r"attention sinks \(smollm2-135m\): \d+ of 44 heads .* \(\d+\.\d%, pooled\); Gu et al.'s "
                     r"per-text rate needs every position of short texts", result.stderr)
    assert result.stdout.strip()  # the findings (or summary) table is data: stdout

    con = qkdb.connect(home)
    with sample_path() as root:
        n_q = read_metadata(root)["capture"]["q_heads"]
    model = con.sql(f"select family, n_layers, n_q_heads, n_kv_heads from models where model = '{SAMPLE_MODEL}'").fetchall()
    assert model == [(SAMPLE_FAMILY, 30, 9, 3)]
    share_pos, abs_rq, abs_rk, n = con.sql(
        "select avg((bias_strength > 0)::int), avg(abs(r_q_a)), avg(abs(r_k_a)), count(*) from head_metrics"
    ).fetchall()[0]
    assert n == n_q
    # the seeds' qualitative findings on real vectors: recency bias in most heads, keys drift more cleanly
    assert share_pos > 0.6
    assert abs_rk > abs_rq
    views = {r[0] for r in con.sql("select view_name from duckdb_views() where not internal").fetchall()}
    if "findings" in views:
        rows = con.sql("select id, status from findings where status <> 'no data'").fetchall()
        assert rows
        status = dict(rows)
        assert status.get("002.F1.k_over_q", "holds") == "holds"
    con.close()
    if importlib.util.find_spec("qkdb.charts.report") is None:
        assert "no report" in result.stderr
    else:
        page = (home / "report.html").read_text()
        assert page.startswith("<!DOCTYPE html>") or "<html" in page[:500]
        assert "smollm2-135m" in page
        for figure in ("sink-card", "sink-map"):  # the sink section is drawn, on real data
            assert f'data-figure="{figure}"' in page

    again = runner.invoke(app, ["demo", "--home", str(home), "-q", "-j", "1", "--no-report"])
    assert again.exit_code == 0, again.output
    assert "already in the demo home" in again.stderr


def test_demo_home_is_its_own_and_not_qkdb_home(monkeypatch, tmp_path):
    import platformdirs

    from qkdb.cli.demo import demo_home_default

    monkeypatch.setenv("QKDB_HOME", str(tmp_path / "real-warehouse"))
    assert demo_home_default() == Path(platformdirs.user_data_dir("qkdb-demo", appauthor=False))


def _session_block(readme: str) -> list[str]:
    """The commands of README's first "A session" block, comments dropped."""
    block = readme.split("## A session\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("   #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_demo_ends_with_the_readmes_session_and_it_runs_as_printed(tmp_path):
    import subprocess
    import sys

    home = tmp_path / "h"
    env = {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    demo = subprocess.run(["qkdb", "demo", "-q", "-j", "1"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr
    tail = demo.stderr.split("Continue with the demo's warehouse (paste these lines):\n", 1)[1]
    printed = [ln.strip() for ln in tail.split("Your own data", 1)[0].splitlines() if ln.startswith("  qkdb") or ln.startswith("  export")]
    demo_home = home / ".local" / "share" / "qkdb-demo"
    assert printed[0] == f"export QKDB_HOME={demo_home}"
    # The README shows the same lines, with the Linux default spelled with ~.
    readme = _session_block((REPO / "README.md").read_text())
    assert readme == [printed[0].replace(str(home), "~"), *printed[1:]]
    # Pasted into a shell as printed, every line works (the shell reads an empty stdin and ends).
    script = "set -e\n" + "\n".join(f"{line} </dev/null >/dev/null" if line.startswith("qkdb") else line for line in printed)
    done = subprocess.run(["bash", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (home / ".local" / "share" / "qkdb").exists()  # nothing went to the default warehouse
    # The extra for one's own model, as this installation takes it: from the checkout it runs from
    # (`pip install 'qkdb[sniff]'` would fetch another qkdb from PyPI; issue 47).
    import qkdb

    own = next(ln for ln in tail.splitlines() if "qkdb sniff" in ln)
    assert f"pip install -e '{Path(qkdb.__file__).resolve().parents[1]}[sniff]'" in own

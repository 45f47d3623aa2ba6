"""What a dataset records about itself (issue 32): qk-sniffer's _saver_state.json as a source of facts
and provenance, and a dataset's facts that contradict the registry's.

Captures are laid out as qk-sniffer writes them (helpers.hub_server.qk_sniffer_files: head folders,
README.md, _saver_state.json, .gitattributes), from a simulated dataset's head folders.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from qkdb import api
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES
from qkdb.ingest.capture.simulate import simulate
from qkdb.ingest.sources.layout import read_metadata
from qkdb.ingest.sources.saver_state import model_name_for, read_saver_state

from helpers.hub_server import qk_sniffer_files

SIM = dict(layers=3, q_heads=8, kv_heads=2, head_dim=16, vectors=300, sample_q_heads=6, workers=1)


def _metadata(n_layers=3, n_q=8, n_kv=2, **extra) -> dict:
    """qk-sniffer's model_metadata for a capture with head sampling (its sniff.py and sniffer/core.py keys)."""
    return {
        "source_dataset": "viktoroo/longbench-pro-128k-plus", "dataset_name": "", "dataset_split": "train",
        "attention_scope": "full_only", "distributed_world_size": 1, "sampling_strategy": "uniform",
        "sampling_bucket_size": 2048, "head_sampling_strategy": "random_query", "head_sampling_seed": 0,
        "head_sampling_requested_query_heads": 6, "head_sampling_selected_query_heads": 6,
        "head_sampling_num_layers": n_layers, "head_sampling_num_query_heads": n_q,
        "head_sampling_num_key_heads": n_kv, **extra,
    }


@pytest.fixture(scope="module")
def heads(tmp_path_factory) -> Path:
    """Head folders of a small simulated model (qkdb's own files removed: a qk-sniffer capture has none)."""
    root = simulate(tmp_path_factory.mktemp("sim") / "sim", model="sim", family="Sim", seed=3, **SIM)
    for extra in ("qkdb_dataset.json", "planted.json"):
        (root / extra).unlink()
    return root


def _capture(heads: Path, out: Path, model_name: str, state: dict | None = None, **metadata) -> Path:
    """A folder laid out as qk-sniffer writes a capture of ``model_name``; ``state`` replaces its _saver_state.json."""
    files = qk_sniffer_files(heads, model_name=model_name, metadata=_metadata(**metadata))
    if state is not None:
        files["_saver_state.json"] = json.dumps(state).encode()
    for path, data in files.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(data)
    return out


def _models_row(home: Path, model: str) -> dict:
    con = api.connect(home, read_only=True)
    try:
        cur = con.execute("select * from models where model = $m", {"m": model})
        return dict(zip([d[0] for d in cur.description], cur.fetchone()))
    finally:
        con.close()


def test_a_qk_sniffer_capture_of_a_model_outside_the_registry_needs_no_flags(runner, heads, tmp_path, home):
    ds = _capture(heads, tmp_path / "capture", "acme/Tiny-Model-1B")
    result = runner.invoke(app, ["ingest", "--path", str(ds), "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    row = _models_row(home, "tiny-model-1b")  # named after the model id's last part
    assert (row["n_layers"], row["n_q_heads"], row["n_kv_heads"], row["gqa_ratio"]) == (3, 8, 2, 4)
    assert row["hf_model"] == "acme/Tiny-Model-1B" and row["n_heads"] == 6
    # The capture's sampling facts are the model's provenance.
    capture = json.loads(row["capture"])
    assert capture["written_by"] == "qk-sniffer" and capture["model_name"] == "acme/Tiny-Model-1B"
    assert (capture["sampling_strategy"], capture["sampling_bucket_size"], capture["head_sampling_seed"]) == ("uniform", 2048, 0)
    assert (capture["source_dataset"], capture["dataset_split"]) == ("viktoroo/longbench-pro-128k-plus", "train")
    state = json.loads((ds / "_saver_state.json").read_text())
    assert capture["bucket_counts"] == state["bucket_counts"] and sum(capture["bucket_counts"].values()) > 0
    # README.md and .gitattributes are not head folders: nothing was reported as ignored.
    assert "ignored" not in result.stderr
    # No family anywhere: said, with how to give one
    assert row["family"] == "unknown"
    assert "tiny-model-1b: no family is known" in result.stderr and "give --family" in result.stderr
    again = runner.invoke(app, ["ingest", "--path", str(ds), "-q", "-j", "1", "--family", "Acme", "--force"])
    assert again.exit_code == 0 and "no family is known" not in again.stderr


def test_options_and_the_registry_come_before_the_saver_state(runner, heads, tmp_path, home):
    ds = _capture(heads, tmp_path / "capture", "acme/Tiny-Model-1B")
    result = runner.invoke(app, ["ingest", "--path", str(ds), "--model", "mine", "--n-layers", "4", "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    row = _models_row(home, "mine")
    assert (row["n_layers"], row["gqa_ratio"]) == (4, 4)  # the option; the ratio from the state's counts
    # A registry model's id names it; where the capture's counts contradict the registry's, the
    # capture's hold and a note names both (a smaller config captured under the same id).
    reg = _capture(heads, tmp_path / "reg", "meta-llama/Llama-3.2-1B")
    result = runner.invoke(app, ["ingest", "--path", str(reg), "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    row = _models_row(home, "llama3.2-1b")
    assert (row["n_layers"], row["n_q_heads"], row["n_kv_heads"], row["family"]) == (3, 8, 2, "Llama 3.2")
    assert ("llama3.2-1b: the dataset's _saver_state.json records n_layers=3, n_q_heads=8, n_kv_heads=2 where the "
            "registry has n_layers=16, n_q_heads=32, n_kv_heads=8; the ingest uses the dataset's") in result.stderr


def test_the_older_saver_state_and_unreadable_ones(heads, tmp_path, runner, home):
    # The older writer keyed model_metadata and bucket_counts by the model's name.
    old = {"model_metadata": {"acme/Old-7B": _metadata()}, "bucket_counts": {"acme/Old-7B": {"0": 10, "1": 12}}}
    ds = _capture(heads, tmp_path / "old", "acme/Old-7B", state=old)
    state = read_saver_state(ds)
    assert state.model_name == "acme/Old-7B" and state.bucket_counts == {"0": 10, "1": 12}
    assert state.facts() == {"n_layers": 3, "n_q_heads": 8, "n_kv_heads": 2, "hf_model": "acme/Old-7B", "model": "old-7b"}
    # Without head-sampling counts (an older capture) the facts must come from the options.
    bare = _capture(heads, tmp_path / "bare", "acme/Bare-1B", state={"model_name": "acme/Bare-1B", "model_metadata": {}})
    result = runner.invoke(app, ["ingest", "--path", str(bare), "-q", "-j", "1"])
    assert result.exit_code == EXIT_CODES["not_found"] and "unknown model 'bare-1b'" in result.stderr
    assert "--gqa-ratio, --n-layers" in result.stderr
    # A state that is no JSON, or counts that are no numbers: one line naming the file.
    broken = _capture(heads, tmp_path / "broken", "acme/Broken-1B")
    (broken / "_saver_state.json").write_text("{not json")
    result = runner.invoke(app, ["ingest", "--path", str(broken), "-q"])
    assert result.exit_code == EXIT_CODES["input"] and f"{broken / '_saver_state.json'}: not a readable JSON" in result.stderr
    bad = _capture(heads, tmp_path / "bad", "acme/Bad-1B", state={"model_name": "acme/Bad-1B",
                                                                  "model_metadata": _metadata(n_layers="three")})
    result = runner.invoke(app, ["ingest", "--path", str(bad), "-q"])
    assert result.exit_code == EXIT_CODES["input"]
    assert "model_metadata.head_sampling_num_layers must be a positive integer, got 'three'" in result.stderr
    assert "Traceback" not in result.stderr and not home.exists()


def test_model_names_from_hugging_face_ids():
    assert model_name_for("Qwen/Qwen3-0.6B") == "qwen3-0.6b"  # the registry's, by its hf_model
    assert model_name_for("HuggingFaceTB/SmolLM3-3B-checkpoints") is None  # ten checkpoints share it: --model
    assert model_name_for("meta-llama/Llama-3.2-1B-Instruct") == "llama-3.2-1b-instruct"
    assert model_name_for("someone/Odd Name (v2)") == "odd-name-v2"


def test_a_simulation_under_a_registry_name_is_ingested_with_its_own_facts(runner, tmp_path, home):
    # `qkdb simulate --model llama3.2-1b` (issue 32): its layers and RoPE base are not the registry's.
    ds = tmp_path / "sim"
    result = runner.invoke(app, ["simulate", "--out", str(ds), "--model", "llama3.2-1b", "--layers", "3",
                                 "--q-heads", "8", "--kv-heads", "2", "--head-dim", "16", "--vectors", "300"])
    assert result.exit_code == 0, result.output
    recorded = read_metadata(ds)
    assert (recorded["n_layers"], recorded["rope_theta"]) == (3, 10000.0)
    result = runner.invoke(app, ["ingest", "--path", str(ds), "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    row = _models_row(home, "llama3.2-1b")
    assert (row["n_layers"], row["rope_theta"], row["n_q_heads"], row["n_kv_heads"]) == (3, 10000.0, 8, 2)
    assert row["family"] == "Llama 3.2"  # (a label, not a fact of the vectors: the registry's)
    notes = [line for line in result.stderr.splitlines() if "the dataset's qkdb_dataset.json records" in line]
    assert len(notes) == 1 and "n_layers=3" in notes[0] and "rope_theta=10000" in notes[0]
    assert "the registry has n_layers=16" in notes[0] and "rope_theta=500000" in notes[0]
    assert "--n-layers" in notes[0] and "--rope-theta" in notes[0]
    # The RoPE planes were found at the simulation's own frequencies: the planted rings rotate there.
    con = api.connect(home, read_only=True)
    try:
        rotating = con.execute("select avg(rotating::int) from rope_planes where model = 'llama3.2-1b' "
                               "and turns >= 1").fetchone()[0]
    finally:
        con.close()
    assert rotating > 0
    # `qkdb models` shows the facts the model was ingested with, the registry's beside them
    listed = list(csv.DictReader(io.StringIO(runner.invoke(app, ["models", "-f", "csv"]).stdout)))
    (mine,) = [r for r in listed if r["model"] == "llama3.2-1b"]
    assert (int(mine["n_layers"]), float(mine["rope_theta"]), int(mine["n_q_heads"])) == (3, 10000.0, 8)
    assert "n_layers=16" in mine["registry_differs"] and "rope_theta=500000" in mine["registry_differs"]
    assert "family" not in mine["registry_differs"]
    assert all(not r["registry_differs"] for r in listed if r["model"] != "llama3.2-1b")
    # Its RoPE scaling is the dataset's (none), so its source is not the registry's (issue 47).
    assert mine["rope_scaling"] in ("", "NULL") and mine["rope_scaling_source"] == "the dataset (simulate)"
    assert "rope_scaling={" in mine["registry_differs"]
    (other,) = [r for r in listed if r["model"] == "llama3.2-3b"]  # not ingested: the registry's, and its source
    assert other["rope_scaling"].startswith("{") and other["rope_scaling_source"] not in ("", "NULL")
    # An option still overrides both, and then nothing is said of that fact.
    result = runner.invoke(app, ["ingest", "--path", str(ds), "--rope-theta", "10000", "--n-layers", "3", "--force",
                                 "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "n_layers=3" not in result.stderr and "rope_theta" not in result.stderr


def test_a_dataset_that_agrees_with_the_registry_says_nothing(runner, tmp_path, home, heads):
    ds = tmp_path / "agree"
    shutil.copytree(heads, ds)
    (ds / "qkdb_dataset.json").write_text(json.dumps({"model": "llama3.2-1b", "n_q_heads": 32, "n_kv_heads": 8,
                                                      "n_layers": 16, "rope_theta": 500000.0}))
    result = runner.invoke(app, ["ingest", "--path", str(ds), "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "records" not in result.stderr


def test_a_fact_no_option_sets_is_noted_without_an_empty_option_list():
    from qkdb.ingest import registry
    from qkdb.ingest.sources.facts import recorded_over_registry

    spec = registry.lookup("smollm3-3b-stage1-step-40000")  # NoPE layers 3, 7, 11, ...
    other = (2,)
    updates, note = recorded_over_registry(spec, {"nope_layers": list(other)}, {})
    assert updates == {"nope_layers": other}
    assert "nope_layers=" in note and "would override" not in note and "()" not in note
    _, both = recorded_over_registry(spec, {"nope_layers": list(other), "n_layers": 4}, {})
    assert both.endswith("(--n-layers would override both)")

"""Checkpoints that prove they differ (issue 40): a repeated checkpoint is refused where the weights'
sha256 is recorded, and found by the view ``checkpoint_repeats`` where it is not.

The planted truth: the simulator's ``weights_sha256`` hashes everything that decides its vectors, so
one simulation under two names is one checkpoint twice, with identical vectors.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from helpers.warehouse_state import tree
from qkdb import api
from qkdb.errors import EXIT_CODES, InputError
from qkdb.ingest.capture.simulate import simulate
from qkdb.ingest.sources.layout import read_metadata, write_metadata

SIM = dict(layers=2, q_heads=2, kv_heads=1, head_dim=16, vectors=240, workers=1)


def _checkpoint(root, model, order, seed, *, weights=True):
    simulate(root, model=model, family="SimSeries", seed=seed, **SIM)
    meta = read_metadata(root)
    meta.update(model=model, series="sim-series", series_order=order, phase="stage1", step=1000 * order)
    if not weights:  # as a capture that did not record its weights (qk-sniffer's)
        meta["capture"].pop("weights_sha256")
    write_metadata(root, meta)
    return root


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    base = tmp_path_factory.mktemp("ckpt")
    home = base / "home"
    for name, order, seed in (("ck-1", 1, 1), ("ck-2", 2, 2)):
        api.ingest(_checkpoint(base / name, name, order, seed), home=home)
    return base, home


def test_the_simulators_weights_hash_is_what_decides_the_vectors(tmp_path):
    a = read_metadata(simulate(tmp_path / "a", model="x", family="F", seed=3, **SIM))["capture"]["weights_sha256"]
    b = read_metadata(simulate(tmp_path / "b", model="y", family="G", seed=3, **SIM))["capture"]["weights_sha256"]
    c = read_metadata(simulate(tmp_path / "c", model="x", family="F", seed=4, **SIM))["capture"]["weights_sha256"]
    assert a == b != c and len(a) == 64  # other names, same vectors; another seed, other vectors


def test_a_checkpoint_repeated_under_another_name_is_refused(series, tmp_path):
    base, home = series
    before = tree(home, locks=False)
    repeat = _checkpoint(tmp_path / "ck-3", "ck-3", 3, 2)  # ck-2's seed: ck-2's weights
    with pytest.raises(InputError) as err:
        api.ingest(repeat, home=home)
    msg = str(err.value)
    assert err.value.exit_code == EXIT_CODES["input"]
    assert "ck-3" in msg and "ck-2" in msg and "sim-series" in msg
    assert read_metadata(repeat)["capture"]["weights_sha256"] in msg  # the whole hash, to check against
    assert tree(home, locks=False) == before  # the warehouse as it was, file for file
    con = api.connect(home, read_only=True)
    try:
        recorded = con.execute("select model, weights_sha256 from models order by model").fetchall()
    finally:
        con.close()
    assert [m for m, _ in recorded] == ["ck-1", "ck-2"] and all(len(w) == 64 for _, w in recorded)


def test_the_same_weights_outside_a_series_are_not_refused(series, tmp_path):
    base, home = series
    alone = tmp_path / "alone"
    simulate(alone, model="ck-2-copy", family="SimSeries", seed=2, **SIM)
    other = tmp_path / "home2"
    shutil.copytree(home, other, symlinks=True)
    assert api.ingest(alone, home=other).heads_done == 4


def test_the_view_lists_every_head_of_a_repeat_that_recorded_no_hash(series, tmp_path):
    base, home = series
    other = tmp_path / "home"
    shutil.copytree(home, other, symlinks=True)
    api.ingest(_checkpoint(tmp_path / "ck-3", "ck-3", 3, 2, weights=False), home=other)
    con = api.connect(other, read_only=True)
    try:
        rows = con.execute("select previous_model, model, layer, head, n_identical, n_compared, same_weights "
                           "from checkpoint_repeats").fetchall()
        n_heads = con.execute("select count(*) from heads where model = 'ck-3'").fetchone()[0]
    finally:
        con.close()
    # Every head of ck-3 is ck-2's, and nothing of the true step ck-1 -> ck-2 is listed.
    assert n_heads == 4
    assert sorted((r[2], r[3]) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {r[:2] for r in rows} == {("ck-2", "ck-3")}
    assert all(r[4] == r[5] == n_heads and r[6] is None for r in rows)


def test_a_weights_hash_that_is_not_one_is_refused(tmp_path):
    root = simulate(tmp_path / "bad", model="bad", family="F", seed=1, **SIM)
    meta = read_metadata(root)
    meta["capture"]["weights_sha256"] = "abc"
    write_metadata(root, meta)
    with pytest.raises(InputError, match="capture.weights_sha256 must be a sha256"):
        api.ingest(root, home=tmp_path / "home")
    assert not (tmp_path / "home").exists()


def test_combined_hash_is_over_names_and_file_hashes(tmp_path):
    from qkdb.ingest.capture.weights import weights_record

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model-00001.safetensors").write_bytes(b"first shard")
    (tmp_path / "m" / "model-00002.safetensors").write_bytes(b"second shard" * 1000)
    (tmp_path / "m" / "pytorch_model.bin").write_bytes(b"not loaded when safetensors are there")
    (tmp_path / "m" / "config.json").write_text("{}")
    rec = weights_record(tmp_path / "m")
    files = {"model-00001.safetensors": hashlib.sha256(b"first shard").hexdigest(),
             "model-00002.safetensors": hashlib.sha256(b"second shard" * 1000).hexdigest()}
    assert {n: f["sha256"] for n, f in rec["weight_files"].items()} == files
    assert {f["from"] for f in rec["weight_files"].values()} == {"hashed"}
    lines = "".join(f"{n}\t{files[n]}\n" for n in sorted(files))
    # (not safetensors inside: hashed by file)
    assert rec["weights_sha256"] == hashlib.sha256(lines.encode()).hexdigest() and rec["weights_hashed"] == "files"
    # A Hugging Face cache's link to an LFS blob: the blob's name is the Hub's sha256, not read again.
    blobs = tmp_path / "cache" / "blobs"
    blobs.mkdir(parents=True)
    oid = hashlib.sha256(b"weights on the Hub").hexdigest()
    (blobs / oid).write_bytes(b"weights on the Hub")
    snap = tmp_path / "cache" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to(blobs / oid)
    rec = weights_record(snap)
    assert rec["weight_files"] == {"model.safetensors": {"sha256": oid, "from": "lfs oid"}}
    assert weights_record(tmp_path / "cache" / "blobs" / oid)["weight_files"][oid]["from"] == "hashed"
    (tmp_path / "empty").mkdir()
    assert weights_record(tmp_path / "empty") is None
    assert json.dumps(rec)  # (JSON, as qkdb_dataset.json holds it)


def save_file(tensors: dict, path: str) -> None:
    """A safetensors file as its specification lays it out (the safetensors package is in the sniff
    extra only): 8 bytes of header length, the JSON header, then the tensors' bytes, 8-aligned."""
    import numpy as np

    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int16): "I16"}
    header, chunks, at = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(chunks))


def _definition(tensors: dict) -> str:
    """``weights_sha256`` from its definition, from the arrays themselves."""
    import numpy as np

    names = {np.float32: "F32", np.float16: "F16", np.int16: "I16"}
    lines = "".join(f"{n}\t{names[tensors[n].dtype.type]}\t{list(tensors[n].shape)}\t"
                    f"{hashlib.sha256(tensors[n].tobytes()).hexdigest()}\n" for n in sorted(tensors))
    return hashlib.sha256(lines.encode()).hexdigest()


def test_one_read_gives_the_files_and_the_tensors_hashes_whatever_the_block_size(tmp_path, monkeypatch):
    # A file is read once for its own hash and its tensors'; tensors straddle the read blocks here,
    # one is empty, and the last block ends inside the file's last tensor.
    import numpy as np

    from qkdb.ingest.capture import weights

    rng = np.random.default_rng(1)
    tensors = {"b.w": rng.normal(size=(5, 3)).astype(np.float32), "a.empty": np.zeros(0, np.float16),
               "c.w": rng.normal(size=(13,)).astype(np.float16)}
    (tmp_path / "m").mkdir()
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    whole = hashlib.sha256((tmp_path / "m" / "model.safetensors").read_bytes()).hexdigest()
    for block in (1, 7, 64, 1 << 20):
        monkeypatch.setattr(weights, "_BLOCK", block)
        rec = weights.weights_record(tmp_path / "m")
        assert rec["weights_sha256"] == _definition(tensors) and rec["weights_hashed"] == "tensors", block
        assert rec["weight_files"]["model.safetensors"] == {"sha256": whole, "from": "hashed"}


def test_one_checkpoint_in_one_file_or_in_shards_hashes_alike(tmp_path):
    # issue 47: saved whole and in shards, one checkpoint had two weights_sha256, so a series took it twice.
    import numpy as np

    from qkdb.ingest.capture.weights import weights_record

    rng = np.random.default_rng(0)
    tensors = {f"model.layers.{i}.w": rng.normal(size=(8, 4)).astype(np.float32) for i in range(6)}
    tensors["lm_head.weight"] = rng.normal(size=(16,)).astype(np.float16)
    whole, sharded, changed = tmp_path / "whole", tmp_path / "sharded", tmp_path / "changed"
    for d in (whole, sharded, changed):
        d.mkdir()
    save_file(tensors, str(whole / "model.safetensors"))
    names = sorted(tensors)[::-1]  # other order, other files
    for k in range(0, len(names), 2):
        save_file({n: tensors[n] for n in names[k:k + 2]}, str(sharded / f"model-{k // 2 + 1:05d}-of-00004.safetensors"))
    edited = dict(tensors)
    edited["model.layers.3.w"] = edited["model.layers.3.w"].copy()
    edited["model.layers.3.w"][0, 0] += 1e-3
    save_file(edited, str(changed / "model.safetensors"))
    a, b, c = (weights_record(d) for d in (whole, sharded, changed))
    assert a["weights_hashed"] == b["weights_hashed"] == "tensors"
    assert a["weights_sha256"] == b["weights_sha256"] and len(b["weight_files"]) == 4
    assert c["weights_sha256"] != a["weights_sha256"]
    # The same bytes under another dtype or shape are other weights.
    save_file({**tensors, "lm_head.weight": tensors["lm_head.weight"].view(np.int16)}, str(changed / "model.safetensors"))
    assert weights_record(changed)["weights_sha256"] != a["weights_sha256"]
    # Independently: the definition, from the tensors themselves.
    assert a["weights_sha256"] == _definition(tensors)

"""``qkdb sniff --dataset``: texts from a Hugging Face dataset, read over real HTTP from the local fake Hub.

The fake Hub (tests/helpers/hub_server.py) serves dataset repos as the Hub does: a parquet split in
shards with a dataset card declaring its configs, a jsonl dataset named by file-name convention,
and datasets that are wrong in the ways a user meets (no such column, a column that is not text,
duplicate ids, only CSV). Each row is one text; its id becomes ``example_id``; only the files the
texts come from are downloaded; offline, the Hugging Face cache serves them.
"""

from __future__ import annotations

import json
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
from helpers.hub_server import FakeHub, dataset_card, jsonl_bytes, parquet_bytes, parquet_shards  # noqa: E402

from qkdb.errors import EXIT_CODES, HubError, SniffError  # noqa: E402
from qkdb.ingest.capture import texts  # noqa: E402
from qkdb.ingest.sources.layout import discover, read_metadata  # noqa: E402

SHORT = "Too short."
DOCS = texts.pydoc_documents()[40:50]
# rows: pydoc documents with a short one among them (skipped by --min-tokens)
ROWS = DOCS[:3] + [SHORT] + DOCS[3:]
IDS = [f"doc-{chr(97 + i)}" for i in range(len(ROWS))]
NUMS = [1000 + 7 * i for i in range(len(ROWS))]
MAX_LENGTH = 64


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as fake:
        repo = fake.add_repo("acme/long-texts")
        files = parquet_shards({"text": ROWS, "id": IDS, "num": NUMS, "label": list(range(len(ROWS)))}, shards=2)
        files["data/test-00000-of-00001.parquet"] = parquet_bytes({"text": DOCS[:2], "id": ["t0", "t1"],
                                                                   "num": [1, 2], "label": [0, 1]})
        files["README.md"] = dataset_card([{"config_name": "default",
                                            "data_files": {"train": "data/train-*", "test": "data/test-*"}}])
        repo.push("main", files)
        jsonl = fake.add_repo("acme/jsonl-texts")
        jsonl.push("main", {"train.jsonl": jsonl_bytes([{"body": d, "n": i} for i, d in enumerate(DOCS[:4])]),
                            "validation.jsonl": jsonl_bytes([{"body": d, "n": i} for i, d in enumerate(DOCS[4:8])])})
        fake.add_repo("acme/dup-ids").push("main", {"data/train.parquet": parquet_bytes(
            {"text": DOCS[:4], "id": ["a", "b", "a", "c"]})})
        fake.add_repo("acme/csv-only").push("main", {"train.csv": b"text\nhello\n"})
        yield fake


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer):
    return tm.build(tmp_path_factory.mktemp("tiny-llama"), "llama", *tokenizer)


def _sniff(hub, model, out, cache, **kw):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    opts = dict(out=out, model_path=model, dataset="acme/long-texts", max_length=MAX_LENGTH, q_heads=3,
                vectors_per_head=48, min_bucket_size=8, seed=2, model_name="tiny", pack=False,
                hub_endpoint=hub.url, hub_cache=cache)
    opts.update(kw)
    return sniff(SniffOptions(**opts))


def _encode(model):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model, local_files_only=True)
    return lambda s: [tok.bos_token_id] + tok(s, add_special_tokens=False)["input_ids"][:MAX_LENGTH - 1]


def test_each_row_is_one_text_and_string_ids_are_recorded_by_example_id(hub, model, tmp_path):
    result = _sniff(hub, model, tmp_path / "out", tmp_path / "cache", id_column="id", min_tokens=20, n_texts=5)
    record = result.metadata["capture"]["texts"]
    # the short row is skipped: rows 0, 1, 2, 4, 5
    assert record["row_numbers"] == [0, 1, 2, 4, 5]
    assert record["ids"] == ["doc-a", "doc-b", "doc-c", "doc-e", "doc-f"]
    assert record["example_ids"] == [0, 1, 2, 3, 4] and "ordinal" in record["example_id"]
    assert record["commit"] == hub.repos["acme/long-texts"].branches["main"]
    assert (record["dataset"], record["config"], record["split"], record["revision"]) == (
        "acme/long-texts", "default", "train", "main")
    assert record["files"] == ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"]
    encode = _encode(model)
    want = [encode(ROWS[i]) for i in (0, 1, 2, 4, 5)]
    assert record["n_tokens"] == sum(len(w) for w in want)
    assert record["tokens_sha256"] == texts.tokens_sha256([np.asarray(w) for w in want])
    for hf in discover(result.out).queries.values():
        t = pq.read_table(hf.path).to_pydict()
        ex, pos = np.asarray(t["example_id"]), np.asarray(t["position"])
        assert set(ex) == {0, 1, 2, 3, 4}
        assert all(pos[ex == e].max() < len(want[e]) for e in range(5))


def test_integer_ids_are_the_example_ids_and_without_ids_the_row_number(hub, model, tmp_path):
    with_ids = _sniff(hub, model, tmp_path / "num", tmp_path / "cache", id_column="num", min_tokens=20, n_texts=4)
    record = with_ids.metadata["capture"]["texts"]
    assert record["example_ids"] == [NUMS[i] for i in (0, 1, 2, 4)] and "ids" not in record
    ex = pq.read_table(next(iter(discover(with_ids.out).keys.values())).path).column("example_id").to_pylist()
    assert sorted(set(ex)) == [NUMS[i] for i in (0, 1, 2, 4)]
    plain = _sniff(hub, model, tmp_path / "plain", tmp_path / "cache", min_tokens=20, n_texts=4)
    assert plain.metadata["capture"]["texts"]["example_ids"] == [0, 1, 2, 4]
    assert "row number" in plain.metadata["capture"]["texts"]["example_id"]


def test_only_the_files_the_texts_come_from_are_downloaded(hub, model, tmp_path):
    hub.clear_log()
    result = _sniff(hub, model, tmp_path / "out", tmp_path / "cache", n_texts=2)
    got = hub.downloaded()
    assert got["data/train-00000-of-00002.parquet"] == 1 and "data/train-00001-of-00002.parquet" not in got
    assert result.metadata["capture"]["texts"]["files"] == ["data/train-00000-of-00002.parquet"]


def test_a_jsonl_dataset_by_the_hubs_file_name_conventions_and_another_split(hub, model, tmp_path):
    result = _sniff(hub, model, tmp_path / "out", tmp_path / "cache", dataset="acme/jsonl-texts",
                    dataset_split="validation", text_field="body", id_column="n", n_texts=3)
    record = result.metadata["capture"]["texts"]
    assert (record["split"], record["files"], record["example_ids"]) == ("validation", ["validation.jsonl"], [0, 1, 2])
    encode = _encode(model)
    assert record["tokens_sha256"] == texts.tokens_sha256([np.asarray(encode(d)) for d in DOCS[4:7]])


@pytest.mark.parametrize("kw, kind, message", [
    ({"dataset": "acme/nothing"}, "not_found", "dataset repo 'acme/nothing' not found"),
    ({"dataset_config": "large"}, "not_found", "dataset acme/long-texts: no config 'large' (its configs: default)"),
    ({"dataset_split": "dev"}, "not_found", "no split 'dev' in config 'default' (its splits: test, train)"),
    ({"text_field": "body"}, "not_found", "no column 'body' (its columns: text, id, num, label)"),
    ({"text_field": "label"}, "input", "the text column 'label' holds int64, not text"),
    ({"id_column": "missing"}, "not_found", "no column 'missing'"),
    ({"dataset": "acme/dup-ids", "id_column": "id"}, "input", "the id column 'id' holds 'a' twice (rows 0 and 2)"),
    ({"dataset": "acme/csv-only"}, "input", "split 'train' is stored as .csv; qkdb sniff reads parquet and jsonl"),
    ({"dataset_revision": "v9"}, "not_found", "dataset acme/long-texts: branch 'v9' not found"),
    ({"min_tokens": 100000}, "input", "no row of at least 100000 tokens"),
])
def test_a_dataset_that_cannot_give_texts_is_refused_in_one_line(hub, model, tmp_path, kw, kind, message):
    with pytest.raises(Exception) as err:
        _sniff(hub, model, tmp_path / "out", tmp_path / "cache", **kw)
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1
    assert getattr(err.value, "kind", None) == kind, str(err.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_offline_the_cache_serves_a_dataset_read_before(hub, model, tmp_path, monkeypatch):
    import huggingface_hub

    online = _sniff(hub, model, tmp_path / "online", tmp_path / "cache", n_texts=2)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    hub.clear_log()
    offline = _sniff(hub, model, tmp_path / "offline", tmp_path / "cache", n_texts=2)
    assert not hub.log  # not one request
    a, b = online.metadata["capture"]["texts"], offline.metadata["capture"]["texts"]
    assert a == b
    with pytest.raises(HubError, match=r"dataset acme/jsonl-texts at revision 'main': offline \(HF_HUB_OFFLINE=1\) "
                                       r"and this revision was never downloaded into the Hugging Face cache"):
        _sniff(hub, model, tmp_path / "never", tmp_path / "cache", dataset="acme/jsonl-texts", text_field="body")


def test_cli_dataset_options_in_a_process_that_finds_the_hub_by_hf_endpoint(hub, model, tmp_path, runner):
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HUB_DISABLE_XET": "1"}
    args = [sys.executable, "-m", "qkdb", "sniff", "--model-path", str(model), "--out", str(tmp_path / "out"),
            "--dataset", "acme/long-texts", "--split", "test", "--text-column", "text", "--id-column", "id",
            "--max-texts", "2", "--max-length", str(MAX_LENGTH), "--q-heads", "2", "--vectors-per-head", "32",
            "--min-bucket-size", "8", "-q"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    record = read_metadata(tmp_path / "out")["capture"]["texts"]
    assert (record["split"], record["ids"], record["pack"]) == ("test", ["t0", "t1"], False)
    # refused on the command line, before the Hub is asked: in this process
    from qkdb.cli.app import app
    import qkdb.cli.sniff  # noqa: F401

    bad = runner.invoke(app, [*args[3:7], str(tmp_path / "bad"), *args[8:], "--text", "README.md"])
    assert bad.exit_code == EXIT_CODES["usage"] and "give --text or --dataset, not both" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()


def test_like_a_dataset_capture_reads_its_texts_at_the_commit_it_recorded(hub, model, tokenizer, tmp_path):
    first = _sniff(hub, model, tmp_path / "a", tmp_path / "cache", id_column="id", min_tokens=20, n_texts=4)
    # the dataset moves on after the first capture: --like still reads the rows it read
    repo = hub.repos["acme/long-texts"]
    moved = dict(repo.commits[repo.branches["main"]].files)
    moved.update(parquet_shards({"text": DOCS[::-1], "id": IDS[:len(DOCS)], "num": NUMS[:len(DOCS)],
                                 "label": list(range(len(DOCS)))}, shards=2))
    repo.push("main", moved)
    other = tm.build(tmp_path / "other", "llama", *tokenizer, seed=5)  # another checkpoint
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    second = sniff(SniffOptions(out=tmp_path / "b", model_path=other, like=first.out, hub_endpoint=hub.url,
                                hub_cache=tmp_path / "cache", model_name="tiny-other"))
    ra, rb = first.metadata["capture"]["texts"], second.metadata["capture"]["texts"]
    assert rb["commit"] == ra["commit"] != repo.branches["main"] and rb["ids"] == ra["ids"]
    assert rb["tokens_sha256"] == ra["tokens_sha256"]
    assert second.metadata["capture"]["like"]["plan_sha256"] == first.metadata["capture"]["plan_sha256"]
    assert second.metadata["capture"]["plan_sha256"] == first.metadata["capture"]["plan_sha256"]
    fa, fb = discover(first.out), discover(second.out)
    assert fa.queries.keys() == fb.queries.keys() and fa.keys.keys() == fb.keys.keys()
    for key, hf in fa.queries.items():
        ta, tb = pq.read_table(hf.path), pq.read_table(fb.queries[key].path)
        for col in ("example_id", "position", "bucket"):
            assert ta.column(col).equals(tb.column(col))
        assert not ta.column("vector").equals(tb.column("vector"))  # another model's vectors
    # a capture to match must be of the same head layout
    wide = tm.build(tmp_path / "wide", "gemma2", *tokenizer)
    with pytest.raises(SniffError, match=r"--like .*: a capture of a model with 3 layers, 4 query and 2 KV heads of "
                                         r"8 dims; .* has 3 layers, 4 query and 2 KV heads of 16 dims"):
        sniff(SniffOptions(out=tmp_path / "c", model_path=wide, like=first.out, hub_endpoint=hub.url,
                           hub_cache=tmp_path / "cache"))
    assert json.loads((first.out / "qkdb_dataset.json").read_text())["capture"]["texts"]["ids"] == rb["ids"]

"""``qkdb sniff`` without a model: the sampling policy, the text sources and the checks made before loading.

The captures themselves (which need the ``sniff`` extra) are tested in test_sniff_capture.py.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from qkdb.errors import SniffError
from qkdb.ingest.capture import sampling
from qkdb.ingest.capture import texts

# --------------------------------------------------------------------------- sampling policy (no torch)


def test_query_heads_follow_the_seed_and_cover_all_when_few():
    got = sampling.sample_query_heads(5, 6, 7, seed=3)
    flat = np.sort(np.random.default_rng(3).choice(30, size=7, replace=False))
    assert got == [(int(i // 6), int(i % 6)) for i in flat]
    assert got == sorted(set(got))
    assert sampling.sample_query_heads(5, 6, 7, seed=4) != got
    assert sampling.sample_query_heads(2, 3, 300, seed=0) == [(l, h) for l in range(2) for h in range(3)]
    assert sampling.sample_query_heads(2, 3, None, seed=0) == [(l, h) for l in range(2) for h in range(3)]


def test_key_heads_are_the_gqa_groups_of_the_query_heads():
    q = [(0, 0), (0, 5), (0, 6), (2, 11), (2, 3)]
    assert sampling.key_heads_for(q, 12, 3) == [(0, 0), (0, 1), (2, 0), (2, 2)]
    assert sampling.key_heads_for(q, 12, 12) == sorted(q)
    with pytest.raises(ValueError):
        sampling.key_heads_for(q, 12, 5)


def test_log2_bucket_matches_a_loop_over_the_definition():
    m = 16
    pos = np.arange(0, 3000)
    expect = np.array([0 if p < m else next(i for i in range(1, 40) if m * 2 ** (i - 1) <= p < m * 2**i) for p in pos])
    np.testing.assert_array_equal(sampling.log2_bucket(pos, m), expect)
    np.testing.assert_array_equal(sampling.log2_bucket_edges(100, 16), [0, 16, 32, 64, 100])
    np.testing.assert_array_equal(sampling.log2_bucket_edges(128, 16), [0, 16, 32, 64, 128])


def test_log_uniform_positions_give_each_doubling_bucket_the_same_count():
    rng = np.random.default_rng(0)
    s = sampling.sample_positions(2048, 500, rng, "log-uniform", 128)
    assert len(s.positions) == 500 and len(np.unique(s.positions)) == 500
    assert s.positions.min() >= 0 and s.positions.max() < 2048
    assert np.all(np.diff(s.positions) > 0)
    counts = np.bincount(s.buckets)
    assert len(counts) == 5 and counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(s.buckets, sampling.log2_bucket(s.positions, 128))
    # a short first bucket hands its surplus to the wider ones; all positions when asked for more
    small = sampling.sample_positions(300, 200, np.random.default_rng(1), "log-uniform", 32)
    sizes = np.diff(sampling.log2_bucket_edges(300, 32))
    assert len(small.positions) == 200 and np.all(np.bincount(small.buckets, minlength=len(sizes)) <= sizes)
    every = sampling.sample_positions(50, 80, np.random.default_rng(1), "log-uniform", 8)
    np.testing.assert_array_equal(every.positions, np.arange(50))


def test_uniform_positions_and_same_seed_same_draw():
    a = sampling.sample_positions(1000, 100, sampling.position_rng(7, 2, 3, 4, "q"), "uniform", 128)
    b = sampling.sample_positions(1000, 100, sampling.position_rng(7, 2, 3, 4, "q"), "uniform", 128)
    c = sampling.sample_positions(1000, 100, sampling.position_rng(7, 2, 3, 4, "k"), "uniform", 128)
    np.testing.assert_array_equal(a.positions, b.positions)
    assert not np.array_equal(a.positions, c.positions)
    np.testing.assert_array_equal(a.buckets, a.positions // 128)
    with pytest.raises(ValueError):
        sampling.sample_positions(10, 1, np.random.default_rng(0), "sqrt")


def test_split_evenly():
    np.testing.assert_array_equal(sampling.split_evenly(10, 4), [3, 3, 2, 2])
    assert sampling.split_evenly(7, 3).sum() == 7


def _encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_packed_windows_are_full_and_keep_every_token_in_order():
    docs = ["abcdefg", "hij", "klmnopqrstu", "vw"]
    w = texts.token_windows(docs, _encode, 5, pack=True, eos_id=0)
    stream = [t for d in docs for t in [*_encode(d), 0]]
    assert all(len(x) == 5 for x in w)
    assert np.concatenate(w).tolist() == stream[: 5 * len(w)]
    assert len(w) == len(stream) // 5
    with_bos = texts.token_windows(docs, _encode, 5, pack=True, bos_id=1, eos_id=0, limit=2)
    assert len(with_bos) == 2 and all(x[0] == 1 and len(x) == 5 for x in with_bos)
    assert np.concatenate([x[1:] for x in with_bos]).tolist() == stream[:8]
    unpacked = texts.token_windows(docs, _encode, 4, pack=False)
    assert [x.tolist() for x in unpacked] == [_encode(d)[:4] for d in docs]
    # a corpus shorter than one window still gives one text
    assert texts.token_windows(["ab"], _encode, 50, eos_id=0)[0].tolist() == [97, 98, 0]


def test_text_sources(tmp_path):
    docs = list(texts.iter_documents("pydoc"))
    assert len(docs) > 50 and sum(map(len, docs)) > 100_000
    (tmp_path / "a.txt").write_text("first")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text('{"text": "second"}\n\n"third"\n')
    (tmp_path / "skip.bin").write_bytes(b"\0")
    assert list(texts.iter_documents(tmp_path)) == ["first", "second", "third"]
    (tmp_path / "bad.jsonl").write_text('{"body": 1}\n')
    with pytest.raises(SniffError, match=r"bad.jsonl:1"):
        list(texts.iter_documents(tmp_path / "bad.jsonl"))
    with pytest.raises(SniffError, match="no such text file"):
        list(texts.iter_documents(tmp_path / "missing"))


def test_missing_extra_is_one_clear_error(tmp_path, monkeypatch):
    from qkdb.ingest.capture.sniff import SniffOptions, sniff

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(SniffError, match=r"pip install 'qkdb\[sniff\]'"):
        sniff(SniffOptions(out=tmp_path / "out", model_path=tmp_path / "m"))


def test_options_and_inputs_are_checked_before_loading(tmp_path):
    from qkdb.ingest.capture.sniff import SniffOptions

    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(SniffError, match="exactly one"):
        SniffOptions(out=tmp_path / "o").check()
    with pytest.raises(SniffError, match="no such model folder"):
        SniffOptions(out=tmp_path / "o", model_path=tmp_path / "nope").check()
    # a folder without a model: one line saying so (not transformers' tokenizer message)
    (model / "weights.gguf").write_bytes(b"GGUF\0\0")
    with pytest.raises(SniffError, match=r"model: no model here .*use --gguf .*weights.gguf"):
        SniffOptions(out=tmp_path / "o", model_path=model).check()
    (tmp_path / "fake.gguf").write_bytes(b"PK\3\4 not a gguf")
    with pytest.raises(SniffError, match="fake.gguf: not a GGUF file"):
        SniffOptions(out=tmp_path / "o", gguf=tmp_path / "fake.gguf").check()
    (model / "config.json").write_text("{}")
    # texts: missing, empty, whitespace only — before any model loads
    with pytest.raises(SniffError, match="missing.txt: no such text file"):
        SniffOptions(out=tmp_path / "o", model_path=model, text=str(tmp_path / "missing.txt")).check()
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(SniffError, match="empty.txt: no text in it"):
        SniffOptions(out=tmp_path / "o", model_path=model, text=str(tmp_path / "empty.txt")).check()
    (tmp_path / "blank.jsonl").write_text('{"text": "  \\n "}\n""\n')
    with pytest.raises(SniffError, match="blank.jsonl: no text in it"):
        SniffOptions(out=tmp_path / "o", model_path=model, text=str(tmp_path / "blank.jsonl")).check()
    with pytest.raises(SniffError, match="--keep-position-scaling cannot apply"):
        SniffOptions(out=tmp_path / "o", model_path=model, pre_rope=True, keep_position_scaling=True).check()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine")
    with pytest.raises(SniffError, match="not empty"):
        SniffOptions(out=tmp_path / "o", model_path=model).check()
    with pytest.raises(SniffError, match="not a capture"):
        SniffOptions(out=tmp_path / "o", model_path=model, force=True).check()


def test_empty_documents_are_skipped_not_packed_as_separators():
    w = texts.token_windows(["", "ab", "   ", "cd"], _encode, 3, pack=True, eos_id=0)
    assert [x.tolist() for x in w] == [[97, 98, 0], [99, 100, 0]]
    assert [x.tolist() for x in texts.token_windows(["", "ab"], _encode, 5, pack=False)] == [[97, 98]]
    with pytest.raises(SniffError, match="no tokens"):
        texts.token_windows(["", " "], _encode, 5, pack=True, eos_id=0)


def test_a_jsonl_corpus_reads_strings_and_text_fields_and_names_the_line_it_cannot_parse(tmp_path):
    good = tmp_path / "docs.jsonl"
    good.write_text('"first"\n\n{"text": "second", "id": 2}\n', encoding="utf-8")
    assert list(texts._jsonl_documents(good, "text")) == ["first", "second"]
    assert list(texts.json_lines(good)) == [(1, "first"), (3, {"text": "second", "id": 2})]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('"fine"\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(SniffError, match=r"bad\.jsonl:2: not valid JSON"):
        list(texts._jsonl_documents(bad, "text"))
    with pytest.raises(SniffError, match=r"^acme/texts@main/train\.jsonl:2: not valid JSON"):
        list(texts.json_lines(bad, "acme/texts@main/train.jsonl"))


def _gguf_from(path, **strings):
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    for key, value in strings.items():
        writer.add_string(key.replace("_", "."), value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.sniff
def test_a_gguf_files_origin_is_its_own_word_unless_a_repo_is_given(tmp_path):
    pytest.importorskip("gguf")
    from qkdb.ingest.capture.sniff_model import ModelRef, origin

    said = _gguf_from(tmp_path / "said.gguf", general_source_huggingface_repository="org/said")
    by_url = _gguf_from(tmp_path / "url.gguf", general_source_url="https://huggingface.co/org/url-model")
    silent = _gguf_from(tmp_path / "silent.gguf", general_name="x")
    assert origin(ModelRef(gguf=str(said)), None) == ("org/said", None)
    assert origin(ModelRef(gguf=str(by_url)), None) == ("org/url-model", None)
    assert origin(ModelRef(gguf=str(silent)), None) == ("silent.gguf", None)  # the file's name, never a path
    # A repo given wins, with the revision given (none: a local file's repo has no revision here)
    assert origin(ModelRef(gguf=str(said)), "org/given") == ("org/given", None)
    assert origin(ModelRef(gguf=str(said), revision="v2"), "org/given") == ("org/given", "v2")


# --------------------------------------------------------------------------- work beside the forward passes


def test_the_weights_hash_runs_beside_the_capture_and_its_result_or_error_reaches_the_caller():
    import threading

    from qkdb.ingest.capture.sniff import _Background

    started, release = threading.Event(), threading.Event()

    def hashing(x):
        started.set()
        release.wait(10)
        return x * 2

    job = _Background(hashing, 21)
    assert started.wait(10) and job._thread.is_alive()  # running while the caller goes on
    release.set()
    assert job.result() == 42
    # (a daemon: a capture that fails does not wait at exit for a hash nobody reads)
    assert job._thread.daemon

    def unreadable():
        raise OSError("model.safetensors: permission denied")

    with pytest.raises(OSError, match="permission denied"):
        _Background(unreadable).result()

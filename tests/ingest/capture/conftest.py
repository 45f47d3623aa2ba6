"""Fixtures shared by the capture tests on tiny models: one trained tokenizer and one small corpus per session."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    """(folder, vocab size) of a byte-level BPE tokenizer trained here (tests/helpers/tiny_models.py)."""
    from helpers import tiny_models as tm

    return tm.train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def family_corpus(tmp_path_factory):
    """Six pydoc documents as a .jsonl file (packed by qkdb sniff into 64-token texts)."""
    from qkdb.ingest.capture import texts

    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in texts.pydoc_documents()[40:46]))
    return path


@pytest.fixture(scope="module")
def model_of(tmp_path_factory, tokenizer):
    """``model_of(family)``: the folder of a tiny random model of that family, built once per module."""
    from helpers import tiny_models as tm

    built = {}

    def get(family: str):
        if family not in built:
            built[family] = tm.build(tmp_path_factory.mktemp(f"tiny-{family}"), family, *tokenizer)
        return built[family]

    return get

"""Shared fixtures: a temporary warehouse home, small planted datasets, a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers.datasets import make_dataset


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own warehouse home; nothing touches the user's, nor reads it.

    The user data dir is a fresh one too: where ``qkdb demo`` puts its sample (and whether it has
    run on this machine) changes what the commands suggest.
    """
    home = tmp_path / "home"
    monkeypatch.setenv("QKDB_HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))
    monkeypatch.delenv("QKDB_DEBUG", raising=False)
    return home


@pytest.fixture
def home(_isolated_home) -> Path:
    return _isolated_home


@pytest.fixture
def dataset(tmp_path) -> Path:
    return make_dataset(tmp_path / "ds")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()

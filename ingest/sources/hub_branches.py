"""Branches of the Hub dataset repo and the registry models they hold (``qkdb hub list``, ``--all``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi, constants

from qkdb.errors import HubError
from qkdb.ingest.sources.hub_cache import storage_folder
from qkdb.ingest.sources.hub_errors import REPO_TYPE, offline_now, translate, where
from qkdb.ingest.sources.registry import load_registry

DEFAULT_REPO = "viktoroo/sniffed-qk"


@dataclass(frozen=True)
class Branch:
    """A branch of the dataset repo and the registry models whose ``dataset_revision`` it is."""

    name: str
    commit: str | None
    models: tuple[str, ...]


def registry_branches(repo: str = DEFAULT_REPO) -> dict[str, list[str]]:
    """``{dataset_revision: [model, ...]}`` of the registry models stored in ``repo``."""
    out: dict[str, list[str]] = {}
    for spec in load_registry():
        if spec.dataset_revision and (spec.dataset_repo or DEFAULT_REPO) == repo:
            out.setdefault(spec.dataset_revision, []).append(spec.model)
    return out


def list_branches(
    repo: str = DEFAULT_REPO,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[list[Branch], str]:
    """The repo's branches with the registry models they match, and where the list came from.

    Online: one ``refs`` request (origin ``"hub"``). Offline (``HF_HUB_OFFLINE=1``): the branches
    recorded in the Hugging Face cache by earlier downloads (origin ``"cache"``).
    """
    wanted = registry_branches(repo)
    if offline_now():
        refs = storage_folder(repo, Path(cache_dir or constants.HF_HUB_CACHE).expanduser().resolve()) / "refs"
        names = (
            sorted(p.relative_to(refs).as_posix() for p in refs.rglob("*") if p.is_file()) if refs.is_dir() else []
        )
        if not names:
            raise HubError(f"{where(repo)}: offline (HF_HUB_OFFLINE=1) and no branch of it is in the Hugging Face cache")
        branches = [Branch(n, (refs / n).read_text().strip(), tuple(wanted.get(n, ()))) for n in names]
        return branches, "cache"
    api = HfApi(endpoint=endpoint, token=token)
    try:
        refs_info = api.list_repo_refs(repo, repo_type=REPO_TYPE, token=token)
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, repo, None, endpoint)[0] from None
    branches = [Branch(b.name, b.target_commit, tuple(wanted.get(b.name, ()))) for b in refs_info.branches]
    return sorted(branches, key=lambda b: b.name), "hub"


def models_on_hub(branches: list[Branch]) -> list[str]:
    """Registry models (in registry order) whose branch exists: what ``qkdb ingest --all`` ingests."""
    present = {m for b in branches for m in b.models}
    return [s.model for s in load_registry() if s.model in present]

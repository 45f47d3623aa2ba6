"""What the Hugging Face cache knows about a dataset repo: its folder and saved tree listings.

Offline (``HF_HUB_OFFLINE=1``) an ingest still has to list the branch: the listing saved in
huggingface_hub's tree cache for the commit when there is one (written by ``snapshot_download`` and
by our online listings), else the files of the commit's snapshot folder downloaded earlier.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import get_cached_repo_tree
from huggingface_hub.errors import CachedRepoTreeNotFoundError
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.hf_api import RepoFile

from qkdb.ingest.sources.hub_errors import REPO_TYPE


def storage_folder(repo: str, cache_dir: Path) -> Path:
    """The repo's folder in the cache (``datasets--owner--name``)."""
    return cache_dir / repo_folder_name(repo_id=repo, repo_type=REPO_TYPE)


def save_listing(repo: str, commit: str, cache_dir: Path, files: list[RepoFile]) -> None:
    """Store the commit's listing in huggingface_hub's own tree cache so offline runs can list it.

    ``snapshot_download`` writes the same file; ``get_cached_repo_tree`` (public) reads it. The writer
    is private API, so any failure here only costs the offline listing's completeness.
    """
    try:
        from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache

        entries = {
            f.path: TreeCacheEntry(
                size=f.size,
                blob_id=f.blob_id,
                lfs_sha256=f.lfs.sha256 if f.lfs is not None else None,
                lfs_size=f.lfs.size if f.lfs is not None else None,
                xet_hash=f.xet_hash,
            )
            for f in files
        }
        write_tree_cache(str(storage_folder(repo, cache_dir)), commit, entries)
    except Exception:
        pass


def cached_listing(repo: str, commit: str, cache_dir: Path) -> tuple[dict[str, int | None], str]:
    """The commit's files from the local cache: the saved tree listing, else the snapshot folder."""
    try:
        files = get_cached_repo_tree(repo, repo_type=REPO_TYPE, revision=commit, cache_dir=cache_dir)
        return {f.path: f.size for f in files}, "cached listing"
    except CachedRepoTreeNotFoundError:
        pass
    snapshot = storage_folder(repo, cache_dir) / "snapshots" / commit
    out: dict[str, int | None] = {}
    if snapshot.is_dir():
        for dirpath, _, filenames in os.walk(snapshot):
            for name in filenames:
                p = Path(dirpath) / name
                out[p.relative_to(snapshot).as_posix()] = p.stat().st_size if p.exists() else None
    return out, "cached snapshot (files downloaded before)"

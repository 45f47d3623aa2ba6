"""Ingest straight from the Hugging Face Hub (SPEC §3.2 "Hub").

The seeds' data lives in the dataset repo ``viktoroo/sniffed-qk``, one git branch per model
(``dataset_revision`` in the registry). :func:`open_source` lists the branch once, pins it to its
commit sha, picks the ``l..h..{q,k}/data.parquet`` files the requested query heads need (plus their
GQA key heads), and :meth:`HubSource.groups` downloads them in parallel into the Hugging Face cache
(shared with the user's other HF tools, honouring their token and ``HF_HUB_OFFLINE``), yielding each
:class:`~qkdb.ingest.engine.pool.HeadGroup` as soon as its files are local so that download and compute
overlap.

Every failure is a :class:`~qkdb.errors.HubError` whose one-line message names the repo, the
revision and what went wrong (repo not found, branch not found with close branch names, gated or
unauthorised with how to log in, offline with nothing cached, a head missing on the branch, a
download cut off after retries).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RevisionNotFoundError,
    RevisionResolutionError,
)
from huggingface_hub.hf_api import RepoFile

from qkdb.errors import HubError, InputError
from qkdb.ingest.sources.plan import HeadGroup, plan_groups
from qkdb.ingest.sources.hub_branches import DEFAULT_REPO, Branch, list_branches, models_on_hub, registry_branches
from qkdb.ingest.sources.hub_cache import cached_listing, save_listing, storage_folder
from qkdb.ingest.sources.hub_errors import REPO_TYPE, SHORT_SHA, offline_now, revision_not_found, translate, where
from qkdb.ingest.sources.layout import DATA_FILE, HEAD_DIR, METADATA_FILE, Discovery, HeadFile, head_dir_name
from qkdb.ingest.sources.registry import ModelSpec, find
from qkdb.ingest.sources.select import HeadSelection

__all__ = [
    "DEFAULT_REPO", "Branch", "HubSource", "Listing", "branch_listing", "list_branches", "list_files", "models_on_hub",
    "open_source", "registry_branches", "remote_discovery",
]

BytesProgress = Callable[[int], None]


def remote_discovery(paths: list[str], label: str) -> Discovery:
    """Head files among repo paths, as a :class:`Discovery` whose ``HeadFile.path`` are repo paths.

    Same rules as :func:`qkdb.ingest.sources.layout.discover`: head folders at any depth, hidden folders
    skipped, a head that appears under two prefixes is an error.
    """
    found = Discovery(root=Path(label))
    for path in sorted(paths):
        parts = path.split("/")
        if len(parts) < 2 or parts[-1] != DATA_FILE or any(p.startswith(".") for p in parts[:-1]):
            continue
        m = HEAD_DIR.match(parts[-2])
        if not m:
            found.ignored.append("/".join(parts[:-1]))
            continue
        layer, head, kind = int(m.group(1)), int(m.group(2)), m.group(3)
        hf = HeadFile(layer, head, kind, PurePosixPath(path))  # type: ignore[arg-type]
        table = found.queries if kind == "q" else found.keys
        if (layer, head) in table:
            raise HubError(f"{label}: head {hf.name} appears twice: {table[(layer, head)].path.parent} and {hf.path.parent}")
        table[(layer, head)] = hf
    return found


class _Cancelled(Exception):
    """Raised inside a download thread when the consumer has stopped (error, close, Ctrl-C)."""


class _ByteBar:
    """Enough of tqdm's interface for ``hf_hub_download(tqdm_class=...)``: forwards byte counts.

    huggingface_hub instantiates it per file and calls ``update(n)`` with the bytes written (negative
    when it restarts a file whose server ignored a Range request). Because the class has
    ``update_transfer``, Xet downloads feed their network bytes there and their written bytes to
    ``update`` through this one bar, so each byte is counted once. ``update`` is also where a
    download notices that the consumer has gone, and stops.
    """

    callback: BytesProgress | None = None
    cancel: threading.Event | None = None
    format_dict: dict = {}

    def __init__(self, *args, **kwargs):
        self.n = kwargs.get("initial", 0) or 0
        self.total = kwargs.get("total")
        self.disable = False

    def update(self, n: int = 1) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise _Cancelled()
        self.n += n
        if self.callback is not None and n:
            self.callback(n)

    def update_transfer(self, n: int = 1) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise _Cancelled()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str):
        # Any other tqdm display method (set_postfix_str, refresh, …) is a no-op here.
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


@dataclass
class HubSource:
    """A branch of a Hub dataset, listed and pinned to a commit, with the head files a selection needs.

    Attributes
    ----------
    repo, revision, commit
        The dataset repo, the branch/tag/sha asked for, and the commit sha it resolved to (all
        downloads use the sha, so a branch moving during the ingest changes nothing).
    plan
        The :class:`HeadGroup` s to ingest, with ``HeadFile.path`` the files' *repo* paths.
    sizes
        Size in bytes of every planned file (None when unknown offline).
    listing
        Where the file list came from: ``"hub"``, ``"cached listing"`` or ``"cached snapshot ..."``.
    """

    repo: str
    revision: str
    commit: str
    plan: list[HeadGroup]
    sizes: dict[str, int | None]
    cache_dir: Path
    endpoint: str | None = None
    token: str | bool | None = None
    listing: str = "hub"
    max_workers: int = 8
    retries: int = 2
    retry_wait: float = 1.0
    progress: BytesProgress | None = None
    ignored: list[str] = field(default_factory=list)
    kind: str = "hub"
    state_file: str | None = None  # repo path of qk-sniffer's _saver_state.json beside the head folders, if listed

    @property
    def location(self) -> str:
        """What ``ingest_runs.location`` records: the repo id."""
        return self.repo

    @property
    def offline(self) -> bool:
        return self.listing != "hub"

    @property
    def files(self) -> list[str]:
        """Repo paths of the planned files, each once, in download order (a group's key first)."""
        seen: dict[str, None] = {}
        for g in self.plan:
            for f in (g.key, *g.queries):
                seen.setdefault(str(f.path), None)
        return list(seen)

    @property
    def planned(self) -> list[tuple[int, int]]:
        """Every (layer, query head) the groups will hold."""
        return [(q.layer, q.head) for g in self.plan for q in g.queries]

    @property
    def snapshot_dir(self) -> Path:
        """The local folder mirroring the commit's files (those downloaded so far)."""
        return storage_folder(self.repo, self.cache_dir) / "snapshots" / self.commit

    def cached(self, path: str) -> Path | None:
        """The local file of a repo path at this commit if the HF cache has it (no network)."""
        hit = try_to_load_from_cache(self.repo, path, cache_dir=self.cache_dir, revision=self.commit, repo_type=REPO_TYPE)
        return Path(hit) if isinstance(hit, str) else None

    def missing_from_cache(self) -> list[str]:
        return [p for p in self.files if self.cached(p) is None]

    def download_bytes(self) -> int:
        """Bytes still to download (files already in the cache cost nothing)."""
        return sum(self.sizes.get(p) or 0 for p in self.missing_from_cache())

    def fingerprint(self) -> str:
        """Identifies exactly which data an ingest of this source reads: commit and planned files."""
        h = hashlib.sha256(f"{self.repo}\0{self.commit}\n".encode())
        for p in self.files:
            h.update(f"{p}:{self.sizes.get(p)}\n".encode())
        return h.hexdigest()

    def report_to(self, report: Callable[..., None], **extra) -> None:
        """Send download progress to an ingest progress callback as it happens.

        ``report("download", total=<bytes to download>, done=<bytes so far>, **extra)`` is called once
        now and then from the download threads (serialised, with ``done`` never decreasing).
        """
        total = self.download_bytes()
        lock = threading.Lock()
        state = {"done": 0, "shown": 0}

        def on_bytes(n: int) -> None:
            with lock:
                state["done"] += n  # negative when huggingface_hub restarts a file from scratch
                if state["done"] > state["shown"]:
                    state["shown"] = state["done"]
                    report("download", total=total, done=state["shown"], **extra)

        report("download", total=total, done=0, **extra)
        self.progress = on_bytes

    def saver_state(self):
        """qk-sniffer's record of the capture (:class:`~qkdb.ingest.sources.saver_state.SaverState`), or None.

        A small file, fetched at the pinned commit (or taken from the cache); provenance only, so a
        branch without one, or one that cannot be fetched or read, gives None rather than an error.
        """
        from qkdb.ingest.sources.saver_state import read_saver_state

        if self.state_file is None:
            return None
        local = self.cached(self.state_file)
        try:
            if local is None:
                local = Path(hf_hub_download(self.repo, self.state_file, repo_type=REPO_TYPE, revision=self.commit,
                                             endpoint=self.endpoint, cache_dir=self.cache_dir, token=self.token))
            return read_saver_state(local.parent)
        except Exception:  # noqa: BLE001 - offline, a cut connection, a malformed file: no provenance
            return None

    # -- downloading ------------------------------------------------------------------------------
    def _download(self, path: str, bar: type[_ByteBar], cancel: threading.Event) -> Path:
        last: HubError | None = None
        for attempt in range(self.retries + 1):
            if cancel.is_set():
                raise _Cancelled()
            try:
                local = hf_hub_download(
                    self.repo,
                    path,
                    repo_type=REPO_TYPE,
                    revision=self.commit,
                    endpoint=self.endpoint,
                    cache_dir=self.cache_dir,
                    token=self.token,
                    tqdm_class=bar,
                )
                return Path(local)
            except _Cancelled:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure becomes one HubError below
                err, transient = translate(exc, self.repo, self.revision, self.endpoint)
                if isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError):
                    err = HubError(f"{where(self.repo, self.revision)}: head file {path} is missing on the branch (HTTP 404)", kind="not_found")
                elif isinstance(exc, LocalEntryNotFoundError) and offline_now():
                    err = HubError(
                        f"{where(self.repo, self.revision)}: offline (HF_HUB_OFFLINE=1) and {path} is not in the Hugging Face cache"
                    )
                last = err
                if not transient:
                    raise err from exc
                if attempt < self.retries and cancel.wait(self.retry_wait * 2**attempt):
                    raise _Cancelled() from None
        assert last is not None
        raise HubError(
            f"{where(self.repo, self.revision)}: download of {path} failed after {self.retries + 1} attempts "
            f"({last}); run again to resume: files already downloaded stay in the Hugging Face cache"
        )

    def groups(self) -> Iterator[HeadGroup]:
        """Yield each planned group, with local paths, as soon as all its files are in the cache.

        Files already cached cost no request. Downloads run in ``max_workers`` threads in plan order
        and keep going while the consumer computes; when the consumer stops (error or ``close()``)
        the remaining downloads are cancelled.
        """
        cancel = threading.Event()
        bar = type("_Bar", (_ByteBar,), {"callback": staticmethod(self.progress) if self.progress else None, "cancel": cancel})
        users: dict[str, list[int]] = {}
        for i, g in enumerate(self.plan):
            for f in (g.key, *g.queries):
                users.setdefault(str(f.path), []).append(i)
        remaining = [len({str(f.path) for f in (g.key, *g.queries)}) for g in self.plan]
        local: dict[str, Path] = {}
        todo: list[str] = []
        for p in self.files:
            hit = self.cached(p)
            if hit is not None:
                local[p] = hit
            else:
                todo.append(p)
        if self.offline and todo:
            raise self._not_cached(todo)

        def ready(i: int) -> HeadGroup:
            g = self.plan[i]
            loc = lambda f: replace(f, path=local[str(f.path)])  # noqa: E731
            return HeadGroup(g.layer, g.kv_head, loc(g.key), tuple(loc(q) for q in g.queries))

        def land(path: str) -> Iterator[HeadGroup]:
            for i in users[path]:
                remaining[i] -= 1
                if remaining[i] == 0:
                    yield ready(i)

        if not todo:
            for p in list(local):
                yield from land(p)
            return
        order = {p: i for i, p in enumerate(todo)}
        pool = ThreadPoolExecutor(max_workers=max(1, self.max_workers), thread_name_prefix="qkdb-hub")
        try:
            futures: dict[Future, str] = {pool.submit(self._download, p, bar, cancel): p for p in todo}
            # Groups complete from the cache go first, while the downloads already run.
            for p in list(local):
                yield from land(p)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                # Plan order among the finished ones keeps the output deterministic for equal timing.
                for fut in sorted(done, key=lambda f: order[futures[f]]):
                    path = futures[fut]
                    local[path] = fut.result()  # raises the HubError of a failed file
                    yield from land(path)
        finally:
            # Stop the other downloads fast: queued ones are dropped, running ones raise in update().
            cancel.set()
            pool.shutdown(wait=True, cancel_futures=True)

    def _not_cached(self, todo: list[str]) -> HubError:
        shown = ", ".join(todo[:4]) + (f" and {len(todo) - 4} more" if len(todo) > 4 else "")
        return HubError(
            f"{where(self.repo, self.revision)}: offline (HF_HUB_OFFLINE=1) and {len(todo)} of the "
            f"{len(self.files)} files the requested heads need are not in the Hugging Face cache "
            f"({self.cache_dir}): {shown}; go online once, or choose cached heads with --heads"
        )


def _commits_by_prefix(api: HfApi, repo: str, prefix: str, cache_dir: Path, token) -> set[str]:
    """The full shas that start with ``prefix``: the commits of the repo's branches and tags (offline:
    the commits in the cache). The Hub names a commit only by its whole sha; a user cites 7-12 characters."""
    if offline_now():
        folder = storage_folder(repo, cache_dir) / "snapshots"
        return {p.name for p in folder.iterdir() if p.name.startswith(prefix)} if folder.is_dir() else set()
    refs = api.list_repo_refs(repo, repo_type=REPO_TYPE, token=token)
    named = [*refs.branches, *refs.tags]
    found = {r.target_commit for r in named if r.target_commit.startswith(prefix)}
    if found:
        return found
    for ref in named:  # older commits: one history listing per branch
        found |= {c.commit_id for c in api.list_repo_commits(repo, repo_type=REPO_TYPE, revision=ref.target_commit,
                                                             token=token) if c.commit_id.startswith(prefix)}
    return found


def _resolve(api: HfApi, repo: str, revision: str, cache_dir: Path, token) -> str:
    """The commit sha of ``revision`` (offline: from the cache's ``refs/``); a short sha is expanded."""
    try:
        resolved = api.resolve_revision(
            repo, repo_type=REPO_TYPE, revision=revision, cache_dir=cache_dir, token=token,
            local_files_only=offline_now(),
        )
        return resolved.resolved
    except (RevisionNotFoundError, RevisionResolutionError) as exc:
        if SHORT_SHA.match(revision):
            try:
                found = _commits_by_prefix(api, repo, revision, cache_dir, token)
            except Exception as listing_failed:  # noqa: BLE001
                raise translate(listing_failed, repo, revision, api.endpoint)[0] from None
            if len(found) == 1:
                return found.pop()
            if len(found) > 1:
                raise HubError(f"{where(repo)}: {revision!r} is the start of {len(found)} commits "
                               f"({', '.join(sorted(found))}): give more of the sha", kind="usage") from None
        if isinstance(exc, RevisionNotFoundError):
            raise revision_not_found(api, repo, revision, token) from None
        if offline_now():
            raise HubError(
                f"{where(repo, revision)}: offline (HF_HUB_OFFLINE=1) and this revision was never "
                f"downloaded into the Hugging Face cache ({cache_dir})"
            ) from None
        raise translate(exc.__cause__ or exc, repo, revision, api.endpoint)[0] from None
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, repo, revision, api.endpoint)[0] from None


def list_files(
    repo: str,
    revision: str,
    *,
    endpoint: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
) -> tuple[str, dict[str, int | None], str]:
    """``(commit, {path: size}, origin)`` of a revision: one paged tree listing at the pinned commit.

    Offline (``HF_HUB_OFFLINE=1``) or when the Hub cannot be reached, the listing comes from the
    cache: huggingface_hub's tree cache for that commit if present, else the files downloaded before.
    """
    cache = Path(cache_dir or constants.HF_HUB_CACHE).expanduser().resolve()
    api = HfApi(endpoint=endpoint, token=token)
    commit = _resolve(api, repo, revision, cache, token)
    if not offline_now():
        try:
            entries = [
                f for f in api.list_repo_tree(repo, repo_type=REPO_TYPE, revision=commit, recursive=True, token=token)
                if isinstance(f, RepoFile)
            ]
            save_listing(repo, commit, cache, entries)
            return commit, {f.path: f.size for f in entries}, "hub"
        except RevisionNotFoundError:
            raise revision_not_found(api, repo, revision, token) from None
        except (OfflineModeIsEnabled, httpx2.TransportError):
            pass  # the Hub went away between the two calls: fall back to the cache as offline
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, repo, revision, endpoint)[0] from None
    files, origin = cached_listing(repo, commit, cache)
    if not files:
        raise HubError(
            f"{where(repo, revision)}: offline and nothing of commit {commit} is in the Hugging Face cache ({cache})"
        )
    return commit, files, origin


@dataclass(frozen=True)
class Listing:
    """A branch listed once (:func:`branch_listing`): what it resolved to, its files, and its ``qkdb_dataset.json``."""

    repo: str
    revision: str
    commit: str
    files: dict[str, int | None]
    origin: str
    metadata: dict
    state: object = None  # qk-sniffer's _saver_state.json (a SaverState), when the branch has one


def branch_listing(model: str | None, repo: str | None, revision: str | None, *, endpoint: str | None = None,
                   cache_dir: str | os.PathLike | None = None, token: str | bool | None = None) -> Listing | None:
    """List the branch an ingest of ``model`` reads, with the ``qkdb_dataset.json`` at its root when it has one.

    A branch pushed by ``qkdb sniff --push-to-hub`` carries the capture's metadata, so its facts need
    no options, as with ``--path``. The repo and branch default as in :func:`open_source` (the
    registry's); None when no branch is named (then :func:`open_source` says what to give). The
    listing is handed to :func:`open_source`, which does not list the branch again.
    """
    spec = find(model) if model else None
    repo = repo or (spec.dataset_repo if spec else None) or DEFAULT_REPO
    revision = revision or (spec.dataset_revision if spec else None)
    if not revision:
        return None
    cache = Path(cache_dir or constants.HF_HUB_CACHE).expanduser().resolve()
    commit, files, origin = list_files(repo, revision, endpoint=endpoint, cache_dir=cache, token=token)
    metadata: dict = {}
    if METADATA_FILE in files:
        import json

        from qkdb.ingest.sources.hub_repo import fetch

        local = fetch(repo, commit, [METADATA_FILE], revision=revision, endpoint=endpoint, cache_dir=cache, token=token)
        try:
            metadata = json.loads(local[METADATA_FILE].read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{where(repo, revision)}: {METADATA_FILE} is not readable JSON ({exc})") from None
        if not isinstance(metadata, dict):
            raise InputError(f"{where(repo, revision)}: {METADATA_FILE} is not a JSON object")
    # A qk-sniffer branch names its model and counts in _saver_state.json: read as a folder's is, so
    # that `--repo R --revision B` alone ingests it as `--path` would (the shallowest one: the
    # capture's root, beside its head folders).
    from qkdb.ingest.sources.saver_state import SAVER_STATE, read_saver_state

    # (Only without a name: a registry name keeps the registry's facts, and the source reads the
    # state for provenance once its head folders are planned.)
    states = sorted((f for f in files if f == SAVER_STATE or f.endswith("/" + SAVER_STATE)), key=lambda f: f.count("/"))
    state = None
    if states and not model:
        from qkdb.ingest.sources.hub_repo import fetch

        local = fetch(repo, commit, [states[0]], revision=revision, endpoint=endpoint, cache_dir=cache, token=token)
        try:
            state = read_saver_state(local[states[0]].parent)
        except InputError as exc:
            raise InputError(f"{where(repo, revision)}: {states[0]}: {str(exc).split(': ', 1)[-1]}") from None
    return Listing(repo, revision, commit, files, origin, metadata, state)


def open_source(
    repo: str | None,
    revision: str | None,
    spec: ModelSpec,
    selection: HeadSelection | None = None,
    *,
    endpoint: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    listing: Listing | None = None,
    max_workers: int = 8,
    retries: int = 2,
    retry_wait: float = 1.0,
    progress: BytesProgress | None = None,
) -> HubSource:
    """List a dataset branch once and plan the ingest of the selected heads; nothing is downloaded yet.

    Parameters
    ----------
    repo, revision
        Dataset repo and branch, tag or commit sha; default the registry's ``dataset_repo`` /
        ``dataset_revision`` of ``spec``.
    spec
        The model's facts; ``spec.gqa_ratio`` maps query head ``h`` to key head ``h // gqa_ratio``.
    selection
        Which query heads (default all on the branch).
    endpoint, cache_dir, token
        Passed to huggingface_hub (defaults: ``HF_ENDPOINT``, ``HF_HUB_CACHE``, the stored login / ``HF_TOKEN``).
    max_workers
        Parallel downloads.
    retries, retry_wait
        A file whose download fails transiently (connection cut, 5xx) is tried ``retries`` more
        times, waiting ``retry_wait · 2^attempt`` seconds (huggingface_hub itself first resumes a cut
        body a few times).
    listing
        The branch as :func:`branch_listing` listed it (used when it names the same repo and revision).
    progress
        Called from the download threads with each chunk's byte count.

    Raises
    ------
    HubError
        Repo or revision not found, gated/unauthorised, offline without a cached listing, a head asked
        for by name that the branch lacks, key head folders the GQA mapping needs that the branch lacks.
    """
    repo = repo or spec.dataset_repo or DEFAULT_REPO
    revision = revision or spec.dataset_revision
    if not revision:
        raise HubError(f"model {spec.model} has no dataset_revision in the registry: give --revision (a branch of {repo})", kind="usage")
    if not spec.gqa_ratio:
        raise HubError(f"model {spec.model}: the GQA ratio is unknown; give --gqa-ratio", kind="usage")
    selection = selection or HeadSelection()
    cache = Path(cache_dir or constants.HF_HUB_CACHE).expanduser().resolve()
    if listing is not None and (listing.repo, listing.revision) == (repo, revision):
        commit, files, origin = listing.commit, listing.files, listing.origin
    else:
        commit, files, origin = list_files(repo, revision, endpoint=endpoint, cache_dir=cache, token=token)
    label = f"{repo}@{revision}" + (f" ({origin})" if origin != "hub" else "")
    found = remote_discovery(list(files), label)
    scope = "in the local cache" if origin != "hub" else "on the branch"
    if not found.queries:
        raise HubError(f"{label}: no query head folders (l{{LL}}h{{HH}}q/data.parquet) {scope}")
    absent = sorted(head_dir_name(l, h, "q") for (l, h) in selection.heads if (l, h) not in found.queries)
    if absent:
        shown = ", ".join(absent[:8]) + (f" and {len(absent) - 8} more" if len(absent) > 8 else "")
        raise HubError(f"{label}: head folder(s) {shown} not found {scope} ({len(found.queries)} query heads there)", kind="not_found")
    try:
        plan = plan_groups(found, spec.gqa_ratio, selection)
    except InputError as exc:
        raise HubError(str(exc)) from None
    source = HubSource(
        repo=repo,
        revision=revision,
        commit=commit,
        plan=plan,
        sizes={str(f.path): files.get(str(f.path)) for g in plan for f in (g.key, *g.queries)},
        cache_dir=cache,
        endpoint=endpoint,
        token=token,
        listing=origin,
        max_workers=max_workers,
        retries=retries,
        retry_wait=retry_wait,
        progress=progress,
        ignored=found.ignored,
        state_file=_state_file(files, plan),
    )
    if source.offline:
        todo = source.missing_from_cache()
        if todo:
            raise source._not_cached(todo)
    return source


def _state_file(files, plan: list[HeadGroup]) -> str | None:
    """The repo path of ``_saver_state.json`` in the folder that holds the head folders (the branch root on the real repo), if listed."""
    from qkdb.ingest.sources.saver_state import SAVER_STATE

    if not plan:
        return None
    parent = PurePosixPath(str(plan[0].key.path)).parent.parent
    path = SAVER_STATE if str(parent) in ("", ".") else f"{parent}/{SAVER_STATE}"
    return path if path in files else None

"""A Hub dataset repo as a set of files: fetch some at a pinned commit, or make a branch hold exactly a set of local files.

Reading (:func:`fetch`) goes through the Hugging Face cache, as an ingest's downloads do: a file
already there costs no request, and ``HF_HUB_OFFLINE=1`` works once it is. Writing
(:func:`commit_files`) is **one commit or none**: the repo and the branch are made if needed, the
branch's tree is listed once, only files whose bytes differ from the branch's are uploaded, files the
branch holds beyond the given set are deleted in the same commit, and the commit names the listed
commit as its parent, so that a branch moved meanwhile refuses it rather than mixing two publishes.
Large files go through the LFS (or Xet) upload, which puts objects on the Hub's storage before the
commit names them: a failure in the middle leaves the branch as it was, and a run again sends only
the objects the Hub does not have.

Every failure is one :class:`~qkdb.errors.HubError` line naming the repo and branch, what went
wrong and what to do; a failed commit also says which state the branch is in (checked afterwards).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from qkdb.errors import HubError
from qkdb.ingest.sources.hub_errors import REPO_TYPE, offline_now, revision_not_found, translate, where

KEEP = (".gitattributes",)  # files of a branch a commit never deletes (the Hub's LFS rules)
WRITE_HINT = "use a token with write access (`hf auth login`, or HF_TOKEN)"


@dataclass
class Committed:
    """What :func:`commit_files` did.

    Attributes
    ----------
    commit
        The branch's commit afterwards (the new one, or the one it was at when nothing changed).
    parent
        The branch's commit before, None for a new repo's first write.
    added, deleted, unchanged
        Repo paths uploaded (new or changed), deleted, and left as they were.
    bytes_sent
        Bytes of the files in ``added`` (what the upload had to send at most: the Hub skips objects it has).
    created_repo, created_branch
        Whether the repo or the branch was made by this call.
    note
        One line when the commit's reply was lost but the branch shows it made, else None.
    """

    repo: str
    branch: str
    commit: str
    parent: str | None
    added: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    created_repo: bool = False
    created_branch: bool = False
    note: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.added or self.deleted)


def _api(endpoint: str | None, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token)


def _status(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "response", None), "status_code", None)


def model_repo_exists(repo: str, *, endpoint: str | None = None, token=None) -> bool:
    """Whether ``repo`` is a *model* repo on the Hub (False when that cannot be told)."""
    try:
        return bool(_api(endpoint, token).repo_exists(repo, repo_type="model", token=token))
    except Exception:  # noqa: BLE001 - only a hint for a better message
        return False


def not_a_dataset(repo: str, endpoint: str | None, token) -> HubError | None:
    """The error for a name that is a model repo and not a dataset repo (None when it is not one)."""
    if model_repo_exists(repo, endpoint=endpoint, token=token):
        return HubError(
            f"{repo} is a model repo on the Hub, not a dataset repo: qkdb reads and writes dataset repos "
            f"(https://huggingface.co/datasets/{repo}); give the dataset's name", kind="input"
        )
    return None


def write_error(exc: BaseException, repo: str, branch: str | None, endpoint: str | None) -> HubError:
    """A failure of a write request as one line (authorisation is about writing, not reading)."""
    from huggingface_hub.errors import RepositoryNotFoundError

    status = _status(exc)
    asked = where(repo, branch)
    if status == 401 and not isinstance(exc, RepositoryNotFoundError):
        return HubError(f"{asked}: not logged in, or the token is not valid (HTTP 401): writing needs a token; {WRITE_HINT}", kind="input")
    if status == 403:
        return HubError(f"{asked}: the token may not write to it (HTTP 403, a read-only token?); {WRITE_HINT}", kind="input")
    if status == 412:
        return HubError(f"{asked}: the branch moved while this was being written (another writer?): nothing was committed; run it again", kind="busy")
    return translate(exc, repo, branch, endpoint)[0]


@contextlib.contextmanager
def _quiet_hub():
    """huggingface_hub's own progress bars off while qkdb reports what happens (restored afterwards)."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was:
            enable_progress_bars()


# -- reading ----------------------------------------------------------------------------------------


def fetch(repo: str, commit: str, paths: list[str], *, revision: str | None = None, endpoint: str | None = None,
          cache_dir: str | os.PathLike | None = None, token=None, retries: int = 2) -> dict[str, Path]:
    """The local files of ``paths`` at ``commit``, downloaded into the Hugging Face cache when missing.

    ``revision`` (the branch asked for) only names the place in messages. A transient failure is
    tried ``retries`` more times; offline, a file not in the cache is an error naming it.
    """
    import time

    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    out: dict[str, Path] = {}
    with _quiet_hub():
        for path in paths:
            for attempt in range(retries + 1):
                try:
                    out[path] = Path(hf_hub_download(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=endpoint,
                                                     cache_dir=cache_dir, token=token))
                    break
                except Exception as exc:  # noqa: BLE001 - every failure becomes one HubError
                    err, transient = translate(exc, repo, revision or commit, endpoint)
                    if isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError):
                        err = HubError(f"{where(repo, revision or commit)}: {path} is listed but not served (HTTP 404)", kind="not_found")
                    elif isinstance(exc, LocalEntryNotFoundError) and offline_now():
                        err = HubError(f"{where(repo, revision or commit)}: offline (HF_HUB_OFFLINE=1) and {path} is not in the Hugging Face cache")
                    if not transient or attempt == retries:
                        raise err from None
                    time.sleep(0.5 * 2**attempt)
    return out


# -- writing ----------------------------------------------------------------------------------------


def git_blob_sha(data: bytes) -> str:
    """Git's object id of a file's bytes (what the Hub lists for a file that is not an LFS object)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _same(local: Path | bytes, remote) -> bool:
    """Whether a local file's bytes are the remote entry's (by its LFS sha256, else its git blob id)."""
    data = local if isinstance(local, bytes) else None
    size = len(data) if data is not None else Path(local).stat().st_size
    if remote.lfs is not None:
        if remote.lfs.size != size:
            return False
        return (hashlib.sha256(data).hexdigest() if data is not None else file_sha256(Path(local))) == remote.lfs.sha256
    if remote.size != size:
        return False
    return git_blob_sha(data if data is not None else Path(local).read_bytes()) == remote.blob_id


def _ensure_repo(api, repo: str, private: bool, endpoint: str | None, token) -> bool:
    """Make the dataset repo if it does not exist; True when it was made. A model repo of that name is refused."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        api.repo_info(repo, repo_type=REPO_TYPE, token=token)
        return False
    except RepositoryNotFoundError:
        pass
    except Exception as exc:  # noqa: BLE001
        raise write_error(exc, repo, None, endpoint) from None
    refused = not_a_dataset(repo, endpoint, token)
    if refused is not None:
        raise HubError(f"{refused}, or make the dataset repo yourself first (`hf repo create {repo} --repo-type dataset`)",
                       kind="input")
    try:
        api.create_repo(repo, repo_type=REPO_TYPE, private=private, exist_ok=True, token=token)
    except Exception as exc:  # noqa: BLE001
        raise write_error(exc, repo, None, endpoint) from None
    return True


def _branch_head(api, repo: str, branch: str, endpoint: str | None, token) -> str | None:
    """The commit ``branch`` points at, None when there is no such branch."""
    try:
        refs = api.list_repo_refs(repo, repo_type=REPO_TYPE, token=token)
    except Exception as exc:  # noqa: BLE001
        raise write_error(exc, repo, branch, endpoint) from None
    return next((b.target_commit for b in refs.branches if b.name == branch), None)


def remote_files(repo: str, commit: str, *, endpoint: str | None = None, token=None) -> dict:
    """Every file of ``commit`` as huggingface_hub's ``RepoFile`` (with its LFS sha256 or git blob id), by path."""
    from huggingface_hub.hf_api import RepoFile

    api = _api(endpoint, token)
    try:
        return {f.path: f for f in api.list_repo_tree(repo, repo_type=REPO_TYPE, revision=commit, recursive=True, token=token)
                if isinstance(f, RepoFile)}
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, repo, commit, endpoint)[0] from None


def commit_files(
    repo: str,
    branch: str,
    files: Mapping[str, Path | bytes] | Callable[[], Mapping[str, Path | bytes]],
    *,
    message: str,
    description: str = "",
    private: bool = False,
    endpoint: str | None = None,
    token=None,
    check: Callable[[dict], None] | None = None,
) -> Committed:
    """Make ``branch`` of the dataset ``repo`` hold exactly ``files`` (and its ``.gitattributes``), in one commit or none.

    Parameters
    ----------
    files
        Repo path -> a local file or the bytes to store there; or a function that returns them, called
        once the repo and branch are known to be there and ``check`` has passed (so that a refusal
        comes before the work of making them).
    message, description
        The commit's summary line and body.
    private
        Make a new repo private (an existing repo keeps its visibility).
    check
        Called with the branch's current files (path -> ``RepoFile``) before anything is uploaded;
        it raises to refuse writing over what the branch holds. Not called for a branch made here:
        it starts as a copy of the default branch, whose files the commit replaces.

    Returns
    -------
    Committed
        With ``changed`` False (and no request beyond the listing) when the branch already holds these bytes.

    Raises
    ------
    HubError
        One line: the token may not write (kind input), the name is a model repo (input), the Hub cannot
        be reached or failed (network: the branch is unchanged, or the line says it holds the new commit),
        the branch moved meanwhile (busy).
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    if offline_now():
        raise HubError(f"{where(repo, branch)}: offline (HF_HUB_OFFLINE=1): writing to the Hub needs the network")
    api = _api(endpoint, token)
    created_repo = _ensure_repo(api, repo, private, endpoint, token)
    head = _branch_head(api, repo, branch, endpoint, token)
    created_branch = head is None
    if created_branch:
        try:  # from the default branch, as the Hub does (its .gitattributes come along)
            api.create_branch(repo, repo_type=REPO_TYPE, branch=branch, token=token, exist_ok=True)
        except Exception as exc:  # noqa: BLE001
            raise write_error(exc, repo, branch, endpoint) from None
        head = _branch_head(api, repo, branch, endpoint, token)
        if head is None:
            raise HubError(f"{where(repo, branch)}: the branch could not be made")
    remote = remote_files(repo, head, endpoint=endpoint, token=token)
    if check is not None and not created_branch:  # (a new branch holds what it was made from, not the user's)
        check(remote)
    if callable(files):
        files = files()
    added = sorted(p for p, local in files.items() if p not in remote or not _same(local, remote[p]))
    deleted = sorted(p for p in remote if p not in files and p not in KEEP)
    done = Committed(repo, branch, head, None if created_repo else head, added, deleted,
                     sorted(set(files) - set(added)), created_repo=created_repo, created_branch=created_branch)
    done.bytes_sent = sum(len(files[p]) if isinstance(files[p], bytes) else Path(files[p]).stat().st_size for p in added)
    if not done.changed:
        return done
    operations = [CommitOperationAdd(p, files[p]) for p in added] + [CommitOperationDelete(p) for p in deleted]
    try:
        with _quiet_hub():
            info = api.create_commit(repo, operations, commit_message=message, commit_description=description,
                                     repo_type=REPO_TYPE, revision=branch, parent_commit=head, token=token)
        done.commit = info.oid
        return done
    except Exception as exc:  # noqa: BLE001
        failure = write_error(exc, repo, branch, endpoint)
    return _after_failure(api, done, files, failure, endpoint, token)


def _after_failure(api, done: Committed, files: Mapping[str, Path | bytes], failure: HubError,
                   endpoint: str | None, token) -> Committed:
    """Say what a failed commit left: the branch as it was, or (its reply lost) the new commit made whole."""
    repo, branch, parent = done.repo, done.branch, done.commit
    if failure.kind == "busy":  # (a moved branch: the Hub refused the commit, nothing to check)
        raise failure
    try:
        now = _branch_head(api, repo, branch, endpoint, token)
        current = remote_files(repo, now, endpoint=endpoint, token=token) if now and now != parent else None
    except HubError:
        raise HubError(
            f"{failure}; the branch could not be checked afterwards: the Hub makes a commit whole or not at all, so "
            f"{repo}@{branch} is either still at {parent} or holds all of this commit; run it again to be sure",
            kind=failure.kind,
        ) from None
    if now == parent:
        raise HubError(
            f"{failure}; {repo}@{branch} is unchanged (still at {parent}): run it again, objects already "
            "uploaded are not sent twice", kind=failure.kind,
        ) from None
    if current is not None and set(current) - set(KEEP) == set(files) and all(_same(files[p], current[p]) for p in files):
        done.commit = now
        done.note = f"the Hub's reply to the commit was lost ({failure}), but {repo}@{branch} holds it, whole, at {now}"
        return done
    raise HubError(
        f"{failure}; {repo}@{branch} moved to {now} meanwhile, by another writer: nothing of this was committed",
        kind=failure.kind,
    ) from None


def resolve(repo: str, revision: str, *, endpoint: str | None = None, token=None) -> str:
    """The commit sha a branch, tag or sha names (online)."""
    from huggingface_hub.errors import RevisionNotFoundError

    api = _api(endpoint, token)
    try:
        return api.repo_info(repo, repo_type=REPO_TYPE, revision=revision, token=token).sha
    except RevisionNotFoundError:
        raise revision_not_found(api, repo, revision, token) from None
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, repo, revision, endpoint)[0] from None


__all__ = ["Committed", "commit_files", "fetch", "file_sha256", "model_repo_exists", "not_a_dataset",
           "remote_files", "resolve", "write_error"]

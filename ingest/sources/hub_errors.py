"""Hugging Face Hub failures as one-line :class:`~qkdb.errors.HubError` s naming what was asked.

huggingface_hub raises a zoo of exceptions (and httpx2 transport errors under them); an ingest
reports each as a single line that says which repo and revision, what went wrong and what to do,
and whether trying again could help.
"""

from __future__ import annotations

import difflib
import re

import httpx2
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    RevisionResolutionError,
)

from qkdb.errors import HubError

REPO_TYPE = "dataset"
LOGIN_HINT = "log in with `hf auth login` or set HF_TOKEN"
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
# A commit cited by its first characters (git's 7 at least), which the Hub does not resolve itself.
SHORT_SHA = re.compile(r"^[0-9a-f]{7,39}$")


def where(repo: str, revision: str | None = None) -> str:
    """How a message names what was asked: ``dataset owner/name at revision 'branch'``."""
    return f"dataset {repo}" + (f" at revision {revision!r}" if revision else "")


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def offline_now() -> bool:
    """Whether huggingface_hub is in offline mode (``HF_HUB_OFFLINE``, read by it at import)."""
    return bool(constants.is_offline_mode())


def translate(exc: BaseException, repo: str, revision: str | None, endpoint: str | None) -> tuple[HubError, bool]:
    """Translate a huggingface_hub / httpx2 failure into (one-line HubError, worth retrying?)."""
    asked = where(repo, revision)
    host = endpoint or constants.ENDPOINT
    if isinstance(exc, GatedRepoError):
        return HubError(f"{asked} is gated: request access on its Hub page, then {LOGIN_HINT}", kind="input"), False
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(f"dataset repo {repo!r} not found on {host} (if it is private: {LOGIN_HINT})", kind="not_found"), False
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"{asked}: revision not found", kind="not_found"), False
    if isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError):
        return HubError(f"{asked}: file not found on the Hub ({exc.__class__.__name__})", kind="not_found"), False
    if isinstance(exc, (OfflineModeIsEnabled, LocalEntryNotFoundError, RevisionResolutionError)):
        if offline_now() or isinstance(exc, OfflineModeIsEnabled):
            return HubError(
                f"{asked}: offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache; "
                "download it once online (or choose cached heads with --heads)"
            ), False
        return HubError(f"{asked}: cannot reach the Hub at {host} and nothing usable is cached ({_short(exc)})"), True
    if isinstance(exc, HfHubHTTPError):
        status = _status(exc)
        if status == 401:
            return HubError(f"{asked}: not authorised (HTTP 401); {LOGIN_HINT}", kind="input"), False
        if status == 403:
            return HubError(f"{asked}: access forbidden (HTTP 403); check that your token may read it ({LOGIN_HINT})", kind="input"), False
        if status is not None and (status >= 500 or status in (408, 429)):
            return HubError(f"{asked}: the Hub at {host} answered HTTP {status}"), True
        return HubError(f"{asked}: the Hub answered HTTP {status} ({_short(exc)})"), False
    if isinstance(exc, httpx2.TransportError):
        return HubError(f"{asked}: connection to {host} failed ({exc.__class__.__name__}: {_short(exc)})"), True
    if isinstance(exc, OSError):  # e.g. huggingface_hub's size consistency check after a cut-off body
        return HubError(f"{asked}: download failed ({_short(exc)})"), True
    return HubError(f"{asked}: {exc.__class__.__name__}: {_short(exc)}"), False


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] + ("…" if len(text) > 200 else "")


def _close(name: str, candidates: list[str], n: int = 5) -> list[str]:
    close = difflib.get_close_matches(name, candidates, n=n, cutoff=0.4)
    # Branch names share long suffixes (-longbench-pro-128k-plus): also offer prefix matches.
    stem = name.split("-longbench")[0]
    close += [c for c in candidates if stem and c.startswith(stem) and c not in close]
    return close[:n]


def revision_not_found(api: HfApi, repo: str, revision: str, token) -> HubError:
    """A branch/commit that does not exist: name the close branches (one extra request)."""
    try:
        refs = api.list_repo_refs(repo, repo_type=REPO_TYPE, token=token)
        branches = [b.name for b in refs.branches] + [t.name for t in refs.tags]
    except Exception:  # the hint is best-effort; the error stands without it
        branches = []
    kind = "commit" if _HEX.match(revision) else "branch"
    close = _close(revision, branches)
    if close:
        hint = f"; close branches: {', '.join(close)}"
    elif branches:
        hint = f"; it has {len(branches)} branch{'' if len(branches) == 1 else 'es'} (see `qkdb hub list --repo {repo}`)"
    else:
        hint = ""
    return HubError(f"{where(repo)}: {kind} {revision!r} not found{hint}", kind="not_found")

"""`qkdb hub …`: the Hugging Face Hub dataset of sniffed queries and keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb.cli.app import app
from qkdb.cli.common import note
from qkdb.cli.output import Format, write_table

hub_app = typer.Typer(
    name="hub",
    help="The Hugging Face Hub dataset repo (one branch per model).",
    no_args_is_help=True,
)

RepoOption = Annotated[
    Optional[str],
    typer.Option("--repo", help="Dataset repo on the Hub (default: viktoroo/sniffed-qk).", show_default=False),
]
EndpointOption = Annotated[
    Optional[str],
    typer.Option("--endpoint", help="Hub URL (default: $HF_ENDPOINT, else https://huggingface.co).", show_default=False),
]


@hub_app.command("list")
def list_branches(
    repo: RepoOption = None,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE.")] = None,
    endpoint: EndpointOption = None,
    cache_dir: Annotated[
        Optional[Path],
        typer.Option("--cache-dir", help="Hugging Face cache (default: $HF_HUB_CACHE).", show_default=False),
    ] = None,
) -> None:
    """List the repo's branches and the registry models they hold (offline: the cached branches)."""
    from qkdb.ingest import hub

    repo = repo or hub.DEFAULT_REPO
    branches, origin = hub.list_branches(repo, endpoint=endpoint, cache_dir=cache_dir)
    import pyarrow as pa

    table = pa.table(
        {
            "branch": pa.array([b.name for b in branches], pa.string()),
            "commit": pa.array([b.commit or "" for b in branches], pa.string()),
            "models": pa.array([", ".join(b.models) for b in branches], pa.string()),
        }
    )
    write_table(table, format, output)
    if origin == "cache":
        note(f"offline (HF_HUB_OFFLINE=1): branches of {repo} found in the Hugging Face cache only")
    matched = {m for b in branches for m in b.models}
    missing = [m for models in hub.registry_branches(repo).values() for m in models if m not in matched]
    if missing and origin == "hub":
        note(f"{len(missing)} registry model(s) have no branch in {repo}: {', '.join(missing)}")


def check_can_push(repo: str) -> None:
    """Refuse at once what a push could not do: a name that is not owner/name, or offline mode."""
    from qkdb.errors import HubError

    from qkdb.ingest import hub

    if repo.count("/") != 1 or not all(repo.split("/")):
        raise HubError(f"{repo!r} is not a Hub dataset repo: give owner/name", kind="usage")
    if hub.offline_now():
        raise HubError(f"offline (HF_HUB_OFFLINE=1): pushing to {repo} needs the network")


def push_folder(folder: Path, repo: str, branch: str, *, private: bool = False, force: bool = False,
                endpoint: str | None = None, after_capture: bool = False) -> None:
    """Push a capture folder and say what was done; after a capture, a failure also says how to push it again."""
    from qkdb.errors import HubError
    from qkdb.ingest import push_capture

    try:
        done = push_capture(folder, repo, branch, private=private, endpoint=endpoint, force=force)
    except HubError as exc:
        if not after_capture:
            raise
        raise HubError(f"{exc} (the capture is in {folder}: `qkdb hub push {folder} --repo {repo} --branch {branch}` "
                       "pushes it again)", kind=exc.kind) from None
    if done.note:
        note(f"note: {done.note}")
    if not done.changed:
        note(f"{repo}@{branch} already holds this capture, byte for byte: nothing uploaded (at {done.commit})")
    else:
        note(f"pushed {folder} to {repo}@{branch} in one commit {done.commit}: {len(done.added)} files uploaded"
             + (f", {len(done.deleted)} removed" if done.deleted else ""))
    note(f"next: qkdb ingest --repo {repo} --revision {branch}")


@hub_app.command("push")
def push(
    folder: Annotated[Path, typer.Argument(help="A capture in the sniffed-qk layout, with its qkdb_dataset.json (what `qkdb sniff` writes).", show_default=False)],
    repo: Annotated[str, typer.Option("--repo", help="Dataset repo to push to, owner/name (made if it does not exist).", show_default=False)],
    branch: Annotated[Optional[str], typer.Option("--branch", help="Branch to push to (default: the model's name).", show_default=False)] = None,
    private: Annotated[bool, typer.Option("--private", help="Make a new repo private.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a branch that holds something other than a capture.")] = False,
    endpoint: EndpointOption = None,
) -> None:
    """Push a capture folder to a branch of a Hub dataset repo, with a dataset card (what `qkdb sniff --push-to-hub` does)."""
    from qkdb.errors import InputError, UsageError
    from qkdb.ingest import read_metadata

    check_can_push(repo)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such capture folder", kind="not_found" if not folder.exists() else "input")
    name = branch or read_metadata(folder).get("model")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{folder} has no qkdb_dataset.json naming the model: give --branch")
    push_folder(folder, repo, name, private=private, force=force, endpoint=endpoint)


app.add_typer(hub_app, name="hub")

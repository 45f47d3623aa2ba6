"""`qkdb publish` and `qkdb pull`: a warehouse shared through a Hugging Face dataset repo (docs/sharing.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from qkdb import api
from qkdb.cli.app import app
from qkdb.cli.common import HomeOption, check_warehouse, home_dir, note

EndpointOption = Annotated[
    Optional[str],
    typer.Option("--endpoint", help="Hub URL (default: $HF_ENDPOINT, else https://huggingface.co).", show_default=False),
]
ModelsOption = Annotated[Optional[list[str]], typer.Option("--model", "-m", help="Only these models (repeatable; default: all).")]


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _say(quiet: bool):
    def progress(event: str, **info) -> None:
        if quiet:
            return
        if event == "findings":
            note(f"findings and figures of {info['models']} model(s) ...")
        elif event == "upload":
            note(f"comparing {info['files']} files ({_size(info['bytes'])}) with the branch, uploading what it lacks ...")
        elif event == "download":
            note(f"{info['files']} files ({_size(info['bytes'])}) through the Hugging Face cache ...")
        elif event == "model":
            note(f"added {info['model']}")

    return progress


@app.command()
def publish(
    repo: Annotated[str, typer.Argument(metavar="REPO", help="Dataset repo on the Hub, owner/name (made if it does not exist).", show_default=False)],
    branch: Annotated[str, typer.Option("--branch", "-b", help="Branch to publish to (made if it does not exist).")] = "main",
    model: ModelsOption = None,
    private: Annotated[bool, typer.Option("--private", help="Make a new repo private.")] = False,
    prune: Annotated[bool, typer.Option("--prune", help="Remove from the branch the models it holds that this publish leaves out.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Write over a branch that holds something other than a qkdb warehouse.")] = False,
    no_figures: Annotated[bool, typer.Option("--no-figures", help="No figures on the dataset card (faster; figures a branch held are removed).")] = False,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for an ingest of one of the models to finish.")] = 0.0,
    endpoint: EndpointOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the last line.")] = False,
    home: HomeOption = None,
) -> None:
    """Publish the warehouse's tables, manifest, findings and a dataset card to a Hub dataset repo, in one commit.

    Never the raw vectors (the warehouse has none). Files the branch already holds are not sent
    again: publishing unchanged models uploads nothing. Needs a token with write access
    (`hf auth login` or HF_TOKEN).
    """
    home = check_warehouse(home)
    done = api.publish(repo, branch=branch, models=model or None, private=private, prune=prune, force=force,
                       figures=not no_figures, wait=wait, home=home, endpoint=endpoint, progress=_say(quiet))
    if done.note:
        note(f"note: {done.note}")
    where = f"{repo}@{branch}"
    if not done.changed:
        note(f"{where} already holds these {len(done.models)} model(s), byte for byte: nothing uploaded, no commit "
             f"(at {done.commit})")
        return
    note(
        f"published {len(done.models)} model(s) to {where} in one commit {done.commit}: "
        f"{len(done.uploaded)} of {done.files} files uploaded ({_size(done.bytes_sent)} of {_size(done.bytes_total)})"
        + (f", {len(done.deleted)} removed" if done.deleted else "")
        + (" (new repo" + (", private)" if private else ")") if done.created_repo else "")
    )


@app.command()
def pull(
    ref: Annotated[str, typer.Argument(metavar="REPO[@REVISION]", help="A warehouse published with `qkdb publish`: owner/name, optionally @branch, tag or commit.", show_default=False)],
    model: ModelsOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace models this warehouse holds with other data.")] = False,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for another ingest of the same model.")] = 0.0,
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir", help="huggingface_hub cache (default: its own, shared with other HF tools).")] = None,
    endpoint: EndpointOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the last line.")] = False,
    home: HomeOption = None,
) -> None:
    """Add the models of a published warehouse to this one, each as an ingest adds it (atomically; never over other data unless --force).

    Through the Hugging Face cache: once pulled, HF_HUB_OFFLINE=1 works. When this warehouse then
    holds exactly the published models, its findings are compared with the publisher's.
    """
    from qkdb.sharing.pull import parse_ref

    repo, revision = parse_ref(ref)
    where = home_dir(home)  # (a file is refused before any request)
    done = api.pull(repo, revision, models=model or None, force=force, wait=wait, home=where, endpoint=endpoint,
                    cache_dir=cache_dir, progress=_say(quiet))
    for line in done.notes:
        note(f"note: {line}")
    if done.origin != "hub":
        note(f"offline: {done.repo}@{done.revision} read from the Hugging Face cache ({done.origin})")
    parts = []
    if done.added:
        parts.append(f"added {', '.join(done.added)}")
    if done.replaced:
        parts.append(f"replaced {', '.join(done.replaced)}")
    if done.unchanged:
        parts.append(f"already here with the same data: {', '.join(done.unchanged)}")
    note(f"pulled {done.repo}@{done.revision} ({done.commit}) into {done.home}: " + "; ".join(parts))
    if done.findings_match is True:
        note("findings: the same as the publisher's, row for row")
    elif done.findings_match is False:
        note("note: the findings computed here differ from the publisher's (findings/findings.parquet in the repo); "
             "another qkdb version computes them differently: see docs/sharing.md")

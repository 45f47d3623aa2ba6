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
            "commit": pa.array([(b.commit or "")[:12] for b in branches], pa.string()),
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


app.add_typer(hub_app, name="hub")

"""``qkdb publish``: a warehouse's tables, manifest, findings, card and figures to a Hub dataset branch, in one commit.

The branch then holds exactly the models published (docs/sharing.md): their files of every table,
byte for byte the home's (never a raw vector: the home has none), the manifest, the findings and
their intervals as the publisher computed them on those models, a card with the findings table, and
a few figures. Only files whose bytes the branch does not have already are uploaded, so publishing
unchanged models again uploads nothing and makes no commit.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from qkdb import warehouse
from qkdb.errors import HubError, WarehouseError
from qkdb.sharing import card, manifest
from qkdb.sharing.layout import CARD, FIGURES, FINDINGS, INTERVALS, MANIFEST, model_of

Progress = Callable[..., None]


@dataclass
class Published:
    """What :func:`publish` did: the branch's commit afterwards and what was uploaded."""

    repo: str
    branch: str
    commit: str
    models: list[str]
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    files: int = 0  # files the branch holds for this publish
    bytes_total: int = 0  # their size
    figures: list[str] = field(default_factory=list)
    created_repo: bool = False
    note: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.uploaded or self.deleted)


def _parquet_bytes(table) -> bytes:
    """A table as parquet bytes, the same bytes for the same rows (no timestamp is written)."""
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _derived(con, models: list[str], everything: bool) -> tuple[list[dict], bytes, bytes, dict]:
    """The findings' rows (as dicts and as parquet), the intervals' parquet, and the params row, for ``models``."""
    if everything:
        source = warehouse.findings_source(con)
        if source == "findings" and not warehouse.intervals_current(con):
            warehouse.ensure_current(con)
    else:
        warehouse.restrict_models(con, models)  # (recomputes the intervals on these models only)
        source = "findings"
    findings = con.sql(f"select * from {source} order by id, scope").to_arrow_table()
    columns = [r[0] for r in con.execute("describe finding_intervals").fetchall()]
    keep = ", ".join(f'"{c}"' for c in columns if c != "computed_at")  # (when: not what; it would change every publish)
    intervals = con.sql(f"select {keep} from finding_intervals order by id, scope, stat").to_arrow_table()
    params = con.execute("select * from params").fetchall()
    names = [d[0] for d in con.description]
    return findings.to_pylist(), _parquet_bytes(findings), _parquet_bytes(intervals), dict(zip(names, params[0])) if params else {}


def _figures(con, models: list[str], progress: Progress) -> list[tuple[str, bytes]]:
    """The card's figures the data supports, as PNG bytes."""
    from qkdb.charts import chart, render
    from qkdb.charts.data import MAX_MODEL_ROWS
    from qkdb.errors import ChartError

    # Models named to a figure are all drawn, a row each: past the figures' limit of rows the card
    # draws what `qkdb chart` draws of the (restricted) connection's models (a 472-model publish
    # failed on depth-heatmap-rk's 9,440 rows).
    named = models if len(models) <= MAX_MODEL_ROWS else None
    out = []
    for name in card.FIGURES:
        try:
            png = render.render(chart(name, con, models=named), "png")
        except ChartError:
            continue  # (not supported by these models: the card shows the others)
        out.append((name, png))
        progress("figure", name=name)
    return out


def _check_branch(repo: str, branch: str, models: list[str], prune: bool, force: bool):
    """What refuses to write over a branch: files that are not a warehouse, or models this publish leaves out."""

    def check(remote: dict) -> None:
        ours = {CARD, ".gitattributes"}
        if MANIFEST not in remote and not force:
            others = sorted(p for p in remote if p not in ours)
            if others:
                shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
                raise HubError(f"{repo}@{branch} holds files that are not a qkdb warehouse ({shown}): publish to "
                               "another --branch or repo, or pass --force to replace them", kind="input")
        left_out = sorted({m for p in remote if (m := model_of(p)) is not None} - set(models))
        if left_out and not prune:
            raise HubError(
                f"{repo}@{branch} holds model(s) this publish leaves out: {', '.join(left_out)}; publish them too "
                "(--model), pass --prune to remove them from the branch, or publish to another --branch", kind="input"
            )

    return check


def publish(home: Path, repo: str, branch: str = "main", *, models: list[str] | None = None, private: bool = False,
            prune: bool = False, force: bool = False, figures: bool = True, wait: float = 0.0,
            endpoint: str | None = None, token=None, progress: Progress | None = None) -> Published:
    """Publish ``models`` of the warehouse at ``home`` (default: every model) to ``branch`` of the dataset ``repo``.

    Parameters
    ----------
    prune
        Remove from the branch the models it holds that are not published now (refused otherwise).
    force
        Write over a branch that holds something other than a qkdb warehouse.
    figures
        Render the card's figures (a second or two each).
    wait
        Seconds to wait for an ingest of one of the models to finish (their locks are held until the commit).

    Raises
    ------
    WarehouseError
        No warehouse, or a model that is not in it (not_found).
    HubError
        See :func:`qkdb.ingest.sources.hub_repo.commit_files`; also a branch that holds something else
        (input) or models left out without ``prune`` (input).
    """
    from qkdb.ingest import hub_repo

    progress = progress or (lambda *a, **k: None)
    store = warehouse.store
    present = store.ingested_models(home)
    if not present:
        raise WarehouseError(f"no model to publish in {home} (nothing was ingested there)", kind="not_found")
    chosen = list(dict.fromkeys(models)) if models else present
    missing = [m for m in chosen if m not in present]
    if missing:
        raise WarehouseError(f"not in the warehouse at {home}: {', '.join(missing)} (it holds {', '.join(present)})",
                             kind="not_found")
    chosen = sorted(chosen)
    made: dict = {}

    def contents() -> dict[str, Path | bytes]:
        """Every file of the publish (after the branch was checked: a refusal comes before this work)."""
        files: dict[str, Path | bytes] = {}
        per_model = {}
        for m in chosen:
            per_model[m] = manifest.model_files(home, m)
            files.update(per_model[m])
        progress("findings", models=len(chosen))
        con = warehouse.open_catalog(home, read_only=True)
        try:
            rows, findings_pq, intervals_pq, params = _derived(con, chosen, set(chosen) == set(present))
            rendered = _figures(con, chosen, progress) if figures else []
        finally:
            con.close()
        files[FINDINGS], files[INTERVALS] = findings_pq, intervals_pq
        shown = []
        for name, png in rendered:
            files[f"{FIGURES}/{name}.png"] = png
            shown.append((name, f"{FIGURES}/{name}.png"))
        man = manifest.build(home, chosen, params, per_model)
        files[MANIFEST] = manifest.dumps(man)
        files[CARD] = card.warehouse_card(man, rows, shown, repo, branch).encode()
        made.update(files=len(files), figures=[n for n, _ in shown],
                    total=sum(len(v) if isinstance(v, bytes) else os.path.getsize(v) for v in files.values()))
        progress("upload", files=made["files"], bytes=made["total"])
        return files

    # The models' locks, held until the commit: an ingest or removal of one of them meanwhile would
    # replace the files being uploaded, or make the findings describe other files than those sent.
    with contextlib.ExitStack() as locks:
        for m in chosen:
            locks.callback(store.acquire_model(home, m, wait).release)
        done = hub_repo.commit_files(
            repo, branch, contents, message=f"qkdb publish: {len(chosen)} model(s)",
            description="Models: " + ", ".join(chosen), private=private, endpoint=endpoint, token=token,
            check=_check_branch(repo, branch, chosen, prune, force),
        )
    return Published(repo, branch, done.commit, chosen, done.added, done.deleted, done.bytes_sent,
                     made["files"], made["total"], made["figures"], done.created_repo, done.note)

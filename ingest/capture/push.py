"""Push a finished capture to a branch of a Hub dataset, as qk-sniffer does: the sniffed-qk layout and a dataset card.

The branch then holds exactly the capture folder — every head folder ``l{LL}h{HH}{q|k}/data.parquet``
at the path it has in the folder, the ``qkdb_dataset.json`` that records the model's facts and how it
was captured, any other top-level file of the capture (e.g. a simulation's ``planted.json``) — and a
``README.md`` card written from that metadata. ``qkdb ingest --repo REPO --revision BRANCH`` reads the
branch back as ``qkdb ingest --path FOLDER`` reads the folder: the same facts, the same numbers.

One commit or none (:func:`qkdb.ingest.sources.hub_repo.commit_files`); pushing the same capture
again uploads nothing. Hidden files and folders are never pushed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from qkdb.errors import HubError, InputError
from qkdb.ingest.sources.hub_repo import Committed, commit_files
from qkdb.ingest.sources.layout import METADATA_FILE, discover, read_metadata

CARD = "README.md"


def capture_files(folder: Path) -> dict[str, Path]:
    """Repo path -> local file of everything a push sends (the card aside): head files and top-level files."""
    found = discover(folder)  # (a folder with no head is refused here, naming it)
    files = {f.path.relative_to(folder).as_posix(): f.path for f in (*found.queries.values(), *found.keys.values())}
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and not entry.name.startswith(".") and entry.name != CARD:
            files[entry.name] = entry
    return dict(sorted(files.items()))


def push_capture(folder: str | os.PathLike, repo: str, branch: str, *, private: bool = False,
                 endpoint: str | None = None, token=None, force: bool = False) -> Committed:
    """Make ``branch`` of the dataset ``repo`` hold the capture in ``folder`` and its card, in one commit.

    Parameters
    ----------
    folder
        A dataset in the sniffed-qk layout, with its ``qkdb_dataset.json`` (what ``qkdb sniff`` writes).
    repo, branch
        The dataset repo (made if missing; ``private`` then) and the branch (made from the default
        branch if missing).
    force
        Replace a branch that holds something other than a capture (no ``qkdb_dataset.json``).

    Raises
    ------
    InputError
        The folder is not a capture (no head folders, no metadata).
    HubError
        See :func:`~qkdb.ingest.sources.hub_repo.commit_files`; also a branch holding something
        else than a capture, without ``force``.
    """
    folder = Path(folder)
    files: dict[str, Path | bytes] = dict(capture_files(folder))
    metadata = read_metadata(folder)
    if not metadata:
        raise InputError(f"{folder}: no {METADATA_FILE}: push a capture written by `qkdb sniff` (or `qkdb simulate`), "
                         "whose facts let `qkdb ingest --repo` read it back without options")
    files[CARD] = capture_card(metadata, files, repo, branch).encode()

    def check(remote: dict) -> None:
        others = sorted(p for p in remote if p not in (".gitattributes", CARD))
        if others and METADATA_FILE not in remote and not force:
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise HubError(f"{repo}@{branch} holds files that are not a qkdb capture ({shown}): push to another branch, "
                           "or pass --force to replace them", kind="input")

    model = metadata.get("model", folder.name)
    return commit_files(repo, branch, files, message=f"qkdb sniff: {model}",
                        description=f"Queries and keys of {metadata.get('hf_model') or model}, captured by qkdb sniff.",
                        private=private, endpoint=endpoint, token=token, check=check)


def _get(d: dict, *keys, default=None):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def _rope(meta: dict) -> str:
    if meta.get("rope") == "none":
        return "none (no rotary position embedding)"
    parts = [f"theta {meta['rope_theta']:g}" if isinstance(meta.get("rope_theta"), (int, float)) else "theta unknown",
             f"pairing {meta.get('rope_pairing') or 'half'}"]
    scaling = meta.get("rope_scaling")
    parts.append(f"scaling {json.dumps(scaling, sort_keys=True) if scaling else 'none'}")
    if meta.get("layer_rope_theta"):
        parts.append("per-layer bases (see the metadata)")
    nope = meta.get("nope_layers") or []
    parts.append(f"NoPE layers {', '.join(map(str, nope)) if nope else 'none'}")
    return "; ".join(parts)


def capture_card(meta: dict, files: dict, repo: str, branch: str) -> str:
    """The dataset card of a capture: what was captured, from which texts, how it was sampled, with which versions.

    Written from ``qkdb_dataset.json`` alone (keys it lacks are said as unknown) and the files pushed;
    no timestamp, so the same capture gives the same card.
    """
    capture = meta.get("capture") if isinstance(meta.get("capture"), dict) else {}
    texts = capture.get("texts") if isinstance(capture.get("texts"), dict) else {}
    positions = capture.get("positions")
    heads = [p for p in files if p.endswith("/data.parquet")]
    n_q = sum(1 for p in heads if p.split("/")[-2].endswith("q"))
    model = meta.get("model", "?")
    hf_model = meta.get("hf_model") or "unknown"
    ratio = meta.get("gqa_ratio")
    if ratio is None and isinstance(meta.get("n_q_heads"), int) and isinstance(meta.get("n_kv_heads"), int) and meta["n_kv_heads"]:
        ratio = meta["n_q_heads"] // meta["n_kv_heads"]
    versions = ", ".join(f"{k.removesuffix('_version')} {capture[k]}" for k in sorted(capture) if k.endswith("_version"))
    text_line = (
        f"{texts.get('n_texts', '?')} texts from `{texts.get('source', '?')}`, {texts.get('n_tokens', '?')} tokens"
        + (", documents packed into full windows" if texts.get("pack") else "")
        + (f", windows of {capture['max_length']} tokens" if capture.get("max_length") else "")
    ) if texts else "unknown"
    if isinstance(positions, dict):
        sampler = (
            f"{positions.get('policy', '?')} positions, first bucket {positions.get('min_bucket_size', '?')} tokens, "
            f"{positions.get('vectors_per_head', '?')} vectors per head file"
        )
    else:  # (a simulation: its sampling by name, and the vectors per file)
        sampler = f"{positions or 'unknown'} positions" + (f", {capture['vectors']} vectors per head file" if "vectors" in capture else "")
    sample = (
        f"{n_q} query heads of {meta.get('n_layers', '?')} × {meta.get('n_q_heads', '?')}"
        + (f", seed {capture['seed']}" if "seed" in capture else "")
        + (f" ({capture['q_heads_sampling']})" if capture.get("q_heads_sampling") else "")
        + f", and the {len(heads) - n_q} key heads they read"
    )
    rows = [
        ("model", f"`{model}` (family {meta.get('family', '?')})"),
        ("weights", f"{hf_model}" + (f" @ {meta['model_revision']}" if meta.get("model_revision") else "")
         + (f" ({capture['gguf_file']})" if capture.get("gguf_file") else "")),
        ("architecture", f"{meta.get('n_layers', '?')} layers, {meta.get('n_q_heads', '?')} query heads, "
                         f"{meta.get('n_kv_heads', '?')} KV heads (GQA ratio {ratio if ratio is not None else '?'}), head dim {meta.get('head_dim', '?')}"),
        ("RoPE", _rope(meta)),
        ("vectors", ("before RoPE" if capture.get("pre_rope") else "after RoPE")
         + (f", stored as {capture['dtype']}" if capture.get("dtype") else "")),
        ("texts", text_line),
        ("sampler", sampler),
        ("head sample", sample),
        ("captured by", f"{capture.get('tool', meta.get('source', 'qkdb'))}" + (f"; {versions}" if versions else "")),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"""---
tags:
- qkdb
- sniffed-qk
- interpretability
- attention
---

# {model}: post-RoPE queries and keys (sniffed-qk layout)

Query and key vectors of **{hf_model}**'s attention heads, as the model computed them, captured with
[qkdb](https://pypi.org/project/qkdb/) and stored in the sniffed-qk layout: one folder per head,
`l{{LL}}h{{HH}}q` (query head) or `l{{LL}}h{{HH}}k` (key/value head), each with a `data.parquet` of
`bucket`, `example_id`, `position`, `vector` (the head_dim values) and `sliding_window`; query files of
captures that recorded it also hold `lse`, each query's softmax normaliser over every key it attended to
(a captured key's attention weight is `exp(scaling · q·k − lse)`; `capture.normaliser` in
`qkdb_dataset.json` says how, and the weights' sha256 is `capture.weights_sha256`).

| | |
|---|---|
{table}

## Use it

```
qkdb ingest --repo {repo} --revision {branch}
```

reads this branch into a qkdb warehouse (the facts come from `{METADATA_FILE}`: no other option is
needed) and computes every per-head metric of the positional-geometry studies.

## Everything the capture recorded

```json
{json.dumps(meta, indent=2, sort_keys=True)}
```
"""

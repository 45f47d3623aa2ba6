"""``qkdb sniff``: capture post-RoPE queries and keys of a transformers model (extra ``sniff``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from qkdb.cli.progress import Bars

from qkdb.cli.app import app
from qkdb.cli.common import Dtype, note


class Positions(str, Enum):
    log_uniform = "log-uniform"
    uniform = "uniform"


class ModelDtype(str, Enum):
    auto = "auto"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


class Attn(str, Enum):
    auto = "auto"
    sdpa = "sdpa"
    eager = "eager"
    flash_attention_2 = "flash_attention_2"


# command-line parameter -> SniffOptions field, for the options that decide what a capture holds
FIELDS = {
    "model_path": "model_path", "gguf": "gguf", "text": "text", "text_field": "text_field", "texts": "n_texts",
    "max_length": "max_length", "no_pack": "pack", "q_heads": "q_heads", "vectors_per_head": "vectors_per_head",
    "dense": "dense", "keep_first": "keep_first", "positions": "positions", "min_bucket_size": "min_bucket_size", "seed": "seed", "pre_rope": "pre_rope",
    "keep_position_scaling": "keep_position_scaling", "unchecked": "unchecked", "dtype": "dtype",
    "tokens": "token_strings", "no_lse": "normaliser", "model": "model_name", "family": "family", "hf_model": "hf_model",
    "model_revision": "model_revision", "device": "device", "model_dtype": "model_dtype", "device_map": "device_map",
    "attn": "attn", "check_rows": "check_rows", "dataset": "dataset", "config": "dataset_config",
    "split": "dataset_split", "dataset_revision": "dataset_revision", "id_column": "id_column",
    "min_tokens": "min_tokens", "like": "like", "threads": "threads", "force": "force",
}
# what --like takes from the capture it matches: giving them too is a contradiction
LIKE_TAKES = ("text", "text_field", "texts", "max_length", "no_pack", "q_heads", "vectors_per_head", "dense",
              "keep_first", "positions",
              "min_bucket_size", "dataset", "config", "split", "dataset_revision", "id_column", "min_tokens")


def _flag(param: str) -> str:
    return {"texts": "--texts", "no_pack": "--no-pack", "model": "--model", "config": "--config",
            "split": "--split", "tokens": "--tokens"}.get(param, "--" + param.replace("_", "-"))


def _check_rows(value: str) -> int | None:
    from qkdb.errors import UsageError

    if value.strip().lower() == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--check-rows {value!r}: give a number of rows per head file and text, or 'all'") from None
    if n < 1:
        raise UsageError("--check-rows must be positive (or 'all')")
    return n


@app.command("sniff")
def sniff_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to write (sniffed-qk layout); with several --revision, one folder per revision inside it.")],
    model_path: Annotated[Optional[str], typer.Option("--model-path", help="A local Hugging Face model folder, or a Hub model id owner/name (read through the Hugging Face cache).", show_default=False)] = None,
    gguf: Annotated[Optional[Path], typer.Option("--gguf", help="A GGUF model file (tokenizer read from it too).", show_default=False)] = None,
    revision: Annotated[Optional[list[str]], typer.Option("--revision", help="Revision of a Hub model (branch such as step1000, tag or commit). Several: a series, one capture per revision, paired head by head and position by position.", show_default=False)] = None,
    text: Annotated[str, typer.Option("--text", help="'pydoc' (built-in corpus), a .txt/.md/.jsonl file or a folder of them; or 'random' / 'repeated': Gu et al.'s controls for attention sinks, --max-length tokens drawn uniformly (seeded) from the vocabulary less its special tokens, or one such token repeated (100 texts unless --texts; docs/attention.md).")] = "pydoc",
    dataset: Annotated[Optional[str], typer.Option("--dataset", help="Texts from a Hugging Face dataset repo (parquet or jsonl files): one row, one text.", show_default=False)] = None,
    config: Annotated[Optional[str], typer.Option("--config", help="With --dataset: the dataset's config (default: its default).", show_default=False)] = None,
    split: Annotated[Optional[str], typer.Option("--split", help="With --dataset: the split (default: train, or the only one).", show_default=False)] = None,
    dataset_revision: Annotated[Optional[str], typer.Option("--dataset-revision", help="With --dataset: its branch, tag or commit (default main).", show_default=False)] = None,
    text_field: Annotated[str, typer.Option("--text-field", "--text-column", help="Field (.jsonl) or column (--dataset) holding the text.")] = "text",
    id_column: Annotated[Optional[str], typer.Option("--id-column", help="With --dataset: the column of each row's id, recorded as example_id (docs/sniff.md: how string ids map).", show_default=False)] = None,
    min_tokens: Annotated[int, typer.Option("--min-tokens", min=1, help="Skip documents (dataset rows) shorter than N tokens (without packing).")] = 1,
    texts: Annotated[Optional[int], typer.Option("--texts", "--max-texts", min=1, help="Use at most N texts (token windows, or dataset rows); default all.", show_default=False)] = None,
    max_length: Annotated[int, typer.Option("--max-length", min=2, help="Tokens per text (longer ones are cut).")] = 2048,
    no_pack: Annotated[bool, typer.Option("--no-pack", help="One text per document (truncated) instead of packing documents into full windows (always so with --dataset).")] = False,
    q_heads: Annotated[int, typer.Option("--q-heads", min=1, help="Seeded sample of query heads across layers (all when the model has fewer).")] = 300,
    vectors_per_head: Annotated[int, typer.Option("--vectors-per-head", min=1, help="Vectors kept per head file, spread evenly over the texts.")] = 4096,
    dense: Annotated[bool, typer.Option("--dense", help="Keep every position of every text (short texts, for sink studies; docs/attention.md): --vectors-per-head becomes texts × --max-length.")] = False,
    keep_first: Annotated[int, typer.Option("--keep-first", min=0, help="Always keep positions 0..N-1 of every text in every head file (token 0 and the other sink candidates), the rest drawn by --positions; 0: draw them all.")] = 4,
    positions: Annotated[Positions, typer.Option("--positions", help="Position sampling: equal draws per doubling bucket (log-uniform) or uniform.")] = Positions.log_uniform,
    min_bucket_size: Annotated[int, typer.Option("--min-bucket-size", min=1, help="Width of the first position bucket [0, m).")] = 128,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the head and position samples and of the check's rows.")] = 0,
    like: Annotated[Optional[Path], typer.Option("--like", help="Take the texts, head files and positions of this earlier capture (another checkpoint: paired captures).", show_default=False)] = None,
    device: Annotated[str, typer.Option("--device", help="auto (the first GPU, else the CPU), cpu, cuda, cuda:N or mps.")] = "auto",
    model_dtype: Annotated[ModelDtype, typer.Option("--model-dtype", help="Dtype the model computes in (auto: float32 on the CPU, bfloat16 on a GPU that has it). Not the stored --dtype.")] = ModelDtype.auto,
    device_map: Annotated[Optional[str], typer.Option("--device-map", help="'auto': spread a model too large for one GPU over the visible GPUs (accelerate).", show_default=False)] = None,
    attn: Annotated[Attn, typer.Option("--attn", help="Attention the capture hands on to (auto: sdpa, eager where the model needs it).")] = Attn.auto,
    check_rows: Annotated[str, typer.Option("--check-rows", help="Rows per head file and text compared with the layer's projection after the first text (which is checked in full); 'all' for every row.")] = "64",
    pre_rope: Annotated[bool, typer.Option("--pre-rope", help="Store vectors before RoPE instead of after.")] = False,
    keep_position_scaling: Annotated[bool, typer.Option("--keep-position-scaling", help="Keep position-dependent factors that are not RoPE (Ministral3's query scale) in the stored vectors instead of dividing them out; recorded either way.")] = False,
    unchecked: Annotated[bool, typer.Option("--unchecked", help="Do not compare the stored vectors with the layers' projections (for architectures the check cannot follow); recorded in the metadata. The RoPE layout is still recorded where the first text's rows establish it, and left null where they do not.")] = False,
    dtype: Annotated[Dtype, typer.Option("--dtype", help="Stored vector type.")] = Dtype.float32,
    tokens: Annotated[bool, typer.Option("--tokens", help="Also store each vector's token (token_str column).")] = False,
    no_lse: Annotated[bool, typer.Option("--no-lse", help="Leave out each query row's softmax normaliser (column lse, docs/attention.md): faster when a large share of positions is sampled.")] = False,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model name recorded for ingest (default: the registry's, else from the file, folder or repo name; with several --revision, a prefix).", show_default=False)] = None,
    family: Annotated[Optional[str], typer.Option("--family", help="Family recorded for ingest (default: the registry's family when the model is known to it, else the config's model_type).", show_default=False)] = None,
    hf_model: Annotated[Optional[str], typer.Option("--hf-model", help="Upstream model id to record, e.g. HuggingFaceTB/SmolLM2-135M-Instruct (default: the repo id when the files say it, else the file or folder name).", show_default=False)] = None,
    model_revision: Annotated[Optional[str], typer.Option("--model-revision", help="Revision of the weights to record (of a local folder; a Hub model's is --revision).", show_default=False)] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="torch CPU threads (default: torch's choice).", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a previous capture in --out; discard a partial capture of other options.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the interrupted capture in --out with the options it was started with (the same command continues it too).")] = False,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="With several --revision: one Ray task per revision on a Ray cluster ('local', 'auto', HOST:PORT or ray://HOST:PORT; docs/cluster.md).", show_default=False)] = None,
    push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", metavar="REPO", help="Then push the capture to this Hub dataset repo (owner/name), as a branch with a dataset card (docs/sharing.md).", show_default=False)] = None,
    branch: Annotated[Optional[str], typer.Option("--branch", help="The branch --push-to-hub writes (default: the model's name).", show_default=False)] = None,
    private: Annotated[bool, typer.Option("--private", help="With --push-to-hub: make a new repo private.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Capture queries and keys of a causal LM (local folder, Hub model or GGUF) into the sniffed-qk layout."""
    from qkdb.errors import UsageError
    from qkdb.ingest import SniffOptions, resume_options, sniff

    revisions = list(revision or [])
    if (branch is not None or private) and push_to_hub is None:
        raise UsageError("--branch and --private go with --push-to-hub REPO")
    if model_revision is not None and revisions:
        raise UsageError("--model-revision records a local folder's revision; a Hub model's is --revision: give one")
    if len(revisions) > 1 and branch is not None:
        raise UsageError("--branch names one branch; a series pushes each revision to a branch of its model's name")
    if cluster is not None and len(revisions) < 2:
        raise UsageError("--cluster runs a series (several --revision) as one task per revision")
    if cluster is not None and resume:
        raise UsageError("--resume continues one capture; a series continues when its command runs again")
    given = _given(ctx)
    if like is not None:
        clash = [p for p in LIKE_TAKES if p in given]
        if clash:
            raise UsageError(f"--like takes the texts, heads and positions from {like}: drop "
                             f"{', '.join(_flag(p) for p in clash)}")
    if push_to_hub is not None:
        from qkdb.cli.hub import check_can_push

        check_can_push(push_to_hub)  # (before the capture: offline, or a malformed name, is said at once)

    values = {
        "model_path": model_path, "gguf": gguf, "text": text, "text_field": text_field, "n_texts": texts,
        "max_length": max_length, "pack": not no_pack and dataset is None, "q_heads": q_heads,
        "vectors_per_head": vectors_per_head, "dense": dense, "keep_first": keep_first, "positions": positions.value, "min_bucket_size": min_bucket_size,
        "seed": seed, "pre_rope": pre_rope, "keep_position_scaling": keep_position_scaling, "unchecked": unchecked,
        "dtype": dtype.value, "token_strings": tokens, "normaliser": not no_lse, "model_name": model, "family": family, "hf_model": hf_model,
        "model_revision": model_revision if model_revision is not None else (revisions[0] if len(revisions) == 1
                                                                             else None),
        "threads": threads, "force": force, "device": device, "model_dtype": model_dtype.value,
        "device_map": device_map, "attn": attn.value, "check_rows": _check_rows(check_rows), "dataset": dataset,
        "dataset_config": config, "dataset_split": split, "dataset_revision": dataset_revision,
        "id_column": id_column, "min_tokens": min_tokens, "like": like,
    }
    if resume:
        # the partial capture's options, with those given here on top (a difference is refused by name)
        on_top = {FIELDS[p]: values[FIELDS[p]] for p in given if p in FIELDS}
        if "revision" in given and len(revisions) == 1:
            on_top["model_revision"] = revisions[0]
        options = resume_options(out, **on_top)
    else:
        options = SniffOptions(out=out, **values)
    _quiet_transformers()
    if len(revisions) > 1:
        _series(options, revisions, cluster, quiet, push_to_hub, private)
        return
    options.check()  # fail on bad options before the slow imports
    with _progress(quiet) as progress:
        result = sniff(options, progress=progress)
    meta = result.metadata
    for line in result.notes:
        note(f"note: {line}")
    note(result.rope)
    resumed = f" (continued after {result.resumed_from} complete texts)" if result.resumed_from else ""
    note(
        f"sniffed {meta['model']}: {len(result.query_heads)} query heads and {len(result.key_heads)} key heads, "
        f"{result.n_vectors} vectors from {result.n_texts} texts in {result.seconds:.0f}s into {result.out}{resumed}"
    )
    if push_to_hub is None:
        note(f"next: qkdb ingest --path {result.out}")
        return
    from qkdb.cli.hub import push_folder

    push_folder(result.out, push_to_hub, branch or meta["model"], private=private, after_capture=True)


def _given(ctx: typer.Context) -> set[str]:
    """The parameters given on the command line (not left at their defaults)."""
    # (by name: typer may carry its own copy of click, whose enum is not click's)
    names = [p.name for p in ctx.command.params if p.name]
    return {name for name in names if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"}


def _series(options, revisions: list[str], cluster: str | None, quiet: bool, push_to_hub: str | None,
            private: bool) -> None:
    from qkdb.errors import SniffError
    from qkdb.ingest import sniff_series

    failed: list = []
    done = []
    with _progress(quiet) as progress:
        for outcome in sniff_series(options, revisions, cluster=cluster, progress=progress):
            if outcome.error is not None:
                failed.append(outcome)
                note(f"error: revision {outcome.revision}: {outcome.error}")
                continue
            for line in outcome.notes:
                note(f"note: {outcome.revision}: {line}")
            meta = outcome.metadata or {}
            what = "already captured" if outcome.skipped else "sniffed"
            note(f"{outcome.revision}: {what} {meta.get('model')} into {outcome.out}")
            done.append(outcome)
    if push_to_hub is not None:
        from qkdb.cli.hub import push_folder

        for outcome in done:
            push_folder(outcome.out, push_to_hub, (outcome.metadata or {}).get("model", outcome.revision),
                        private=private, after_capture=True)
    if failed:
        kinds = {o.kind for o in failed}
        raise SniffError(f"{len(failed)} of {len(revisions)} revisions failed "
                         f"({', '.join(o.revision for o in failed)}); run the command again to capture them",
                         kind=kinds.pop() if len(kinds) == 1 else "internal")
    note(f"next: qkdb ingest {' '.join(f'--path {o.out}' for o in done)}")


def _quiet_transformers() -> None:
    # transformers' warnings (e.g. long token sequences while packing) are noise here
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError:
        pass  # sniff() reports the missing extra


class _progress:
    """Sniff's progress events on stderr (bars on a terminal, plain lines elsewhere)."""

    def __init__(self, quiet: bool) -> None:
        self.bars = Bars(quiet)

    def __enter__(self):
        self.bars.__enter__()
        return self.callback

    def __exit__(self, *exc) -> None:
        self.bars.__exit__(*exc)

    def callback(self, event: str, **info) -> None:
        if event == "load":
            self.bars.message(f"loading {info['what']}")
        elif event == "plan":
            done = f"; continuing after {info['done']} complete texts" if info.get("done") else ""
            self.bars.message(f"{info['texts']} texts, {info['query_heads']} query heads, "
                              f"{info['key_heads']} key heads{done}")
        elif event == "revision":
            self.bars.message(f"revision {info['revision']} into {info['out']}")
        elif event == "cluster":
            self.bars.message(f"{info['tasks']} tasks on the cluster ({info['gpus_per_task']} GPU each)")
        elif event in ("text", "write"):
            label = "forward passes" if event == "text" else "writing heads"
            self.bars.update(event, label, info["done"], info["total"], f"{info['done']}/{info['total']}")

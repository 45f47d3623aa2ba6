"""``qkdb sniff``: capture post-RoPE queries and keys of a local transformers model (extra ``sniff``)."""

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


@app.command("sniff")
def sniff_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to write (sniffed-qk layout).")],
    model_path: Annotated[Optional[Path], typer.Option("--model-path", help="A local Hugging Face model folder.", show_default=False)] = None,
    gguf: Annotated[Optional[Path], typer.Option("--gguf", help="A GGUF model file (tokenizer read from it too).", show_default=False)] = None,
    text: Annotated[str, typer.Option("--text", help="'pydoc' (built-in corpus), or a .txt/.md/.jsonl file or a folder of them.")] = "pydoc",
    text_field: Annotated[str, typer.Option("--text-field", help="Field holding the text in .jsonl lines.")] = "text",
    texts: Annotated[Optional[int], typer.Option("--texts", min=1, help="Use at most N texts (token windows); default all.", show_default=False)] = None,
    max_length: Annotated[int, typer.Option("--max-length", min=2, help="Tokens per text window.")] = 2048,
    no_pack: Annotated[bool, typer.Option("--no-pack", help="One text per document (truncated) instead of packing documents into full windows.")] = False,
    q_heads: Annotated[int, typer.Option("--q-heads", min=1, help="Seeded sample of query heads across layers (all when the model has fewer).")] = 300,
    vectors_per_head: Annotated[int, typer.Option("--vectors-per-head", min=1, help="Vectors kept per head file, spread evenly over the texts.")] = 4096,
    positions: Annotated[Positions, typer.Option("--positions", help="Position sampling: equal draws per doubling bucket (log-uniform) or uniform.")] = Positions.log_uniform,
    min_bucket_size: Annotated[int, typer.Option("--min-bucket-size", min=1, help="Width of the first position bucket [0, m).")] = 128,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the head and position samples.")] = 0,
    pre_rope: Annotated[bool, typer.Option("--pre-rope", help="Store vectors before RoPE instead of after.")] = False,
    keep_position_scaling: Annotated[bool, typer.Option("--keep-position-scaling", help="Keep position-dependent factors that are not RoPE (Ministral3's query scale) in the stored vectors instead of dividing them out; recorded either way.")] = False,
    unchecked: Annotated[bool, typer.Option("--unchecked", help="Do not compare the stored vectors with the layers' projections (for architectures the check cannot follow); recorded in the metadata. The RoPE layout is still recorded where the first text's rows establish it, and left null where they do not.")] = False,
    dtype: Annotated[Dtype, typer.Option("--dtype", help="Stored vector type.")] = Dtype.float32,
    tokens: Annotated[bool, typer.Option("--tokens", help="Also store each vector's token (token_str column).")] = False,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model name recorded for ingest (default: from the file or folder name).", show_default=False)] = None,
    family: Annotated[Optional[str], typer.Option("--family", help="Family recorded for ingest (default: the registry's family when the model is known to it, else the config's model_type).", show_default=False)] = None,
    hf_model: Annotated[Optional[str], typer.Option("--hf-model", help="Upstream model id to record, e.g. HuggingFaceTB/SmolLM2-135M-Instruct (default: the repo id when the files say it, else the file or folder name).", show_default=False)] = None,
    model_revision: Annotated[Optional[str], typer.Option("--model-revision", help="Revision of the weights to record.", show_default=False)] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="torch CPU threads (default: torch's choice).", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a previous capture in --out.")] = False,
    push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", metavar="REPO", help="Then push the capture to this Hub dataset repo (owner/name), as a branch with a dataset card (docs/sharing.md).", show_default=False)] = None,
    branch: Annotated[Optional[str], typer.Option("--branch", help="The branch --push-to-hub writes (default: the model's name).", show_default=False)] = None,
    private: Annotated[bool, typer.Option("--private", help="With --push-to-hub: make a new repo private.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Capture queries and keys of a causal LM (local folder or GGUF) into the sniffed-qk layout."""
    from qkdb.ingest import SniffOptions, sniff

    if (branch is not None or private) and push_to_hub is None:
        from qkdb.errors import UsageError

        raise UsageError("--branch and --private go with --push-to-hub REPO")
    if push_to_hub is not None:
        from qkdb.cli.hub import check_can_push

        check_can_push(push_to_hub)  # (before the capture: offline, or a malformed name, is said at once)

    options = SniffOptions(
        out=out, model_path=model_path, gguf=gguf, text=text, text_field=text_field, n_texts=texts,
        max_length=max_length, pack=not no_pack, q_heads=q_heads, vectors_per_head=vectors_per_head,
        positions=positions.value, min_bucket_size=min_bucket_size, seed=seed, pre_rope=pre_rope,
        keep_position_scaling=keep_position_scaling, unchecked=unchecked, dtype=dtype.value, token_strings=tokens,
        model_name=model, family=family, hf_model=hf_model, model_revision=model_revision, force=force,
        threads=threads,
    )
    options.check()  # fail on bad options before the slow imports
    _quiet_transformers()
    with _progress(quiet) as progress:
        result = sniff(options, progress=progress)
    meta = result.metadata
    for line in result.notes:
        note(f"note: {line}")
    note(result.rope)
    note(
        f"sniffed {meta['model']}: {len(result.query_heads)} query heads and {len(result.key_heads)} key heads, "
        f"{result.n_vectors} vectors from {result.n_texts} texts in {result.seconds:.0f}s into {result.out}"
    )
    if push_to_hub is None:
        note(f"next: qkdb ingest --path {result.out}")
        return
    from qkdb.cli.hub import push_folder

    push_folder(result.out, push_to_hub, branch or meta["model"], private=private, after_capture=True)


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
            self.bars.message(f"{info['texts']} texts, {info['query_heads']} query heads, {info['key_heads']} key heads")
        elif event in ("text", "write"):
            label = "forward passes" if event == "text" else "writing heads"
            self.bars.update(event, label, info["done"], info["total"], f"{info['done']}/{info['total']}")

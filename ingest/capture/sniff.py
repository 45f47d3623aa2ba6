"""Capture queries and keys of a causal LM into the sniffed-qk layout (``qkdb sniff``).

How the vectors are caught
--------------------------
transformers routes every attention layer of its modern models through a function looked up
by name in ``transformers.AttentionInterface``. We register one more name whose function
(:class:`qkdb.ingest.capture.sniff_recorder.Recorder`) receives ``query`` (batch, heads, seq, head_dim) and
``key`` (batch, kv_heads, seq, head_dim) exactly as the model computed them, gathers the sampled
rows where they are (on the GPU, if the model runs there), and hands everything on to the
attention implementation :mod:`qkdb.ingest.capture.attention_backend` chose (sdpa by default). The
model files are not patched, so any causal LM that transformers loads (a local Hugging Face folder,
a GGUF file, or a Hub model at a revision) can be sniffed; its outputs are unchanged. The same name
is registered as the chosen implementation's mask builder (``AttentionMaskInterface``), so
sliding-window layers keep their windows.

What is stored, and how it is checked
-------------------------------------
Rows are compared with the layer's own projection (``q_proj``/``k_proj``, through its
``q_norm``/``k_norm``) rotated by the layer's own RoPE ``cos``/``sin`` — or not rotated, in layers
without RoPE: every row of the first text (which establishes each layer's RoPE), then a seeded
sample per head file and text (``check_rows``). Position-dependent factors the model applies that
are not RoPE (Ministral3's llama-4 query scale) are divided out by default and recorded in
``position_scaling``; anything else that makes a row differ stops the capture with an error naming
the layer. ``pre_rope=True`` stores the rows before the rotation, undone with the layer's own cos/sin.

What is kept (see :mod:`qkdb.ingest.capture.sampling` for the policy): a seeded sample of query heads
across layers, the KV heads they read, and per text a seeded sample of positions per head file
(or another capture's, ``like``). All positions are drawn before the model loads, so texts that are
too short are reported before any forward pass.

Resumable and atomic
--------------------
Each text's rows are written to the capture's hidden working folder as soon as the text is done
(:mod:`qkdb.ingest.capture.partial`); a capture killed at any moment continues after its last
complete text when run again, and the dataset appears at ``out`` in one rename when complete.
Memory is bounded by one head file's rows when the dataset is assembled, and by two texts' rows
during the capture, whatever the number or length of the texts.

torch and transformers are imported lazily: ``import qkdb`` works without them, and
:func:`sniff` raises :class:`SniffError` telling the user to install the ``sniff`` extra.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from qkdb.errors import SniffError
from qkdb.ingest.capture import attention_backend, devices, sampling, texts
from qkdb.ingest.capture.hub_texts import DatasetRequest, HubDataset, dataset_texts
from qkdb.ingest.capture.like import Like, check_layout, read_like
from qkdb.ingest.capture.partial import PartialCapture, differences, pause
from qkdb.ingest.capture.plan import CapturePlan
from qkdb.ingest.capture.rope_layout import FrequencySource, config_candidates
from qkdb.ingest.capture.rope_record import rope_facts
from qkdb.ingest.capture.rope_record import summary as rope_summary
from qkdb.ingest.capture.sniff_model import (
    INSTALL_HINT, ModelFacts, ModelRef, attention_modules, check_longrope, check_routes_attention, default_family,
    default_name, forward_failed, hub_commit, import_backend, input_device, load_config, load_model, load_tokenizer,
    model_class, model_facts, origin, same_facts, select_attention, tokenizer_specials, weights_of,
)
from qkdb.ingest.capture.sniff_recorder import (
    Recorder, StopForward, check_summary, check_tolerance, normaliser_record,
)
from qkdb.ingest.options import IngestOptions
from qkdb.ingest.sources import trained_context
from qkdb.ingest.sources.layout import HEAD_DIR, METADATA_FILE, read_metadata, write_head, write_metadata

ATTENTION_NAME = "qkdb_capture"
DEFAULT_CHECK_ROWS = 64

Progress = Callable[..., None]

__all__ = ["ATTENTION_NAME", "DEFAULT_CHECK_ROWS", "INSTALL_HINT", "SniffOptions", "SniffResult", "prepare",
           "resume_options", "run", "sniff"]


@dataclass
class SniffOptions:
    """Everything that decides what a capture holds (recorded in the dataset's metadata).

    Exactly one of ``model_path`` (a local Hugging Face model folder, or a Hub model id read at
    ``model_revision``) and ``gguf`` (a GGUF file) is given; texts come from ``text`` (``pydoc``, a
    file or a folder) or from the Hub dataset ``dataset``.
    """

    out: Path
    model_path: Path | str | None = None
    gguf: Path | None = None
    text: str = texts.PYDOC
    text_field: str = "text"
    n_texts: int | None = None
    max_length: int = 2048
    pack: bool = True
    q_heads: int | None = 300
    vectors_per_head: int = 4096
    dense: bool = False  # every position of every text (vectors_per_head is then texts × longest)
    keep_first: int = 4  # positions 0..keep_first-1 of every text in every head file (sink candidates)
    positions: str = "log-uniform"
    min_bucket_size: int = 128
    seed: int = 0
    pre_rope: bool = False
    keep_position_scaling: bool = False
    unchecked: bool = False
    dtype: str = "float32"
    token_strings: bool = False
    normaliser: bool = True  # each query row's softmax normaliser (column lse; --no-lse leaves it out)
    model_name: str | None = None
    family: str | None = None
    hf_model: str | None = None
    model_revision: str | None = None
    force: bool = False
    threads: int | None = None
    # where and how it computes
    device: str = "auto"
    model_dtype: str = "auto"
    device_map: str | None = None
    attn: str = "auto"
    check_rows: int | None = DEFAULT_CHECK_ROWS
    # texts from a Hub dataset
    dataset: str | None = None
    dataset_config: str | None = None
    dataset_split: str | None = None
    dataset_revision: str | None = None
    id_column: str | None = None
    min_tokens: int = 1
    # where the dataset is read from (default: HF_ENDPOINT and the Hugging Face cache; a Hub model is
    # read by transformers, which follows HF_ENDPOINT)
    hub_endpoint: str | None = None
    hub_cache: Path | None = None
    # pairing and resuming
    like: Path | None = None
    resume: bool = False
    # host work after each text in a thread of its own (None: on an accelerator; True on the CPU: tests)
    deferred: bool | None = None

    def model_ref(self) -> ModelRef:
        return ModelRef(None if self.model_path is None else str(self.model_path),
                        None if self.gguf is None else str(self.gguf), self.model_revision)

    def check(self) -> None:
        """Raise :class:`SniffError` for bad options or inputs, before anything is loaded.

        Checks that the model folder holds a model (a ``config.json``) or the GGUF file is one,
        that the text source exists and holds some text, and that the output can be written.
        """
        self.model_ref().check()
        devices.check_spec(self.device, self.model_dtype, self.device_map)
        attention_backend.check_request(self.attn)
        if self.positions not in sampling.POSITION_POLICIES:
            raise SniffError(
                f"unknown --positions {self.positions!r}; expected one of {', '.join(sampling.POSITION_POLICIES)}"
            )
        if self.dtype not in ("float32", "float16"):
            raise SniffError(f"--dtype must be float32 or float16, got {self.dtype!r}")
        for name in ("vectors_per_head", "min_bucket_size", "max_length", "min_tokens"):
            if getattr(self, name) < 1:
                raise SniffError(f"--{name.replace('_', '-')} must be positive")
        if self.q_heads is not None and self.q_heads < 1:
            raise SniffError("--q-heads must be positive")
        if self.keep_first < 0:
            raise SniffError("--keep-first must be 0 or more")
        if self.n_texts is not None and self.n_texts < 1:
            raise SniffError("--texts must be positive")
        if self.check_rows is not None and self.check_rows < 1:
            raise SniffError("--check-rows must be positive (or 'all')")
        if self.pre_rope and self.keep_position_scaling:
            raise SniffError(
                "--pre-rope stores the vectors before RoPE, without any position scaling; "
                "--keep-position-scaling cannot apply to them"
            )
        if self.dataset is not None and str(self.text) != texts.PYDOC:
            raise SniffError("give --text or --dataset, not both", kind="usage")
        if self.dataset is None and self.like is None:
            texts.check_source(self.text, self.text_field)
        if self.like is not None:
            like = Path(self.like)
            if not (like / METADATA_FILE).is_file():
                raise SniffError(f"--like {like}: no capture there (no {METADATA_FILE})",
                                 kind="not_found" if not like.exists() else "input")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise SniffError(f"{out}: exists and is not a folder")
        resuming = PartialCapture(out).exists
        if self.resume and not resuming:
            raise SniffError(f"{out}: nothing to resume (no partial capture in {PartialCapture(out).root})",
                             kind="not_found")
        if out.is_dir() and any(out.iterdir()) and not self.force and not resuming:
            raise SniffError(f"{out}: folder is not empty (use --force to replace a previous capture)")
        if out.is_dir() and self.force:
            strangers = [p.name for p in out.iterdir() if not _is_capture_entry(p)]
            if strangers:
                raise SniffError(
                    f"{out}: holds files that are not a capture ({', '.join(sorted(strangers)[:3])}); "
                    "refusing to replace it"
                )

    # -- what a partial capture records ------------------------------------------------------------

    def record(self) -> dict:
        """The options that decide what the capture holds, as JSON (paths resolved)."""
        out = {}
        for f in fields(self):
            if f.name in NOT_IDENTITY:
                continue
            value = getattr(self, f.name)
            if f.name in ("gguf", "like") and value is not None:
                value = str(Path(value).resolve())
            elif f.name == "model_path" and value is not None:
                value = str(Path(value).resolve()) if Path(value).exists() else str(value)
            elif f.name == "text" and value is not None and str(value) not in (texts.PYDOC, *texts.SYNTHETIC):
                value = str(Path(value).resolve())
            out[f.name] = value
        return out

    @classmethod
    def from_record(cls, out: Path, record: dict, **given) -> SniffOptions:
        """The options a partial capture recorded, with ``given`` ones on top (``--resume``)."""
        known = {f.name for f in fields(cls)}
        # (an option the record lacks did not exist when it was made: read it as that capture did)
        values = {**RECORDED_BEFORE, **{k: v for k, v in record.items() if k in known}} if record else {}
        values.update(given)
        return cls(out=Path(out), **values)


# what a recorded capture made before these options existed did
RECORDED_BEFORE = {"keep_first": 0, "dense": False, "normaliser": False}
# fields that do not change what a capture holds
NOT_IDENTITY = ("out", "force", "threads", "resume", "deferred", "hub_endpoint", "hub_cache")
# field -> how the command line names it
FLAGS = {
    "model_path": "--model-path", "gguf": "--gguf", "text": "--text", "text_field": "--text-field",
    "n_texts": "--texts", "max_length": "--max-length", "pack": "--pack (not --no-pack)", "q_heads": "--q-heads",
    "vectors_per_head": "--vectors-per-head", "dense": "--dense", "keep_first": "--keep-first",
    "positions": "--positions", "min_bucket_size": "--min-bucket-size", "seed": "--seed", "pre_rope": "--pre-rope", "keep_position_scaling": "--keep-position-scaling",
    "unchecked": "--unchecked", "dtype": "--dtype", "token_strings": "--tokens", "normaliser": "--lse (not --no-lse)", "model_name": "--model",
    "family": "--family", "hf_model": "--hf-model", "model_revision": "--revision", "device": "--device",
    "model_dtype": "--model-dtype", "device_map": "--device-map", "attn": "--attn", "check_rows": "--check-rows",
    "dataset": "--dataset", "dataset_config": "--config", "dataset_split": "--split",
    "dataset_revision": "--dataset-revision", "id_column": "--id-column", "min_tokens": "--min-tokens",
    "like": "--like",
}


@dataclass
class SniffResult:
    out: Path
    metadata: dict
    query_heads: list[tuple[int, int]]
    key_heads: list[tuple[int, int]]
    n_texts: int
    n_vectors: int
    seconds: float
    notes: list[str] = field(default_factory=list)  # one line each, for the user (stderr)
    rope: str = ""  # one line: the RoPE recorded (layout, frequencies' source, attention scale)
    # seconds per phase: prepare (config, tokenizer, texts, plan), load, forward (the texts' forward
    # passes and their host side), assemble (the dataset from the texts' rows), and how many tokens
    # went through the forward passes this run
    timings: dict = field(default_factory=dict)
    resumed_from: int = 0  # texts already complete when this run started


@dataclass
class Prepared:
    """A capture planned without its model's weights: what :func:`run` needs."""

    options: SniffOptions
    torch: object
    transformers: object
    device: devices.Device
    ref: ModelRef
    what: str
    facts: ModelFacts
    cls: object
    ratio: int
    windows: list
    text_record: dict
    q_heads: list
    k_heads: list
    plan: CapturePlan
    tokens: dict | None
    notes: list
    identity: dict
    like: Like | None
    seconds: float


def _is_capture_entry(p: Path) -> bool:
    return (p.is_dir() and HEAD_DIR.match(p.name) is not None) or p.name == METADATA_FILE


def per_head_asked(options: SniffOptions, lengths) -> int:
    """Rows asked of each head file: ``vectors_per_head``, or with ``dense`` every position of every text."""
    return len(lengths) * max(lengths, default=1) if options.dense else options.vectors_per_head


def resume_options(out: Path, **given) -> SniffOptions:
    """The options of the partial capture of ``out`` (``--resume``), with ``given`` ones on top (checked by :func:`run`)."""
    partial = PartialCapture(Path(out))
    if not partial.exists:
        raise SniffError(f"{out}: nothing to resume (no partial capture in {partial.root})", kind="not_found")
    return SniffOptions.from_record(Path(out), partial.identity().get("options", {}), resume=True, **given)


def sniff(options: SniffOptions, progress: Progress | None = None) -> SniffResult:
    """Run the capture described by ``options`` and write it to ``options.out``.

    Everything that can be checked without the model is checked first: the options and inputs,
    the device, the config, the texts (tokenized), and whether every head file gets enough rows.
    A partial capture of the same options in ``out``'s working folder is continued; one of other
    options is refused, naming the difference (``force`` discards it).

    ``progress(event, **info)`` is called with ``"load"``, ``"plan"`` (texts, query_heads,
    key_heads, done), ``"text"`` (done, total) and ``"write"`` (done, total) events.

    Returns
    -------
    SniffResult
        Where the dataset went, its metadata, what was captured and notes for the user.
    """
    progress = progress or (lambda *a, **k: None)
    options.check()
    return run(prepare(options), progress)


# --------------------------------------------------------------------------- preparing


def prepare(options: SniffOptions, plan_only: bool = False) -> Prepared:
    """Everything before the weights load: device, config, tokenizer, texts, heads, positions, identity.

    ``plan_only``: the device is not resolved (a series planned on a cluster's driver, which may
    have no GPU; each worker resolves its own); the result then only gives the plan.
    """
    t0 = time.perf_counter()
    torch, transformers = import_backend()
    if options.threads:
        torch.set_num_threads(int(options.threads))
    if plan_only:
        device = devices.Device(torch, options.device, "cpu", "float32")
    else:
        device = devices.resolve(options.device, options.model_dtype, options.device_map, torch)
        attention_backend.check_request(options.attn, device.type, device.dtype_name)
    like = read_like(options.like) if options.like is not None else None
    if like is not None:
        options = replace(options, **like.text_options)
    ref = options.model_ref()
    what = ref.where()[2]
    config = load_config(ref, transformers)
    facts = model_facts(config)
    if like is not None:
        check_layout(like, facts, what)
    cls = model_class(config, transformers)
    if cls is not None:
        check_routes_attention(cls, config, what)
    try:
        ratio = sampling.gqa_ratio(facts.n_q_heads, facts.n_kv_heads)
    except ValueError as exc:
        raise SniffError(f"{what}: {exc}") from exc
    tokenizer = load_tokenizer(ref, transformers)
    bos, eos = tokenizer_specials(tokenizer)
    windows, example_ids, record = _texts(options, tokenizer, bos, eos)
    source = options.dataset or str(options.text)
    if like is not None and record["tokens_sha256"] != like.tokens_sha256:
        raise SniffError(f"--like {like.path}: its texts tokenize differently with {what}'s tokenizer (the token "
                         "hashes differ): the positions would not be the same tokens")
    if like is not None:
        files = like.files
        q_heads = [(l, h) for l, h, k in files if k == "q"]
        k_heads = [(l, h) for l, h, k in files if k == "k"]
        try:
            plan = CapturePlan.given(files, [len(w) for w in windows], example_ids, like.rows)
        except ValueError as exc:
            raise SniffError(f"--like {like.path}: {exc}") from None
        notes = []
    else:
        q_heads = sampling.sample_query_heads(facts.n_layers, facts.n_q_heads, options.q_heads, options.seed)
        k_heads = sampling.key_heads_for(q_heads, facts.n_q_heads, facts.n_kv_heads)
        files = [(l, h, "q") for l, h in q_heads] + [(l, h, "k") for l, h in k_heads]
        lengths = [len(w) for w in windows]
        plan = CapturePlan.drawn(files, lengths, vectors_per_head=per_head_asked(options, lengths),
                                 seed=options.seed, policy=options.positions, min_bucket_size=options.min_bucket_size,
                                 example_ids=example_ids, keep_first=options.keep_first)
        notes, error = plan.shortfall(IngestOptions().min_vectors)
        if error:
            raise SniffError(f"{source}: {error}")
    check_longrope(facts, [len(w) for w in windows], source)
    notes = notes + _context_note(config, windows, what)
    tokens = None
    if options.token_strings:
        tokens = {f: [] for f in files}
        for f in files:
            for e, ids in enumerate(windows):
                tokens[f].extend(tokenizer.convert_ids_to_tokens(ids[plan.positions_of(f, e)].tolist()))
    identity = {
        "options": options.record(),
        "resolved": {"device": device.name, "model_dtype": device.dtype_name},
        "versions": {"qkdb": _qkdb_version(), "torch": torch.__version__, "transformers": transformers.__version__},
        "texts_sha256": record["tokens_sha256"],
        "plan_sha256": plan.fingerprint(),
    }
    return Prepared(options, torch, transformers, device, ref, what, facts, cls, ratio, windows, record, q_heads,
                    k_heads, plan, tokens, notes, identity, like, time.perf_counter() - t0)


def _qkdb_version() -> str:
    from qkdb._version import version

    return version()


def _texts(options: SniffOptions, tokenizer, bos, eos) -> tuple[list, np.ndarray, dict]:
    """(token windows, example_id of each, ``capture.texts``) from the dataset or the local source."""
    def encode(s: str) -> list[int]:
        return tokenizer(s, add_special_tokens=False)["input_ids"]

    if options.dataset is not None:
        request = DatasetRequest(options.dataset, options.dataset_config, options.dataset_split,
                                 options.dataset_revision, options.text_field, options.id_column)
        dataset = HubDataset(request, endpoint=options.hub_endpoint, cache_dir=options.hub_cache)
        found = dataset_texts(dataset, encode, options.max_length, bos_id=bos,
                              min_tokens=options.min_tokens, limit=options.n_texts)
        windows, example_ids = found.windows, found.example_ids
        record = dict(found.record)
        record["example_ids"] = [int(e) for e in example_ids]
        record["pack"] = False
    elif str(options.text) in texts.SYNTHETIC:
        windows = texts.synthetic_windows(str(options.text), vocabulary(tokenizer), options.n_texts or texts.SYNTHETIC_TEXTS,
                                          options.max_length, bos_id=bos, seed=options.seed)
        example_ids = np.arange(len(windows), dtype=np.int32)
        record = {"source": str(options.text), "seed": options.seed, "bos": bos is not None,
                  "drawn_from": "the tokenizer's vocabulary less its special tokens, uniformly"}
    else:
        windows = texts.token_windows(
            texts.iter_documents(options.text, options.text_field), encode, options.max_length,
            pack=options.pack, bos_id=bos, eos_id=eos, limit=options.n_texts, min_tokens=options.min_tokens,
        )
        example_ids = np.arange(len(windows), dtype=np.int32)
        record = {"source": str(options.text), "text_field": options.text_field, "pack": options.pack,
                  "min_tokens": options.min_tokens}
    # (Gu et al.'s input kinds: the ingest carries it into every attention-mass row)
    record["kind"] = "natural" if options.dataset is not None else texts.input_kind(options.text)
    record["n_texts"] = len(windows)
    record["n_tokens"] = int(sum(len(w) for w in windows))
    record["tokens_sha256"] = texts.tokens_sha256(windows)
    return windows, example_ids, record


def vocabulary(tokenizer) -> np.ndarray:
    """The tokenizer's ids less its special tokens (BOS, EOS, padding, added control tokens), sorted."""
    special = set(getattr(tokenizer, "all_special_ids", None) or [])
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special |= {int(i) for i, tok in added.items() if getattr(tok, "special", False)}
    return np.setdiff1d(np.arange(len(tokenizer), dtype=np.int64), np.fromiter(special, np.int64, len(special)))


def _context_note(config, windows, what: str) -> list[str]:
    """A note when texts run past the model's declared context (``max_position_embeddings``): positions it was not
    trained on. Not refused: models that scale their RoPE (dynamic NTK, YaRN) are run past it on purpose."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    context = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    longest = max(len(w) for w in windows)
    if isinstance(context, int) and 0 < context < longest:
        return [f"the longest text has {longest} tokens, more than {what}'s context of {context} "
                "(max_position_embeddings): its positions past that are positions the model was not trained on"]
    return []


# --------------------------------------------------------------------------- running


def run(prep: Prepared, progress: Progress | None = None) -> SniffResult:
    """Capture what ``prep`` planned into ``out``: continue its partial capture, or start one; publish when complete."""
    progress = progress or (lambda *a, **k: None)
    t0 = time.perf_counter() - prep.seconds
    options, plan = prep.options, prep.plan
    out = Path(options.out)
    partial = PartialCapture(out)
    replace_out = bool(options.force)
    if partial.exists:
        recorded = partial.identity()
        diff = _identity_differences(recorded, prep.identity)
        if diff and not options.force:
            raise SniffError(f"{out}: a partial capture with other options is in {partial.root}: {'; '.join(diff)}. "
                             "Run the command that started it (or --resume), or --force to discard it and start again")
        if diff:
            partial.remove()
        else:
            replace_out = replace_out or bool(recorded.get("replace_out"))
    if not partial.exists:
        if out.is_dir() and any(out.iterdir()) and not options.force:
            raise SniffError(f"{out}: folder is not empty (use --force to replace a previous capture)")
        partial.start({**prep.identity, "replace_out": replace_out})
    done = partial.done(plan.n_texts)
    progress("plan", texts=plan.n_texts, query_heads=len(prep.q_heads), key_heads=len(prep.k_heads), done=done)
    if done == plan.n_texts and _published(out, prep.identity):
        # killed after the dataset was moved into place: only the working folder was left to remove
        partial.remove()
        metadata = read_metadata(out)
        return SniffResult(out, metadata, prep.q_heads, prep.k_heads, plan.n_texts, int(plan.kept_per_file.sum()),
                           time.perf_counter() - t0, ["the capture was already complete"], rope_summary(metadata),
                           {"prepare": prep.seconds, "tokens": 0}, resumed_from=done)
    try:
        return _capture(prep, partial, done, replace_out, progress, t0)
    except SniffError as exc:
        # What the capture refuses (a check, a forward pass that fails) would fail again the same way:
        # nothing of it is kept. An interruption (Ctrl-C, a kill, a crash, a full disk) keeps the
        # complete texts for the next run.
        if not getattr(exc, "keep_partial", False):
            partial.remove()
        raise


class _Background:
    """``fn(*args)`` in a thread of its own; :meth:`result` waits for it and raises what it raised.

    A daemon thread: a capture that fails does not wait, at exit, for a result nobody will read.
    """

    def __init__(self, fn, *args):
        self._value, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True, name="qkdb-sniff-background")
        self._thread.start()

    def _run(self, fn, args) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # (re-raised in the caller's thread by result())
            self._error = exc

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _capture(prep: Prepared, partial: PartialCapture, done: int, replace_out: bool, progress, t0: float):
    options, plan, torch, transformers = prep.options, prep.plan, prep.torch, prep.transformers
    out = Path(options.out)
    t_load = time.perf_counter()
    progress("load", what=prep.what)
    model = load_model(prep.ref, prep.device, transformers)
    # The weights' sha256 is read from disk while the texts run, not after them (every byte of the
    # weights hashed: seconds for a billion parameters).
    weights_hash = _Background(weights_of, prep.ref)
    # the loaded model's config is the one that counts (a GGUF's is built while loading)
    facts = same_facts(prep.facts, model_facts(model.config), prep.what)
    if prep.cls is None:
        check_routes_attention(type(model), model.config, prep.what)
    attn_modules = attention_modules(model)
    backend = attention_backend.choose(model, attn_modules, options.attn)
    recorder = Recorder(
        torch, backend, plan, nope_layers=facts.nope_layers,
        scalings=facts.position_scalings, remove_scalings=not options.keep_position_scaling,
        pre_rope=options.pre_rope, check=not options.unchecked, attn_modules=attn_modules,
        dims=(facts.n_q_heads, facts.n_kv_heads, facts.head_dim),
        frequencies=FrequencySource(model, config_candidates(facts.rope_theta, facts.rope_scaling, facts.layer_rope_theta,
                                                             facts.layer_rope_scaling, declared=facts.rope != "none")),
        tolerance=check_tolerance(prep.device.dtype_name), check_rows=options.check_rows, seed=options.seed,
        device=prep.device, deferred=options.deferred, storage_dtype=options.dtype, normalise=options.normaliser,
    )
    # one fixed name: a later capture in the same process replaces this recorder, none piles up
    transformers.AttentionInterface.register(ATTENTION_NAME, recorder)
    # masks are built as for the attention handed on to (sliding windows, padding); an unknown
    # name would get no mask at all
    transformers.AttentionMaskInterface.register(ATTENTION_NAME, backend.mask)
    select_attention(model, ATTENTION_NAME)
    # the base model only: the LM head's logits (seq × vocab floats) are not needed
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)
    where = input_device(model)
    layers = sorted({l for l, _, _ in plan.files})
    t_forward = time.perf_counter()
    tokens_run = 0
    # the first text establishes every layer's RoPE; after a kill it runs again, its rows compared with
    # those stored, before the capture continues with the first incomplete text
    schedule = ([(0, True)] if done else []) + [(e, False) for e in range(done, plan.n_texts)]
    if done and done == plan.n_texts:
        schedule = [(0, True)]

    def host(work):
        block, lse, stats = recorder.finish_text(work)
        if work.replay:
            _same_as_stored(partial.rows(work.text), block, recorder.tolerance, out, prep.what)
        else:
            partial.commit_text(work.text, block, stats, lse=lse if options.normaliser else None)

    pending = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="qkdb-sniff-host") as pool:
        try:
            for e, replay in schedule:
                ids = prep.windows[e]
                recorder.begin_text(e, len(ids), replay=replay)
                try:
                    with torch.inference_mode():
                        base(input_ids=torch.as_tensor(ids).unsqueeze(0).to(where), use_cache=False)
                except StopForward:
                    pass
                except SniffError:
                    raise
                except Exception as exc:
                    raise SniffError(forward_failed(exc, e, prep.what, recorder)) from exc
                finally:
                    work = recorder.end_text()
                tokens_run += len(ids)
                if pending is not None:
                    pending.result()  # the previous text's host side (its errors surface here)
                pending = pool.submit(host, work)
                if e == 0:  # every later text needs the layouts the first one establishes
                    pending.result()
                    pending = None
                    missing = sorted(set(layers) - recorder.seen_layers)
                    if missing:
                        raise SniffError(
                            f"{prep.what}: the model does not route attention through transformers' "
                            f"AttentionInterface (no capture from layers {missing[:5]}); qkdb sniff cannot read its "
                            "queries and keys"
                        )
                if not replay:
                    progress("text", done=e + 1, total=plan.n_texts)
            if pending is not None:
                pending.result()
        finally:
            recorder.close()
    t_assemble = time.perf_counter()
    for e in range(1, plan.n_texts):
        if not any(s[0] == e and not s[1] for s in schedule):  # complete before this run: its statistics
            stats = partial.stats(e)
            for layer, diff in stats.get("max_difference", {}).items():
                recorder.max_difference[int(layer)] = max(recorder.max_difference.get(int(layer), 0.0), diff)
            recorder.rows_checked += int(stats.get("rows_checked", 0))
    check = check_summary(recorder, layers)
    rope = rope_facts(recorder, facts.n_layers, facts.nope_layers, facts.rope_parameters,
                      [len(w) for w in prep.windows])
    notes = list(prep.notes) + _check_notes(check, facts, options, rope)
    metadata = _assemble(prep, partial, recorder, facts, check, rope, model, replace_out, progress, weights_hash)
    t_end = time.perf_counter()
    timings = {"prepare": prep.seconds, "load": t_forward - t_load, "forward": t_assemble - t_forward,
               "assemble": t_end - t_assemble, "tokens": tokens_run}
    return SniffResult(out, metadata, prep.q_heads, prep.k_heads, plan.n_texts, int(plan.kept_per_file.sum()),
                       t_end - t0, notes, rope_summary(metadata), timings, resumed_from=done)


def _published(out: Path, identity: dict) -> bool:
    """Whether ``out`` holds the finished capture of exactly this identity."""
    if not (out / METADATA_FILE).is_file():
        return False
    return (read_metadata(out).get("capture") or {}).get("identity_sha256") == identity_sha256(identity)


def _identity_differences(recorded: dict, now: dict) -> list[str]:
    """What differs between a partial capture's identity and this command's, one phrase each."""
    out = differences(recorded.get("options", {}), now["options"], FLAGS)
    for key, label in (("resolved", "the resolved"), ("versions", "the library versions")):
        if recorded.get(key) != now.get(key):
            a, b = recorded.get(key) or {}, now.get(key) or {}
            out += [f"{label} {k} {b.get(k)} (the partial capture's: {a.get(k)})"
                    for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if not out and recorded.get("texts_sha256") != now["texts_sha256"]:
        out.append("the texts (their source changed since: its tokens differ)")
    if not out and recorded.get("plan_sha256") != now["plan_sha256"]:
        out.append("the heads or positions (the model's config or tokenizer changed since)")
    return out


def _same_as_stored(stored: np.ndarray, block: np.ndarray, tolerance: float, out: Path, what: str) -> None:
    """The first text again after a kill must give the rows stored for it: else the model (or its files) changed."""
    if stored.shape != block.shape:
        err = SniffError(f"{out}: the partial capture's first text holds {stored.shape[0]} rows, this run gives "
                         f"{block.shape[0]}: it was made by another plan; use --force to start again")
        err.keep_partial = True
        raise err
    a, b = np.asarray(stored, np.float64), np.asarray(block, np.float64)
    scale = float(np.max(np.abs(a))) or 1.0
    diff = float(np.max(np.abs(a - b))) / scale if a.size else 0.0
    if diff > tolerance:
        err = SniffError(f"{out}: {what} gives other vectors for the first text than the partial capture stored "
                         f"(relative difference {diff:.2g}): the model changed since; use --force to start again")
        err.keep_partial = True
        raise err


def _assemble(prep: Prepared, partial: PartialCapture, recorder, facts, check, rope, model, replace_out: bool,
              progress, weights_hash: _Background) -> dict:
    """Write every head file from the texts' rows (one file's rows in memory at a time), the metadata; publish."""
    plan, options = prep.plan, prep.options
    build = partial.build_folder()
    blocks = [partial.rows(e) for e in range(plan.n_texts)]
    normalisers = [partial.lse(e) for e in range(plan.n_texts)]
    with_lse = bool(normalisers) and all(n is not None for n in normalisers)
    def write(i: int) -> None:
        layer, head, kind = f = plan.files[i]
        parts = [blocks[e][plan.text_offsets[e, i]:plan.text_offsets[e, i + 1]] for e in range(plan.n_texts)]
        vectors = np.concatenate(parts) if parts else np.zeros((0, facts.head_dim), options.dtype)
        lse = (np.concatenate([normalisers[e][plan.text_offsets[e, i]:plan.text_offsets[e, i + 1]]
                               for e in range(plan.n_texts)]) if with_lse and kind == "q" else None)
        write_head(
            build, layer, head, kind, vectors, plan.positions[f],
            example_id=plan.example_id_column(f), bucket=plan.buckets[f],
            sliding_window=recorder.sliding.get(layer),
            token_str=prep.tokens[f] if prep.tokens is not None else None,
            dtype=options.dtype, lse=lse,
        )

    # Files are compressed and written by a thread per core (pyarrow releases the GIL), at most two
    # files' rows per thread in memory; progress and the first file's pause stay in order.
    n_threads = max(1, min(os.cpu_count() or 1, len(plan.files)))
    with ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="qkdb-sniff-write") as pool:
        pending: deque = deque()
        for i in range(len(plan.files)):
            pending.append(pool.submit(write, i))
            while len(pending) > 2 * n_threads or (i == 0 and pending):
                pending.popleft().result()
            progress("write", done=max(0, i + 1 - len(pending)), total=len(plan.files))
            if i == 0:
                pause("assembling")
        while pending:
            pending.popleft().result()
        progress("write", done=len(plan.files), total=len(plan.files))
    del blocks
    positions = [p for p in plan.positions.values() if len(p)]
    max_position = int(max(p.max() for p in positions)) if positions else None
    metadata = _metadata(prep, facts, check, rope, max_position, recorder, model, weights_hash.result())
    if with_lse:
        metadata["capture"]["normaliser"] = normaliser_record(recorder, max_position)
    write_metadata(build, metadata)
    partial.publish(build, replace=replace_out)
    return metadata


# --------------------------------------------------------------------------- what is recorded


def _check_notes(check: dict, facts: ModelFacts, options: SniffOptions, rope) -> list[str]:
    """One line per thing the user should know about what was stored."""
    notes = list(rope.notes)
    if check["method"].startswith("none"):
        notes.append("--unchecked: the stored vectors were not compared with the layers' projections "
                     "(recorded in capture.check)")
    for entry in check.get("unchecked", []):
        notes.append(
            f"layers {_layer_list(entry['layers'])} were not checked against their projections ({entry['reason']}): "
            "a non-RoPE position signal there would go unnoticed"
        )
    for s in facts.position_scalings:
        vectors = "queries" if s.kind == "q" else "keys"
        where = ("kept in the stored vectors (--keep-position-scaling)" if options.keep_position_scaling
                 else "divided out of the stored vectors")
        notes.append(f"the model multiplies its {vectors} by a position-dependent factor that is not RoPE "
                     f"({s.type}: {s.FORMULAS[s.type]}): {where}; recorded in position_scaling")
    if rope.top["rope"] == "none":
        notes.append("the model has no rotary position embedding: recorded as rope: none, every layer as a NoPE "
                     "layer; the ingest skips its RoPE planes")
    elif facts.rope == "none":
        notes.append("the config declares no RoPE parameters, but the layers rotate their queries and keys "
                     "(established from the rows): recorded as the model does it")
    return notes


def _layer_list(layers: list[int]) -> str:
    return ", ".join(map(str, layers[:8])) + (f" and {len(layers) - 8} more" if len(layers) > 8 else "")


def _versions(backend_name: str) -> dict:
    """Versions of what computed the vectors besides torch and transformers."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    out = {}
    names = ["accelerate"] + (["flash-attn"] if backend_name.startswith("flash") else [])
    for name in names:
        try:
            out[name.replace("-", "_") + "_version"] = dist_version(name)
        except PackageNotFoundError:
            out[name.replace("-", "_") + "_version"] = None
    return out


def _metadata(prep: Prepared, facts: ModelFacts, check, rope, max_position, recorder, model,
              weights_record: dict) -> dict:
    options, plan = prep.options, prep.plan
    ref = prep.ref
    if ref.gguf is not None:
        weights = {"gguf_file": Path(ref.gguf).name}
    elif ref.hub_id is not None:
        weights = {"hub_model": ref.hub_id, "model_commit": hub_commit(ref)}
    else:
        weights = {"model_path": str(Path(ref.model_path).resolve())}
    # (the checkpoint's identity: a series whose entries share it is refused at ingest)
    weights.update(weights_record)
    hf_model, revision = origin(ref, options.hf_model)
    top = rope.top
    positions = ({"policy": "dense" if options.dense else options.positions,
                  "min_bucket_size": options.min_bucket_size, "keep_first": options.keep_first,
                  "vectors_per_head": plan.asked} if prep.like is None else
                 {"policy": "like", "like": str(Path(options.like).resolve())})
    kept = plan.kept_per_file
    positions["kept_per_head"] = int(kept[0]) if len(kept) and np.all(kept == kept[0]) else [int(k) for k in kept]
    attention = dict(rope.attention)
    attention["asked"] = options.attn
    meta = {
        "model": options.model_name or default_name(ref, hf_model),
        "family": options.family or default_family(facts.model_type, hf_model),
        "n_layers": facts.n_layers,
        "n_q_heads": facts.n_q_heads,
        "n_kv_heads": facts.n_kv_heads,
        "gqa_ratio": prep.ratio,
        "head_dim": facts.head_dim,
        "rope": top["rope"],
        "rope_theta": facts.rope_theta,
        "rope_pairing": top["rope_pairing"],
        "rotary_dims": top["rotary_dims"],
        "rotary_offset": top["rotary_offset"],
        "rope_inv_freq": top["rope_inv_freq"],
        "layer_rope_inv_freq": top["layer_rope_inv_freq"],
        "rope_attention_factor": top["rope_attention_factor"],
        "layer_rope_attention_factor": top["layer_rope_attention_factor"],
        "attention_scale": top["attention_scale"],
        "layer_attention_scale": top["layer_attention_scale"],
        "rope_scaling": facts.rope_scaling,
        # L_train of frequency_usage (ingest/sources/trained_context.py): the original length under scaled RoPE
        **trained_context.record(facts.max_position_embeddings, facts.rope_scaling),
        "layer_rope_theta": facts.layer_rope_theta,
        "layer_rope_scaling": facts.layer_rope_scaling,
        "nope_layers": top["nope_layers"],
        "position_scaling": [
            s.record(removed=not options.keep_position_scaling, max_position=max_position)
            for s in facts.position_scalings
        ] or None,
        "source": "sniff",
        "hf_model": hf_model,
        "capture": {
            "tool": "qkdb sniff",
            "qkdb_version": _qkdb_version(),
            "transformers_version": prep.transformers.__version__,
            "torch_version": prep.torch.__version__,
            **_versions(recorder.backend.name),
            # the pydoc corpus changes between Python releases: an exact rerun needs the same one
            "python_version": platform.python_version(),
            **weights,
            "model_type": facts.model_type,
            "seed": options.seed,
            "texts": prep.text_record,
            "max_length": options.max_length,
            "q_heads": len(prep.q_heads),
            "q_heads_sampling": ("numpy default_rng(seed).choice(n_layers*n_q_heads, q_heads, replace=False)"
                                 if prep.like is None else "the --like capture's head files"),
            "positions": positions,
            "pre_rope": options.pre_rope,
            "dtype": options.dtype,
            "device": prep.device.record(model),
            "token_strings": options.token_strings,
            "check": check,
            "rope": rope.rope,
            "attention": attention,
            "plan_sha256": plan.fingerprint(),
            "identity_sha256": identity_sha256(prep.identity),
        },
    }
    if prep.like is not None:
        meta["capture"]["like"] = prep.like.record()
    if revision:
        meta["model_revision"] = revision
    return meta


def identity_sha256(identity: dict) -> str:
    """A hash of what decides a capture (options, resolved device, versions, texts, plan): equal commands, equal hash."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

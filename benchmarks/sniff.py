"""What ``qkdb sniff`` costs against a plain forward pass of the same model, and its peak memory, by text length.

Issue 29 asks a capture to cost at most 1.15× a plain forward on the CPU (1.10× on a GPU in
bfloat16 at 32k–128k tokens), with its memory bounded by what it keeps. For each text length the
script runs, each in a process of its own (so that every peak is its own), alternating within each
repetition:

* ``plain``: ``model(input_ids=...)`` over the texts — the full model, logits included, transformers'
  sdpa attention, in the same dtype on the same device: what a user of the model runs;
* ``base``: the base model without the LM head (``model.model(..., use_cache=False)``): every
  layer and nothing more, a stricter floor;
* ``upto``: the base model cut before the deepest layer that holds a sampled head. ``qkdb sniff``
  stops its forward pass inside that layer, once the layer's queries and keys are captured: it never
  runs that layer's attention and MLP, nor the layers after it. On a model of few layers this is a
  large share of ``base``'s work (a quarter of it on the default 4-layer model, where every layer
  holds a sampled head), which would hide the capture's own cost; ``upto`` runs all the layers sniff
  runs in full, and not the deepest layer's norm and projections, which sniff also runs: the
  strictest floor, and ``sniff/upto`` an upper bound of what the capture itself costs;
* ``sniff``: ``qkdb sniff`` over the same texts (the windows it makes are the ones timed above), its
  forward passes with the capture and the check, each text's rows written to disk, and the
  dataset assembled at the end — everything but loading the model and tokenizing.

Tokens per second are the texts' tokens over each run's time; the ratios are sniff's time over the
plain and the base forward's, per repetition and their median. Peak memory: the process's peak
resident set (``ru_maxrss``) and its growth over the resident set once the model is loaded (the
forward passes' own), and on a GPU the allocator's peak (``torch.cuda.max_memory_allocated``).

    python benchmarks/sniff.py                       # CPU: 2k, 8k, 32k tokens; a Llama-shaped model
    python benchmarks/sniff.py --lengths 4096,8192,16384,32768 --reps 1   # memory against length
    python benchmarks/sniff.py --device cuda --model-dtype bfloat16 --lengths 32768,65536,131072
    python benchmarks/sniff.py --model-path ./a-real-model --device cuda --model-dtype bfloat16

The default model is random (nothing downloaded), Llama-shaped: hidden 256, 4 layers, 4 query and 2
KV heads of 64 dims, a byte-level BPE tokenizer of 320 tokens trained on the pydoc corpus
(tests/helpers/tiny_models.py), 131,072 positions; the texts are the pydoc corpus (repeated when a
length needs more), packed into windows of each length. The same script runs unchanged on a GPU:
everything device-specific is asked of ``--device``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("QKDB_BENCH_CACHE", Path.home() / ".cache" / "qkdb-bench")) / "sniff"


# -- the model and the texts (made once, cached) --------------------------------------------------------


def bench_model(folder: Path) -> Path:
    """The default random Llama-shaped model with its tokenizer, built once into ``folder``."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    import transformers
    from helpers import tiny_models as tm

    tmp = folder.with_name(folder.name + ".tmp")
    tm.train_tokenizer(tmp)
    config = transformers.LlamaConfig(
        vocab_size=320, hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=131072, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
    os.replace(tmp, folder)
    return folder


def corpus(folder: Path, copies: int) -> Path:
    """The pydoc corpus ``copies`` times over as one .jsonl file (long windows need more tokens than it has)."""
    path = folder / f"pydoc-x{copies}.jsonl"
    if not path.is_file():
        from qkdb.ingest.capture import texts

        docs = texts.pydoc_documents()
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"text": d}) + "\n" for _ in range(copies) for d in docs))
    return path


# -- one measured run (a process of its own) ----------------------------------------------------------


def _options(args, length: int, n_texts: int, out: Path):
    from qkdb.ingest import SniffOptions

    return SniffOptions(out=out, model_path=args["model_path"], text=args["text"], n_texts=n_texts,
                        max_length=length, q_heads=args["q_heads"], vectors_per_head=args["vectors_per_head"],
                        device=args["device"], model_dtype=args["model_dtype"], threads=args["threads"],
                        model_name="bench", force=True)


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(kind: str, args: dict, length: int, n_texts: int) -> dict:
    """One run of ``kind`` (plain, base or sniff) over the texts of ``length``; its times and peaks."""
    import torch

    from qkdb.ingest.capture import devices
    from qkdb.ingest.capture.sniff import prepare, run

    with tempfile.TemporaryDirectory() as tmp:
        options = _options(args, length, n_texts, Path(tmp) / "out")
        prep = prepare(options)
        device = prep.device
        tokens = int(sum(len(w) for w in prep.windows))
        if kind == "sniff":
            rss0 = _rss()  # (before the model: run() loads it; its load is timed apart)
            device.reset_peak()
            result = run(prep)
            t = result.timings
            seconds, forward = t["forward"] + t["assemble"], t["forward"]
            loaded = None
        else:
            import transformers

            model = transformers.AutoModelForCausalLM.from_pretrained(
                args["model_path"], attn_implementation="sdpa", **device.load_kwargs()).eval()
            from qkdb.ingest.capture.sniff_model import input_device

            where = input_device(model)
            target = model if kind == "plain" else getattr(model, model.base_model_prefix)
            if kind == "upto":
                deepest = max(layer for layer, _, _ in prep.plan.files)
                target.layers = target.layers[:deepest]
            rss0 = loaded = _rss()
            device.reset_peak()
            t0 = time.perf_counter()
            with torch.inference_mode():
                for ids in prep.windows:
                    ids_t = torch.as_tensor(ids).unsqueeze(0).to(where)
                    if kind == "plain":
                        target(input_ids=ids_t)
                    else:
                        target(input_ids=ids_t, use_cache=False)
            device.synchronize()
            seconds = forward = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return {"kind": kind, "length": length, "texts": n_texts, "tokens": tokens, "seconds": seconds,
                "forward_seconds": forward, "peak_rss": peak, "rss_before": rss0, "loaded_rss": loaded,
                "device_peak": device.peak_memory(), "device": device.name, "dtype": device.dtype_name,
                "torch": torch.__version__, "threads": torch.get_num_threads(),
                "devices_record": devices.Device.record(device)}


def _run_child(kind: str, args: dict, length: int, n_texts: int) -> dict:
    code = ("import json, sys\nsys.path.insert(0, %r)\nimport sniff as b\n"
            "print(json.dumps(b.child(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))\n"
            % str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", code, kind, json.dumps(args), str(length), str(n_texts)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{kind} at {length} tokens failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the table -------------------------------------------------------------------------------------


def _mb(n) -> str:
    return "—" if n is None else f"{n / 2**20:,.0f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", help="a model folder or Hub id (default: the random Llama-shaped model)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model-dtype", default="auto")
    ap.add_argument("--lengths", default=None, help="text lengths (default 2048,8192,32768; on a GPU 32768,65536,131072)")
    ap.add_argument("--tokens", type=int, default=None,
                    help="tokens per length: texts = max(1, tokens / length) (default 32768; on a GPU 262144)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--q-heads", type=int, default=300)
    ap.add_argument("--vectors-per-head", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kinds", default="plain,base,upto,sniff")
    ap.add_argument("--json", type=Path, help="write every measurement to this file")
    opts = ap.parse_args()

    import torch

    gpu = opts.device.startswith("cuda") or (opts.device == "auto" and torch.cuda.is_available())
    lengths = [int(x) for x in (opts.lengths or ("32768,65536,131072" if gpu else "2048,8192,32768")).split(",")]
    per_length = opts.tokens or (262144 if gpu else 32768)
    model = opts.model_path or str(bench_model(CACHE / "llama-h256-l4"))
    from qkdb.ingest.capture import texts

    copies = max(1, -(-max(max(lengths), per_length) * 3 // 100_000))  # ~1e5 tokens per copy of pydoc, with room
    args = {"model_path": model, "text": str(corpus(CACHE, copies)), "device": opts.device,
            "model_dtype": opts.model_dtype, "q_heads": opts.q_heads, "vectors_per_head": opts.vectors_per_head,
            "threads": opts.threads}
    kinds = opts.kinds.split(",")
    load = os.getloadavg()[0]
    print(f"qkdb sniff benchmark: {model}, texts from {Path(args['text']).name} ({texts.PYDOC} ×{copies}), "
          f"{opts.reps} repetition(s), kinds {', '.join(kinds)}")
    rows, every = [], []
    for length in lengths:
        n = max(1, per_length // length)
        runs = {k: [] for k in kinds}
        for _ in range(opts.reps):
            for k in kinds:
                runs[k].append(_run_child(k, args, length, n))
        every += [r for rs in runs.values() for r in rs]
        rows.append((length, n, runs))
    first = every[0]
    print(f"machine: {os.cpu_count()} cores, {first['threads']} torch threads, device {first['device']} "
          f"({first['dtype']}), torch {first['torch']}; 1-min load average at start {load:.1f}")
    print()
    print(f"{'tokens/text':>11} {'texts':>5}  " + "  ".join(f"{k + ' tok/s':>12}" for k in kinds)
          + "".join(f"  {'sniff/' + k + ' (per rep)':<28}" for k in kinds if k != "sniff" and "sniff" in kinds))
    for length, n, runs in rows:
        med = {k: statistics.median(r["seconds"] for r in runs[k]) for k in kinds}
        tok = runs[kinds[0]][0]["tokens"]
        line = f"{length:>11,} {n:>5}  " + "  ".join(f"{tok / med[k]:>12,.0f}" for k in kinds)
        if "sniff" in kinds:
            for k in kinds:
                if k != "sniff":
                    ratios = [s["seconds"] / p["seconds"] for s, p in zip(runs["sniff"], runs[k])]
                    cell = f"{statistics.median(ratios):.2f}x ({' '.join(f'{x:.2f}' for x in ratios)})"
                    line += f"  {cell:<28}"
        print(line)
    print()
    base = "plain" if "plain" in kinds else kinds[0]
    print(f"peak memory, last repetition (host: resident set; growth: over the {base} run's once its model was loaded)")
    print(f"{'tokens/text':>11}  " + "  ".join(f"{k + ' host':>14} {'growth':>9}" for k in kinds)
          + ("  " + "  ".join(f"{k + ' device':>14}" for k in kinds) if gpu else ""))
    for length, n, runs in rows:
        loaded = runs[base][-1]["loaded_rss"] or runs[base][-1]["rss_before"]
        line = f"{length:>11,}  " + "  ".join(
            f"{_mb(runs[k][-1]['peak_rss']):>14} {_mb(runs[k][-1]['peak_rss'] - loaded):>9}" for k in kinds)
        if gpu:
            line += "  " + "  ".join(f"{_mb(runs[k][-1]['device_peak']):>14}" for k in kinds)
        print(line)
    if opts.json:
        opts.json.write_text(json.dumps(every, indent=2))


if __name__ == "__main__":
    main()

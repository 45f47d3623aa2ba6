"""Long-context benchmark scores and the mapping of captured models to benchmarked ones (SPEC §4.6).

Two kinds of input, each read whole or refused whole (one line naming the file and the field):

* **LongBench-Pro summaries**, ``<bench_model>/<mode>_context-<budget>_bon-<k>_summary.json`` as the
  benchmark's repository publishes them (``LongBench-Pro/output/``): the mode, context budget and
  best-of-k come from the file name, the benchmarked model from its folder; the ``average_*``
  metrics (means over the inference iterations) become rows ×100 — the overall score with every
  iteration's, and the token-length, difficulty, contextual-requirement, primary-task and language
  slices. A folder is searched for such files at any depth.
* **CSV files**: of ``benchmark_scores``' columns (``benchmark, bench_model, mode, context_budget,
  slice_kind, slice, score`` required; ``length_tokens, n_runs, run_scores, best_of, source``
  optional), or of ``benchmark_models``' (``model, benchmark, bench_model, match_kind`` and ``note``).

The files qkdb ships (``reference/`` beside this module, with their sources in ``SOURCES.md``) are
every summary published in caskcsg/longcontext at 88fbeb8, RULER's Table 3, the registry's mapping and
the seeds' author's plasticity values; the catalog writes them into the home when it is built, so
they need no import (:mod:`qkdb.warehouse.benchmarks`).
"""

from __future__ import annotations

import csv
import json
import math
import re
from importlib import resources
from pathlib import Path

from qkdb.errors import InputError

SUMMARY = re.compile(r"^(?P<mode>thinking|nonthinking)_context-(?P<budget>\d+)_bon-(?P<k>\d+)_summary\.json$")
MATCH_KINDS = ("exact", "base_vs_instruct", "other")
# summary field -> slice_kind
SLICES = {
    "average_token_length_metric": "token_length",
    "average_difficulty_metric": "difficulty",
    "average_contextual_requirement_metric": "contextual_requirement",
    "average_primary_task_metric": "primary_task",
    "average_language_metric": "language",
}
SCORE_COLUMNS = ("benchmark", "bench_model", "mode", "context_budget", "slice_kind", "slice", "length_tokens", "score",
                 "n_runs", "run_scores", "best_of", "source")
MODEL_COLUMNS = ("model", "benchmark", "bench_model", "match_kind", "note")
_LENGTH = re.compile(r"^(\d+)k$")


def bundled(name: str) -> Path:
    """The path of a shipped file (``longbench_pro.csv``, ``ruler.csv``, ``benchmark_models.csv``, ...)."""
    return reference_dir() / name


def reference_dir() -> Path:
    """The folder of the shipped benchmark files."""
    return Path(str(resources.files("qkdb.warehouse").joinpath("reference")))


def length_tokens(slice_: str) -> int | None:
    """A token-length slice's nominal length: '8k' -> 8192 (LongBench-Pro's and RULER's k are 1,024 tokens here)."""
    m = _LENGTH.match(slice_.strip().lower())
    return int(m.group(1)) * 1024 if m else None


def _number(path, field: str, value, scale: float = 100.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{path}: field {field!r} must be a number, got {value!r}")
    return float(value) * scale


def read_summary(path: str | Path) -> list[dict]:
    """The rows of one LongBench-Pro summary file (scores ×100)."""
    path = Path(path)
    m = SUMMARY.match(path.name)
    if not m:
        raise InputError(f"{path}: not a LongBench-Pro summary (expected <mode>_context-<N>_bon-<k>_summary.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    mode, budget, k = m.group("mode"), int(m.group("budget")), int(m.group("k"))
    model = path.parent.name
    base = {"benchmark": "longbench-pro", "bench_model": model, "mode": mode, "context_budget": budget, "best_of": k,
            "source": f"{model}/{path.name}"}
    if "average_overall_metric" not in data:
        raise InputError(f"{path}: field 'average_overall_metric' is missing")
    runs = []
    n_runs = data.get("inference_iterations")
    if n_runs is not None:
        if isinstance(n_runs, bool) or not isinstance(n_runs, int) or n_runs < 1:
            raise InputError(f"{path}: field 'inference_iterations' must be a positive integer, got {n_runs!r}")
        for i in range(1, n_runs + 1):
            field = f"inference_iteration_{i}_overall_metric"
            if field in data:
                runs.append(round(_number(path, field, data[field]), 4))
    rows = [{**base, "slice_kind": "overall", "slice": "overall", "length_tokens": None,
             "score": round(_number(path, "average_overall_metric", data["average_overall_metric"]), 4),
             "n_runs": n_runs, "run_scores": ";".join(f"{r:g}" for r in runs) or None}]
    for field, kind in SLICES.items():
        if field not in data:
            continue
        slices = data[field]
        if not isinstance(slices, dict):
            raise InputError(f"{path}: field {field!r} must be an object of slice: score, got {type(slices).__name__}")
        for name, value in slices.items():
            rows.append({**base, "slice_kind": kind, "slice": str(name), "score": round(_number(path, f"{field}.{name}", value), 4),
                         "length_tokens": length_tokens(str(name)) if kind == "token_length" else None,
                         "n_runs": None, "run_scores": None})
    return rows


def _csv_rows(path: Path) -> tuple[list[str], list[dict]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            return list(reader.fieldnames or []), list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: not a readable CSV file ({exc})") from None


def _cell_int(path, line: int, field: str, text) -> int | None:
    if text is None or str(text).strip() == "":
        return None
    try:
        return int(float(text))
    except ValueError:
        raise InputError(f"{path}:{line}: field {field!r} must be an integer, got {text!r}") from None


def read_scores_csv(path: Path, default_mode: str | None = None) -> list[dict]:
    """``benchmark_scores`` rows from a CSV of its columns (scores as published, e.g. ×100).

    ``default_mode`` fills ``mode`` for a file without that column (a benchmark that has no
    thinking mode, as RULER); without it such a file is refused. ``best_of`` missing is read from a
    LongBench-Pro file name in ``source``/``source_path`` (``..._bon-3_summary.json``).
    """
    header, raw = _csv_rows(path)
    need = ("benchmark", "bench_model", "mode", "slice_kind", "slice", "score")
    missing = [c for c in need if c not in header and not (c == "mode" and default_mode)]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} (a benchmark_scores CSV needs {', '.join(need)})")
    rows = []
    for line, r in enumerate(raw, start=2):
        if default_mode and "mode" not in header:
            r["mode"] = default_mode
        for c in ("benchmark", "bench_model", "mode", "slice_kind", "slice"):
            if not (r.get(c) or "").strip():
                raise InputError(f"{path}:{line}: field {c!r} is empty")
        try:
            score = float(r["score"])
        except (TypeError, ValueError):
            raise InputError(f"{path}:{line}: field 'score' must be a number, got {r['score']!r}") from None
        if not math.isfinite(score):
            raise InputError(f"{path}:{line}: field 'score' must be finite, got {r['score']!r}")
        source = (r.get("source") or r.get("source_path") or str(path.name)).strip()
        best_of = _cell_int(path, line, "best_of", r.get("best_of"))
        if best_of is None and (m := SUMMARY.match(Path(source).name)):
            best_of = int(m.group("k"))
        length = _cell_int(path, line, "length_tokens", r.get("length_tokens"))
        if length is None and r["slice_kind"].strip() == "token_length":
            length = length_tokens(r["slice"])
        rows.append({
            "benchmark": r["benchmark"].strip(), "bench_model": r["bench_model"].strip(), "mode": r["mode"].strip(),
            "context_budget": _cell_int(path, line, "context_budget", r.get("context_budget")),
            "slice_kind": r["slice_kind"].strip(), "slice": r["slice"].strip(), "length_tokens": length, "score": score,
            "n_runs": _cell_int(path, line, "n_runs", r.get("n_runs")), "run_scores": (r.get("run_scores") or None),
            "best_of": best_of, "source": source,
        })
    return rows


def read_models_csv(path: Path) -> list[dict]:
    """``benchmark_models`` rows from a CSV of its columns."""
    header, raw = _csv_rows(path)
    missing = [c for c in MODEL_COLUMNS[:4] if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} (a benchmark_models CSV needs "
                         f"{', '.join(MODEL_COLUMNS[:4])})")
    return [benchmark_model_row(r.get("model"), r.get("benchmark"), r.get("bench_model"), r.get("match_kind"), r.get("note"),
                      where=f"{path}:{line}") for line, r in enumerate(raw, start=2)]


def benchmark_model_row(model, benchmark, bench_model, match_kind, note=None, where: str = "") -> dict:
    """One checked ``benchmark_models`` row."""
    prefix = f"{where}: " if where else ""
    for name, value in (("model", model), ("benchmark", benchmark), ("bench_model", bench_model)):
        if not (value or "").strip():
            raise InputError(f"{prefix}{name} is empty")
    if match_kind not in MATCH_KINDS:
        raise InputError(f"{prefix}match_kind must be one of {', '.join(MATCH_KINDS)}, got {match_kind!r}")
    return {"model": model.strip(), "benchmark": benchmark.strip(), "bench_model": bench_model.strip(),
            "match_kind": match_kind, "note": (note or "").strip() or None}


def read_benchmark_files(paths) -> tuple[list[dict], list[dict], list[str]]:
    """Every file of ``paths`` (files or folders of summaries): (score rows, model rows, the files read).

    All or nothing: the first file that does not parse raises, naming it; nothing has been kept.
    """
    scores: list[dict] = []
    models: list[dict] = []
    files: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*_summary.json") if SUMMARY.match(f.name))
            if not found:
                raise InputError(f"{p}: no LongBench-Pro summary files (<mode>_context-<N>_bon-<k>_summary.json) below it")
            for f in found:
                scores += read_summary(f)
                files.append(str(f))
        elif not p.exists():
            raise InputError(f"{p}: no such file or folder", kind="not_found")
        elif p.suffix.lower() == ".json":
            scores += read_summary(p)
            files.append(str(p))
        elif p.suffix.lower() == ".csv":
            header, _ = _csv_rows(p)
            if "match_kind" in header:
                models += read_models_csv(p)
            else:
                scores += read_scores_csv(p)
            files.append(str(p))
        else:
            raise InputError(f"{p}: not a LongBench-Pro summary (.json), a CSV of benchmark_scores or benchmark_models, "
                             "or a folder of summaries")
    return scores, models, files


# thesis_plasticity.csv's columns -> reference_metrics.metric
_THESIS_METRICS = ("ap_overall", "ap_first20", "ap_last20", "ap_drop", "bias_strength")
_RANGE = re.compile(r"^(\d+)k?-(\d+)k$")


def read_reference(plasticity: Path, by_length: Path) -> list[dict]:
    """``reference_metrics`` rows from the seeds' author's tables (``thesis_plasticity*.csv``)."""
    rows = []
    header, raw = _csv_rows(plasticity)
    missing = [c for c in ("model", *_THESIS_METRICS) if c not in header]
    if missing:
        raise InputError(f"{plasticity}: missing column(s) {', '.join(missing)}")
    for line, r in enumerate(raw, start=2):
        for metric in _THESIS_METRICS:
            text = (r.get(metric) or "").strip()
            if text:
                try:
                    value = float(text)
                except ValueError:
                    raise InputError(f"{plasticity}:{line}: field {metric!r} must be a number, got {text!r}") from None
                rows.append({"model": r["model"].strip(), "family": (r.get("family") or "").strip() or None, "source": "thesis",
                             "metric": metric, "lo_tokens": None, "hi_tokens": None, "value": value,
                             "note": (r.get("note") or "").strip() or None})
    header, raw = _csv_rows(by_length)
    ranges = {}
    for c in header:
        if c in ("model", "family"):
            continue
        m = _RANGE.match(c.strip().lower())
        if not m:
            raise InputError(f"{by_length}: column {c!r} is not a range of positions such as '8k-16k'")
        ranges[c] = (int(m.group(1)) * 1024, int(m.group(2)) * 1024)
    for line, r in enumerate(raw, start=2):
        for c, (lo, hi) in ranges.items():
            try:
                value = float(r[c])
            except (TypeError, ValueError):
                raise InputError(f"{by_length}:{line}: field {c!r} must be a number, got {r.get(c)!r}") from None
            rows.append({"model": r["model"].strip(), "family": (r.get("family") or "").strip() or None, "source": "thesis",
                         "metric": "ap_length", "lo_tokens": lo, "hi_tokens": hi, "value": value, "note": None})
    return rows


def bundled_rows() -> dict[str, list[dict]]:
    """What qkdb ships, per table (``benchmark_scores``, ``benchmark_models``, ``reference_metrics``).

    (``family`` in the author's tables is qkdb's registry family, added to the copies it ships.)
    """
    scores = read_scores_csv(bundled("longbench_pro.csv")) + read_scores_csv(bundled("ruler.csv"), default_mode="nonthinking")
    return {
        "benchmark_scores": scores,
        "benchmark_models": read_models_csv(bundled("benchmark_models.csv")),
        "reference_metrics": read_reference(bundled("thesis_plasticity.csv"), bundled("thesis_plasticity_length.csv")),
        "sink_anchors": read_sink_anchors(bundled("gu2025_sink_rates.csv")),
    }


def read_sink_anchors(path) -> list[dict]:
    """Gu et al.'s Table 1 as ``sink_anchors`` rows (the published % as a fraction)."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return [{"bench_model": r["model"], "hf_model": r["hf_model"], "variant": r["variant"],
                 "input_kind": r["input_kind"], "epsilon": float(r["epsilon"]), "tokens": int(r["tokens"]),
                 "texts": int(r["texts"]), "sink_rate": float(r["sink_rate_pct"]) / 100.0, "source": r["source"]}
                for r in csv.DictReader(fh)]

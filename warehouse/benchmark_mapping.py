"""Checks on a mapping from a captured model to a benchmarked one, before it is stored (SPEC §4.6).

A mapping decides which scores a model's plasticity is fitted against: one typo in the
benchmarked name would silently drop the model from every fit. So a mapping to a model without
scores on that benchmark is refused, naming the close names, and everything else a mapping
changes is said: that the captured model is not ingested yet, and which mapping it replaces.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from qkdb.errors import InputError

if TYPE_CHECKING:
    import duckdb


def close_names(name: str, known: list[str], n: int = 3) -> list[str]:
    """The known names closest to ``name``, case-insensitively (an exact match but for case first)."""
    by_lower = {k.lower(): k for k in known}
    same = [by_lower[name.lower()]] if name.lower() in by_lower else []
    near = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.6)
    return list(dict.fromkeys(same + [by_lower[k] for k in near]))[:n]


def did_you_mean(name: str, known: list[str]) -> str:
    """`` (did you mean 'A' or 'B'?)`` for the known names close to ``name``; empty when none is."""
    near = close_names(name, known)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""


def check_benchmark(con: duckdb.DuckDBPyConnection, benchmark: str) -> None:
    """Refuse a benchmark without scores (not found), naming the close names and the scored ones."""
    benches = [r[0] for r in con.execute("select distinct benchmark from benchmark_scores order by 1").fetchall()]
    if benchmark not in benches:
        raise InputError(f"no scores on a benchmark named {benchmark!r}{did_you_mean(benchmark, benches)}; scored "
                         f"benchmarks: {', '.join(benches) or 'none'}. Import its scores first (`qkdb benchmarks import`)",
                         kind="not_found")


def check_mapping(con: duckdb.DuckDBPyConnection, row: dict) -> list[str]:
    """Refuse ``row`` (a ``benchmark_models`` row) when its benchmarked model has no scores; else the notes it needs.

    Raises :class:`~qkdb.errors.InputError` (not found) naming the close names. The notes say
    when the captured model is not ingested and which stored mapping this one replaces.
    """
    benchmark, bench_model, model = row["benchmark"], row["bench_model"], row["model"]
    check_benchmark(con, benchmark)
    known = [r[0] for r in con.execute(
        "select distinct bench_model from benchmark_scores where benchmark = ? order by 1", [benchmark]).fetchall()]
    if bench_model not in known:
        near = close_names(bench_model, known)
        raise InputError(
            f"{bench_model!r} has no scores on {benchmark}"
            + (f": did you mean {' or '.join(repr(b) for b in near)}?" if near else "")
            + f" (`qkdb benchmarks list -b {benchmark}` lists its {len(known)} scored models); nothing was stored",
            kind="not_found")
    notes = []
    ingested = [r[0] for r in con.execute("select model from models order by 1").fetchall()]
    if model not in ingested:
        notes.append(f"warning: {model!r} is not ingested in this warehouse{did_you_mean(model, ingested)}: the "
                     "mapping is stored and joins its scores once a model of that name is ingested")
    old = con.execute("select bench_model, match_kind, origin from benchmark_models where model = ? and benchmark = ?",
                      [model, benchmark]).fetchall()
    for old_bench, old_kind, origin in old:
        whose = "the registry's" if origin == "bundled" else "your earlier"
        if (old_bench, old_kind) == (bench_model, row["match_kind"]):
            notes.append(f"{model} already stood for {old_bench} on {benchmark} ({old_kind}; {whose} mapping): unchanged")
        else:
            notes.append(f"this replaces {whose} mapping of {model} on {benchmark}: {old_bench} ({old_kind})"
                         + (" — `qkdb benchmarks list --mapped` shows each mapping's origin" if origin == "bundled" else ""))
    return notes


def unmapped_notes(con: duckdb.DuckDBPyConnection, scored: list[tuple[str, str]]) -> list[str]:
    """A note for each imported (benchmark, benchmarked model) no captured model stands for, with the ``map`` command."""
    if not scored:
        return []
    mapped = {(b, m) for b, m in con.execute("select distinct benchmark, bench_model from benchmark_models").fetchall()}
    ingested = [r[0] for r in con.execute("select model from models order by 1").fetchall()]
    notes = []
    for benchmark, bench_model in sorted(set(scored) - mapped):
        near = close_names(bench_model, ingested, n=1)
        model = near[0] if near else "MODEL"
        notes.append(f"no captured model stands for {bench_model} on {benchmark}, so its scores join nothing yet: "
                     f"`qkdb benchmarks map {model} '{bench_model}' --benchmark {benchmark} --match-kind exact` "
                     "(or base_vs_instruct / other)")
    return notes

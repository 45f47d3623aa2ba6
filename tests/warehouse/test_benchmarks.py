"""Benchmark scores beside the geometry (issue 39): import, storage, the CLI, and the fit against independent statistics.

The raw summaries in tests/data/longbench-pro-summaries/ are four files of LongBench-Pro's repository
unchanged (caskcsg/longcontext at 88fbeb8); the bundled longbench_pro.csv holds every published one.
The author's numbers are recomputed with scipy from the bundled CSVs, not typed in.
"""

from __future__ import annotations

import csv
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from qkdb import api
from qkdb.cli.app import app
from qkdb.errors import EXIT_CODES, InputError
from qkdb.warehouse import benchmark_files as src

SUMMARIES = Path(__file__).resolve().parents[1] / "data" / "longbench-pro-summaries"
# The author's 7 models (those with an overall LongBench-Pro score in thesis_plasticity.csv).
AUTHOR_7 = ("qwen3-4b", "qwen3-8b", "qwen3-14b", "ministral3-3b", "ministral3-8b", "ministral3-14b", "llama3.2-3b")


def _bundled_csv(name: str) -> list[dict]:
    with src.bundled(name).open(newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def test_the_importer_reads_the_raw_summaries_to_the_published_csv_values():
    published = {(r["bench_model"], r["mode"], int(r["context_budget"]), r["slice_kind"], r["slice"]): r
                 for r in _bundled_csv("longbench_pro.csv")}
    files = sorted(SUMMARIES.rglob("*_summary.json"))
    assert len(files) == 4
    for f in files:
        rows = src.read_summary(f)
        assert len(rows) > 20 and {r["slice_kind"] for r in rows} >= {"overall", "token_length", "difficulty"}
        for r in rows:
            p = published[(r["bench_model"], r["mode"], r["context_budget"], r["slice_kind"], r["slice"])]
            assert r["score"] == pytest.approx(float(p["score"]), abs=1e-4), (f, r["slice"])
            assert r["best_of"] == 3
            if r["slice_kind"] == "overall":
                assert r["n_runs"] == int(p["n_runs"])
                assert [float(x) for x in r["run_scores"].split(";")] == pytest.approx(
                    [float(x) for x in p["run_scores"].split(";")], abs=1e-4)
            if r["slice_kind"] == "token_length":
                assert r["length_tokens"] == int(r["slice"][:-1]) * 1024
        # the overall score is the mean of the iterations (x 100), as the file says
        raw = json.loads(f.read_text())
        assert rows[0]["score"] == pytest.approx(100 * raw["average_overall_metric"], abs=1e-4)
        # every slice of the file is one row, none dropped
        n_slices = sum(len(raw[k]) for k in src.SLICES if k in raw)
        assert len(rows) == 1 + n_slices


def _broken(tmp_path: Path, mutate) -> Path:
    folder = tmp_path / "out" / "Qwen3-8B"
    folder.mkdir(parents=True)
    good = SUMMARIES / "Qwen3-8B" / "nonthinking_context-120000_bon-3_summary.json"
    data = json.loads(good.read_text())
    mutate(data)
    path = folder / good.name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("average_overall_metric"), "average_overall_metric"),
    (lambda d: d["average_token_length_metric"].update({"64k": "n/a"}), "average_token_length_metric.64k"),
    (lambda d: d.update(average_difficulty_metric=[0.1, 0.2]), "average_difficulty_metric"),
    (lambda d: d.update(inference_iterations=0), "inference_iterations"),
])
def test_a_broken_summary_names_its_file_and_field(tmp_path, mutate, field):
    path = _broken(tmp_path, mutate)
    with pytest.raises(InputError) as err:
        src.read_summary(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_a_misnamed_file_and_a_broken_csv_are_refused_with_the_line(tmp_path):
    odd = tmp_path / "scores.json"
    odd.write_text("{}")
    with pytest.raises(InputError, match="not a LongBench-Pro summary"):
        src.read_summary(odd)
    bad = tmp_path / "mine.csv"
    bad.write_text("benchmark,bench_model,mode,slice_kind,slice,score\nmybench,M,nonthinking,overall,overall,12.5\n"
                   "mybench,M,nonthinking,token_length,8k,high\n")
    with pytest.raises(InputError, match=r"mine\.csv:3: field 'score' must be a number"):
        src.read_scores_csv(bad)
    nomode = tmp_path / "nomode.csv"
    nomode.write_text("benchmark,bench_model,slice_kind,slice,score\nmybench,M,overall,overall,1\n")
    with pytest.raises(InputError, match="missing column.*mode"):
        src.read_scores_csv(nomode)
    kinds = tmp_path / "map.csv"
    kinds.write_text("model,benchmark,bench_model,match_kind\nmine,longbench-pro,Qwen3-8B,close\n")
    with pytest.raises(InputError, match=r"map\.csv:2: match_kind must be one of exact, base_vs_instruct, other"):
        src.read_models_csv(kinds)


def test_the_shipped_tables_are_the_shared_files():
    rows = src.bundled_rows()
    assert len(rows["benchmark_scores"]) == len(_bundled_csv("longbench_pro.csv")) + len(_bundled_csv("ruler.csv"))
    assert {r["mode"] for r in rows["benchmark_scores"] if r["benchmark"] == "ruler"} == {"nonthinking"}
    exact = {r["model"] for r in rows["benchmark_models"] if r["match_kind"] == "exact"}
    assert exact == {"qwen3-4b", "qwen3-8b", "qwen3-14b"}  # SPEC §4.6
    lengths = [r for r in rows["reference_metrics"] if r["metric"] == "ap_length" and r["model"] == "qwen3-4b"]
    assert [(r["lo_tokens"], r["hi_tokens"]) for r in lengths] == [(0, 8192), (8192, 16384), (16384, 32768),
                                                                  (32768, 65536), (65536, 131072)]


# ---------------------------------------------------------------------------------------------
# Storing
# ---------------------------------------------------------------------------------------------


def _count(con, sql: str) -> int:
    return con.execute(sql).fetchall()[0][0]


def test_import_replaces_never_duplicates_and_a_broken_file_leaves_everything_as_it_was(home, tmp_path):
    con = api.benchmarks_connection(home)
    shipped = _count(con, "select count(*) from benchmark_scores")
    con.close()
    done = api.import_benchmarks([SUMMARIES], home)
    assert len(done["files"]) == 4 and done["stored"]["benchmark_scores"][1] == 0
    again = api.import_benchmarks([SUMMARIES / "Qwen3-8B"], home)
    assert again["stored"]["benchmark_scores"] == (52, 52)  # its two files' rows replace themselves
    con = api.benchmarks_connection(home)
    # the imported runs replace the shipped runs they repeat: the view has as many rows as before
    assert _count(con, "select count(*) from benchmark_scores") == shipped
    assert _count(con, "select count(*) from benchmark_scores where origin = 'imported'") == 104
    assert _count(con, "select count(distinct (bench_model, mode)) from benchmark_scores where origin = 'imported'") == 4
    con.close()
    # a folder with one good and one broken file: refused whole, the stored rows untouched
    mixed = tmp_path / "mixed"
    shutil.copytree(SUMMARIES / "Llama-3.2-3B-Instruct", mixed / "Llama-3.2-3B-Instruct")
    _broken(mixed.parent / "b", lambda d: d.pop("average_overall_metric")).parent.rename(mixed / "Qwen3-8B")
    before = (home / "benchmark_scores" / "imported.parquet").read_bytes()
    with pytest.raises(InputError, match="average_overall_metric"):
        api.import_benchmarks([mixed], home)
    assert (home / "benchmark_scores" / "imported.parquet").read_bytes() == before


def test_a_users_csv_and_mapping_reach_the_views(home, tmp_path):
    scores = tmp_path / "mybench.csv"
    scores.write_text(
        "benchmark,bench_model,mode,slice_kind,slice,score\n"
        + "".join(f"mybench,My-Model,nonthinking,token_length,{k}k,{s}\n" for k, s in ((8, 80), (16, 70), (32, 40)))
        + "mybench,My-Model,nonthinking,overall,overall,63.3\n")
    api.import_benchmarks([scores], home)
    api.map_benchmark_model("mine", "My-Model", benchmark="mybench", match_kind="exact", home=home)
    con = api.benchmarks_connection(home)
    row = con.execute("select model, bench_model, match_kind, origin from benchmark_models where model = 'mine'").fetchall()
    assert row == [("mine", "My-Model", "exact", "imported")]
    lengths = con.execute("select length_tokens from benchmark_scores where benchmark = 'mybench' and slice_kind = 'token_length' "
                          "order by 1").fetchall()
    assert [r[0] for r in lengths] == [8192, 16384, 32768]
    con.close()
    # a benchmarked model without scores there (a typo) is refused, naming the close names, and
    # nothing is stored (issue 47: it would silently drop the model from every fit)
    before = (home / "benchmark_models" / "imported.parquet").read_bytes()
    with pytest.raises(InputError, match="'My-Model-2' has no scores on mybench: did you mean 'My-Model'") as e:
        api.map_benchmark_model("mine", "My-Model-2", benchmark="mybench", match_kind="other", home=home)
    assert e.value.kind == "not_found"
    with pytest.raises(InputError, match="no scores on a benchmark named 'longbench'.*did you mean 'longbench-pro'"):
        api.map_benchmark_model("mine", "Qwen3-4B", benchmark="longbench", match_kind="other", home=home)
    assert (home / "benchmark_models" / "imported.parquet").read_bytes() == before
    # mapping again replaces, and says so; a registry model's mapping can be changed the same way
    done = api.map_benchmark_model("mine", "My-Model", benchmark="mybench", match_kind="other", home=home)
    assert any("replaces your earlier mapping of mine on mybench: My-Model (exact)" in n for n in done["notes"])
    assert any("'mine' is not ingested" in n for n in done["notes"])
    done = api.map_benchmark_model("llama3.2-3b", "Llama-3.1-8B-Instruct", match_kind="other", home=home)
    assert any("replaces the registry's mapping of llama3.2-3b on longbench-pro: Llama-3.2-3B-Instruct (base_vs_instruct)" in n
               for n in done["notes"])
    con = api.benchmarks_connection(home)
    assert _count(con, "select count(*) from benchmark_models where model = 'mine'") == 1
    assert con.execute("select bench_model, match_kind, origin from benchmark_models where model = 'llama3.2-3b' "
                       "and benchmark = 'longbench-pro'").fetchall() == [("Llama-3.1-8B-Instruct", "other", "imported")]
    con.close()


def test_cli_list_show_import_map(runner, home, tmp_path):
    out = runner.invoke(app, ["benchmarks", "list", "--mapped", "-f", "csv"])
    assert out.exit_code == 0, out.output
    listed = list(csv.DictReader(out.stdout.splitlines()))
    assert {r["bench_model"] for r in listed if r["benchmark"] == "longbench-pro"} == {
        "Qwen3-4B", "Qwen3-8B", "Qwen3-14B", "Ministral-3-3B-Instruct-2512", "Ministral-3-8B-Instruct-2512",
        "Ministral-3-14B-Instruct-2512", "Llama-3.2-3B-Instruct", "Llama-3.1-8B-Instruct"}
    assert {r["mode"] for r in listed} == {"nonthinking"}
    out = runner.invoke(app, ["benchmarks", "show", "qwen3-8b", "--mode", "all", "-f", "csv"])
    assert out.exit_code == 0
    shown = list(csv.DictReader(out.stdout.splitlines()))
    assert {r["mode"] for r in shown} == {"nonthinking", "thinking"}
    overall = {r["mode"]: float(r["score"]) for r in shown if r["slice_kind"] == "overall"}
    assert overall == pytest.approx({"nonthinking": 33.4126, "thinking": 44.3395})
    out = runner.invoke(app, ["benchmarks", "show", "no-such-model"])
    assert out.exit_code == EXIT_CODES["not_found"] and out.stdout == ""
    assert "qkdb benchmarks map" in out.stderr
    out = runner.invoke(app, ["benchmarks", "list", "--mode", "sleepy"])
    assert out.exit_code == EXIT_CODES["usage"] and "--mode" in out.stderr
    out = runner.invoke(app, ["benchmarks", "import", str(SUMMARIES / "Qwen3-8B")])
    assert out.exit_code == 0 and out.stdout == ""
    assert "imported 2 file(s): 52 score rows of 2 run(s)" in out.stderr
    missing = tmp_path / "nope.json"
    out = runner.invoke(app, ["benchmarks", "import", str(missing)])
    assert out.exit_code == EXIT_CODES["not_found"] and str(missing) in out.stderr and "Traceback" not in out.output
    out = runner.invoke(app, ["benchmarks", "map", "mine", "Qwen3-8B", "--match-kind", "same"])
    assert out.exit_code != 0 and "match_kind must be one of" in out.stderr
    out = runner.invoke(app, ["benchmarks", "map", "mine", "Qwen3-8B", "--match-kind", "exact"])
    assert out.exit_code == 0 and "mine stands for Qwen3-8B on longbench-pro (exact)" in out.stderr
    assert "'mine' is not ingested" in out.stderr
    # The typo: refused with exit 4, the close names given, the registry's mapping kept.
    out = runner.invoke(app, ["benchmarks", "map", "qwen3-4b", "NoSuch-Model", "--match-kind", "exact"])
    assert out.exit_code == EXIT_CODES["not_found"] and "'NoSuch-Model' has no scores on longbench-pro" in out.stderr
    out = runner.invoke(app, ["benchmarks", "map", "qwen3-4b", "qwen3-4B", "--match-kind", "exact"])
    assert out.exit_code == EXIT_CODES["not_found"] and "did you mean 'Qwen3-4B'" in out.stderr
    out = runner.invoke(app, ["benchmarks", "list", "--mapped", "-f", "csv"])
    mapped = {r["bench_model"]: r["captured_models"] for r in csv.DictReader(out.stdout.splitlines())}
    assert mapped["Qwen3-4B"] == "qwen3-4b (exact, registry)" and "mine (exact, yours)" in mapped["Qwen3-8B"]
    out = runner.invoke(app, ["benchmarks", "list", "-b", "nosuch"])
    assert out.exit_code == EXIT_CODES["not_found"] and "longbench-pro" in out.stderr
    # An import whose benchmarked model no captured model stands for says so, with the command.
    mine = tmp_path / "other.csv"
    mine.write_text("benchmark,bench_model,mode,slice_kind,slice,score\nlongbench-pro,Qwen3-99B,nonthinking,overall,overall,50\n")
    out = runner.invoke(app, ["benchmarks", "import", str(mine)])
    assert out.exit_code == 0 and "no captured model stands for Qwen3-99B on longbench-pro" in out.stderr
    assert "qkdb benchmarks map MODEL 'Qwen3-99B' --benchmark longbench-pro --match-kind exact" in out.stderr


# ---------------------------------------------------------------------------------------------
# The fit, against scipy and brute force
# ---------------------------------------------------------------------------------------------


def _brute_p(x, y, rank: bool = False) -> float:
    """Two-sided exact permutation p by brute force: the share of all n! pairings whose |r| reaches the observed one."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if rank:
        x, y = stats.rankdata(x), stats.rankdata(y)
    perms = np.array(list(itertools.permutations(range(len(y)))))
    xc = x - x.mean()
    yp = y[perms] - y.mean()
    r = yp @ xc / (np.linalg.norm(xc) * np.linalg.norm(yp, axis=1))
    obs = abs(np.corrcoef(x, y)[0, 1])
    return float(np.mean(np.abs(r) >= obs - 1e-12))


def _pearson(x, y):
    return stats.pearsonr(x, y)[0]


def _spearman(x, y):
    return stats.spearmanr(x, y)[0]


@pytest.fixture(scope="module")
def reference_con(tmp_path_factory):
    """An empty warehouse: its benchmark views hold the shipped scores and the author's values only."""
    home = tmp_path_factory.mktemp("bench") / "home"
    con = api.benchmarks_connection(home)
    yield con
    con.close()


def _author(con, drop_models=()):
    """The author's values joined to the shipped scores by hand (no view), for the independent check."""
    thesis = {r["model"]: r for r in _bundled_csv("thesis_plasticity.csv")}
    lengths = {r["model"]: r for r in _bundled_csv("thesis_plasticity_length.csv")}
    mapping = {r["model"]: r["bench_model"] for r in _bundled_csv("benchmark_models.csv") if r["benchmark"] == "longbench-pro"}
    lbp = _bundled_csv("longbench_pro.csv")
    overall = {r["bench_model"]: float(r["score"]) for r in lbp if r["mode"] == "nonthinking" and r["slice_kind"] == "overall"}
    by_len = {(r["bench_model"], r["slice"]): float(r["score"]) for r in lbp
              if r["mode"] == "nonthinking" and r["slice_kind"] == "token_length"}
    models = [m for m in AUTHOR_7 if m not in drop_models]
    drop = [float(thesis[m]["ap_drop"]) for m in models]
    score = [overall[mapping[m]] for m in models]
    ap_ret = [float(lengths[m]["64k-128k"]) / float(lengths[m]["0-8k"]) for m in models]
    sc_ret = [by_len[(mapping[m], "128k")] / by_len[(mapping[m], "8k")] for m in models]
    return drop, score, ap_ret, sc_ret


def _fit(con, x_metric: str, models_view: str | None = None, truncated: bool = False):
    db = con.execute("select current_database()").fetchall()[0][0]
    if models_view:
        con.execute(f"create or replace temp view benchmark_models as {models_view}")
    if truncated:  # the author's retention used LongBench-Pro's 128k slice, cut to a 120k budget for most models
        con.execute(f'create or replace temp view params as select * replace (true as benchmark_truncated) from "{db}".main.params')
    try:
        return con.execute(
            "select n, n_exact, pearson_r, spearman_rho, perm_p_pearson, perm_p_spearman, ci_low, ci_high, descriptive_only, why "
            "from plasticity_benchmark_fit where source = 'thesis' and benchmark = 'longbench-pro' and mode = 'nonthinking' "
            "and x_metric = ? order by span", [x_metric]).fetchall()
    finally:
        if models_view:
            con.execute("drop view temp.benchmark_models")
        if truncated:
            con.execute("drop view temp.params")


def test_the_authors_values_reproduce_the_published_numbers(reference_con):
    con = reference_con
    db = con.execute("select current_database()").fetchall()[0][0]
    # The author's 7 models: llama3.1-8b has the author's AP values and a LongBench-Pro score, but the
    # author did not use it (thesis_plasticity.csv gives it no score).
    seven = f"select * from \"{db}\".main.benchmark_models where model <> 'llama3.1-8b'"
    drop, score, ap_ret, sc_ret = _author(con)
    assert _pearson(drop, score) == pytest.approx(-0.675, abs=5e-4)
    assert _spearman(drop, score) == pytest.approx(-0.643, abs=5e-4)
    assert _pearson(ap_ret, sc_ret) == pytest.approx(0.943, abs=5e-4)
    assert _spearman(ap_ret, sc_ret) == pytest.approx(0.929, abs=5e-4)
    (n, n_exact, r, rho, p, p_rho, lo, hi, descriptive, why), = _fit(con, "ap_drop", seven)
    assert (n, n_exact) == (7, 3)
    assert r == pytest.approx(_pearson(drop, score), abs=1e-12) and rho == pytest.approx(_spearman(drop, score), abs=1e-12)
    assert p == pytest.approx(_brute_p(drop, score), abs=1e-12)
    assert p_rho == pytest.approx(_brute_p(drop, score, rank=True), abs=1e-12)
    assert 0.05 < p_rho < 0.2  # "p ~ 0.1": nothing a claim could rest on
    assert lo < r < hi and descriptive and why == "7 models (fewer than 10); 4 of 7 matches not exact"
    (n, n_exact, r, rho, p, p_rho, lo, hi, descriptive, _), = _fit(con, "ap_length_retention", truncated=True)
    assert n == 7 and r == pytest.approx(_pearson(ap_ret, sc_ret), abs=1e-12)
    assert rho == pytest.approx(_spearman(ap_ret, sc_ret), abs=1e-12)
    assert p == pytest.approx(_brute_p(ap_ret, sc_ret), abs=1e-12) and descriptive
    # with llama3.1-8b, as the registry maps it, 8 models
    (n, _, r, *_), = _fit(con, "ap_drop")
    assert n == 8 and r == pytest.approx(-0.644, abs=5e-4)


def test_retention_leaves_out_slices_longer_than_their_runs_budget(reference_con):
    """On the shipped LongBench-Pro files (issue 47): the 128k slice of a 120,000-token run scored cut inputs.

    By default the author's seven models no longer make one 8k-128k retention fit: the Qwen3 and
    Llama runs (budget 120,000) stop at 64k, the Ministral 3 runs (224,000) keep 128k, so the two
    spans are two fits, and each says how many slices it left out.
    """
    con = reference_con
    budgets = {r["bench_model"]: int(r["context_budget"]) for r in _bundled_csv("longbench_pro.csv") if r["context_budget"]}
    cut = con.execute("select bench_model, length_tokens, context_budget, truncated from benchmark_scores "
                      "where benchmark = 'longbench-pro' and slice_kind = 'token_length'").fetchall()
    assert all(t == (length > budget) == (length > budgets[m]) for m, length, budget, t in cut)
    assert {(m, length) for m, length, _, t in cut if t} >= {("Qwen3-4B", 131072), ("Qwen3-4B", 262144),
                                                              ("Ministral-3-8B-Instruct-2512", 262144)}
    assert ("Ministral-3-8B-Instruct-2512", 131072) not in {(m, length) for m, length, _, t in cut if t}
    seven = "select * from \"{}\".main.benchmark_models where model <> 'llama3.1-8b'".format(
        con.execute("select current_database()").fetchall()[0][0])
    con.execute(f"create or replace temp view benchmark_models as {seven}")
    try:
        fits = con.execute("select span, n, models, n_truncated_left_out, pearson_r from plasticity_benchmark_fit "
                           "where source = 'thesis' and x_metric = 'ap_length_retention' order by span").fetchall()
        lengths = con.execute("select model, max(length_tokens), any_value(n_truncated_left_out) from plasticity_length "
                              "where source = 'thesis' group by model order by model").fetchall()
    finally:
        con.execute("drop view temp.benchmark_models")
    assert [(span, n) for span, n, *_ in fits] == [("8k-128k", 3), ("8k-64k", 4)]
    assert fits[0][2].count("ministral3") == 3 and fits[0][3] == 3  # each Ministral run's 256k
    assert fits[1][3] == 8  # 128k and 256k of each of the four 120k runs
    # Independently: the 8k-64k retention of the four, from the shipped CSVs.
    thesis = {r["model"]: r for r in _bundled_csv("thesis_plasticity_length.csv")}
    mapping = {r["model"]: r["bench_model"] for r in _bundled_csv("benchmark_models.csv") if r["benchmark"] == "longbench-pro"}
    by_len = {(r["bench_model"], r["slice"]): float(r["score"]) for r in _bundled_csv("longbench_pro.csv")
              if r["mode"] == "nonthinking" and r["slice_kind"] == "token_length"}
    four = ["llama3.2-3b", "qwen3-14b", "qwen3-4b", "qwen3-8b"]
    ap = [float(thesis[m]["32k-64k"]) / float(thesis[m]["0-8k"]) for m in four]
    sc = [by_len[(mapping[m], "64k")] / by_len[(mapping[m], "8k")] for m in four]
    assert fits[1][4] == pytest.approx(_pearson(ap, sc), abs=1e-12)
    assert {m: (hi, n) for m, hi, n in lengths}["qwen3-4b"] == (65536, 2)
    assert {m: (hi, n) for m, hi, n in lengths}["ministral3-8b"] == (131072, 1)


def test_the_permutation_p_and_the_interval_on_planted_data(reference_con):
    """A user's benchmark with planted scores: the view's p is the brute-force p, the interval covers r."""
    con = reference_con
    rng = np.random.default_rng(5)
    for n in (5, 6, 8):
        x = rng.normal(size=n)
        y = 0.6 * x + rng.normal(size=n)
        con.execute("create or replace temp view plasticity_benchmark as select * from (values "
                    + ", ".join(f"('qkdb', 'm{i}', 'F', 'ap_drop', {float(x[i])!r}, 'b', 'B{i}', 'exact', 'nonthinking', {float(y[i])!r})"
                                for i in range(n))
                    + ") t(source, model, family, metric, value, benchmark, bench_model, match_kind, mode, score)")
        con.execute("create or replace temp view plasticity_length as select * from (values (null, null, null, null, null, "
                    "null, null, null, null::double, null::double, null::bigint, null::bigint, 0)) t(source, model, family, "
                    "benchmark, bench_model, match_kind, mode, lo_tokens, ap_retention, score_retention, first_length, "
                    "last_length, n_truncated_left_out) where false")
        try:
            (got,) = con.execute("select n, pearson_r, spearman_rho, perm_p_pearson, perm_p_spearman, ci_low, ci_high, n_boot, "
                                 "descriptive_only from plasticity_benchmark_fit").fetchall()
        finally:
            con.execute("drop view temp.plasticity_benchmark")
            con.execute("drop view temp.plasticity_length")
        assert got[0] == n and got[1] == pytest.approx(_pearson(x, y)) and got[2] == pytest.approx(_spearman(x, y))
        assert got[3] == pytest.approx(_brute_p(x, y), abs=1e-12)
        assert got[4] == pytest.approx(_brute_p(x, y, rank=True), abs=1e-12)
        assert got[5] <= got[1] <= got[6] and got[7] >= 1900
        assert got[8]  # n < 10


def test_modes_are_never_mixed_without_asking(reference_con):
    con = reference_con
    db = con.execute("select current_database()").fetchall()[0][0]
    modes = con.execute("select distinct mode from plasticity_benchmark union select distinct mode from plasticity_length").fetchall()
    assert modes == [("nonthinking",)]
    con.execute(f"create or replace temp view params as select * replace ('%' as benchmark_mode) from \"{db}\".main.params")
    try:
        fits = con.execute("select mode, n from plasticity_benchmark_fit where source = 'thesis' and x_metric = 'ap_drop' "
                           "and benchmark = 'longbench-pro' order by mode").fetchall()
        # each mode its own fit, over the same 8 models; never one fit of 16 points
        assert fits == [("nonthinking", 8), ("thinking", 8)]
        thinking = con.execute("select count(*) from plasticity_length where mode = 'thinking' and model = 'qwen3-8b'").fetchall()
        assert thinking[0][0] == 4  # 8k-64k: its 128k slice is longer than the run's 120,000-token budget
        # a model's overall and per-length scores come from one run of one mode
        runs = con.execute("select count(*) from benchmark_runs group by benchmark, bench_model, mode having count(*) > 1").fetchall()
        assert runs == []
    finally:
        con.execute("drop view temp.params")
    assert con.execute("select count(*) from plasticity_benchmark where mode = 'thinking'").fetchall()[0][0] == 0


def test_plasticity_length_meets_ap_and_scores_at_the_bins_end(reference_con):
    con = reference_con
    db = con.execute("select current_database()").fetchall()[0][0]
    # (with the slices longer than the run's budget, as the author used them)
    con.execute(f'create or replace temp view params as select * replace (true as benchmark_truncated) from "{db}".main.params')
    rows = con.execute("select length_tokens, lo_tokens, ap, score, first_length, last_length, ap_retention, score_retention "
                       "from plasticity_length where source = 'thesis' and model = 'qwen3-4b' order by length_tokens").fetchall()
    lengths = _bundled_csv("thesis_plasticity_length.csv")[0]
    assert lengths["model"] == "qwen3-4b"
    scores = {r["slice"]: float(r["score"]) for r in _bundled_csv("longbench_pro.csv")
              if r["bench_model"] == "Qwen3-4B" and r["mode"] == "nonthinking" and r["slice_kind"] == "token_length"}
    # the author's bins 0-8k ... 64k-128k meet the 8k ... 128k slices (256k has no AP: left out)
    assert [r[0] for r in rows] == [8192, 16384, 32768, 65536, 131072] and rows[0][1] == 0
    assert [r[2] for r in rows] == pytest.approx([float(v) for k, v in lengths.items() if k not in ("model", "family")])
    assert [r[3] for r in rows] == pytest.approx([scores[k] for k in ("8k", "16k", "32k", "64k", "128k")])
    assert {(r[4], r[5]) for r in rows} == {(8192, 131072)}
    assert rows[0][6] == pytest.approx(rows[-1][2] / rows[0][2]) and rows[0][7] == pytest.approx(scores["128k"] / scores["8k"])
    spans = con.execute("select distinct span from plasticity_benchmark_fit where x_metric = 'ap_length_retention'").fetchall()
    con.execute("drop view temp.params")
    assert spans == [("8k-128k",)]

"""The findings' intervals (qkdb.warehouse.intervals): what they resample, what they are about, and their bounds.

On planted warehouse tables (tests/helpers/tables.py) through the real views, as at publish time.
The calibration against planted truths is benchmarks/calibration.py's (a reduced run is in
tests/test_calibration_quick.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.tables import MODELS, build_tables, make_connection

from qkdb.warehouse import intervals
from qkdb.warehouse.inference import wilson_interval
from qkdb.warehouse.views import restrict_models

STANDALONE = [(f"m{i:02d}", "Fam A" if i % 2 else "Fam B", None, None, None, None) for i in range(intervals.MIN_MODELS)]


def _by_id(table: pa.Table) -> dict[tuple[str, str], dict]:
    return {(r["id"], r["scope"]): r for r in table.to_pylist()}


def _copied(tables: dict[str, pa.Table], copies: int = 4) -> dict[str, pa.Table]:
    """Every query head copied ``copies`` times into the GQA group of its own key head (no new information)."""
    out = dict(tables)
    for name in ("heads", "pca", "rotation", "complement", "rope_planes", "points", "plasticity", "plasticity_profile",
                 "plasticity_2d", "recency", "attention_mass", "attention_mass_text", "frequency_usage"):
        t = tables[name]
        if t.num_rows == 0:
            continue
        parts = []
        for c in range(copies):
            head = pa.compute.add(pa.compute.multiply(t["head"], copies), c)
            part = t.set_column(t.schema.get_field_index("head"), "head", head.cast(pa.int32()))
            if name == "heads":  # the copies read their original's key head
                part = part.set_column(part.schema.get_field_index("kv_head"), "kv_head", t["head"])
            parts.append(part)
        out[name] = pa.concat_tables(parts)
    m = tables["models"]
    for col, factor in (("n_q_heads", copies), ("gqa_ratio", copies)):
        i = m.schema.get_field_index(col)
        m = m.set_column(i, col, pa.compute.multiply(m[col], factor).cast(m.schema.field(col).type))
    out["models"] = m
    return out


def _widths(con) -> dict[tuple[str, str], float]:
    return {k: r["ci_high"] - r["ci_low"] for k, r in _by_id(intervals.compute(con)).items()
            if r["ci_low"] is not None and r["ci_high"] is not None}


@pytest.mark.parametrize("models", [["a1"], None], ids=["one model", "pooled models"])
def test_copying_query_heads_into_gqa_groups_leaves_every_interval_as_it_was(models):
    tables = build_tables()
    original, copied = make_connection(tables), make_connection(_copied(tables))
    for con in (original, copied):
        if models:
            restrict_models(con, models)
    before, after = _widths(original), _widths(copied)
    assert before.keys() == after.keys() and len(before) > 20
    for key, width in before.items():
        # Sums and medians resample the same groups: the same width; shares and correlations
        # estimate how alike a group's heads are, to within the resampling noise.
        assert after[key] == pytest.approx(width, rel=0.15, abs=1e-9), key


def test_resampling_query_heads_as_if_independent_would_narrow_them():
    # What the copies did before key-head groups were the unit: a query head was one (the test above
    # is what changed).
    tables = _copied(build_tables())
    grouped = make_connection(tables)
    restrict_models(grouped, ["a1"])
    heads = make_connection(tables)
    restrict_models(heads, ["a1"])
    heads.execute("create temp view finding_inputs as select * replace (unit as kv_group) from memory.main.finding_inputs")
    by_group = _widths(grouped)  # (once: each call computes every interval)
    ratios = [w / by_group[k] for k, w in _widths(heads).items() if by_group.get(k)]
    assert np.median(ratios) < 0.7


def test_the_same_warehouse_gives_the_same_intervals():
    tables = build_tables()
    first = intervals.compute(make_connection(tables)).drop_columns(["computed_at"])
    again = intervals.compute(make_connection(tables)).drop_columns(["computed_at"])
    assert first.equals(again)


def test_a_snapshot_summed_on_several_cursors_gives_the_same_intervals_as_the_view():
    # What a publish's refresh does (snapshot_inputs, then the sums on three cursors at once) against
    # a connection reading the view on one: the same numbers to the last bit.
    tables = build_tables()
    plain = intervals.compute(make_connection(tables)).drop_columns(["computed_at"])
    con = make_connection(tables)
    intervals.snapshot_inputs(con)
    name = intervals._snapshot_of(con)
    assert name and con.execute(f"select count(*) from {name}.main.finding_inputs").fetchall()[0][0] > 0
    assert intervals.compute(con).drop_columns(["computed_at"]).equals(plain)
    # (and the findings view reads the snapshot through the temporary view that shadows its own)
    assert con.execute("select count(*) from findings").fetchall()[0][0] > 0


def test_a_snapshot_is_its_connections_own_and_goes_when_released(tmp_path):
    # A database attached to one connection is seen by every connection of the process to the same
    # file: another one (restricted to a model, here) must not take it for its own snapshot.
    import qkdb
    from helpers.datasets import make_dataset

    home = tmp_path / "home"
    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, home=home, workers=1,
                    family="Toy", gqa_ratio=2, n_layers=2)
    alone = qkdb.connect(home, read_only=True)
    try:
        restrict_models(alone, ["toy-b"])
        expected = intervals.compute(alone).drop_columns(["computed_at"])
    finally:
        alone.close()
    first, other = qkdb.connect(home, read_only=True), qkdb.connect(home, read_only=True)
    try:
        intervals.snapshot_inputs(first)
        name = intervals._snapshot_of(first)
        assert name and intervals._snapshot_of(other) is None
        assert other.execute("select count(*) from duckdb_databases() where database_name = ?", [name]).fetchall() == [(1,)]
        restrict_models(other, ["toy-b"])
        assert intervals.compute(other).drop_columns(["computed_at"]).equals(expected)
        intervals.release_snapshot(first)
        assert other.execute("select count(*) from duckdb_databases() where database_name = ?", [name]).fetchall() == [(0,)]
        assert first.execute("select count(*) from duckdb_views() where temporary and view_name = 'finding_inputs'"
                             ).fetchall() == [(0,)]
    finally:
        first.close()
        other.close()


@pytest.mark.parametrize("at_once", [True, False], ids=["meanwhile", "afterwards"])
def test_a_refresh_computing_the_values_meanwhile_gives_the_views_findings(at_once):
    # What a publish's refresh does (the measured values on their own cursor while the intervals are
    # resampled; in a large warehouse, afterwards) against the findings view read whole on one
    # connection: the same rows.
    tables = build_tables()
    plain = make_connection(tables)
    plain.execute("set threads = 1")
    intervals.install(plain)
    expected = plain.execute("select * from findings order by id, scope").fetchall()
    con = make_connection(tables)
    con.execute("set threads = 1")
    intervals.snapshot_inputs(con)
    with intervals.values_meanwhile(con, at_once=at_once) as ready:
        intervals.install(con, intervals.compute(con))
        ready()
        assert con.execute("select count(*) from duckdb_views() where temporary and view_name = 'finding_values'"
                           ).fetchall() == [(1,)]
        got = con.execute("select * from findings order by id, scope").fetchall()
    assert got == expected and len(got) > 20


def test_what_each_interval_is_about():
    con = make_connection(build_tables(models=STANDALONE))
    got = _by_id(intervals.compute(con))
    pooled = got[("003.F1.pos_var_q", "overall")]
    # Enough models pooled for a bootstrap over them: the claim is about models like them, and the
    # models are resampled.
    m = intervals.MIN_MODELS
    assert pooled["n_units"] == m and pooled["ci_method"].startswith(f"bootstrap over {m} models")
    rows = {r[0]: r[1:] for r in con.execute(
        "select id, estimand, n_models from findings where status <> 'no data'").fetchall()}
    assert rows["003.F1.pos_var_q"] == ("models like these", m)
    assert rows["003.F2.accuracy"][0] == "these models"  # every model's own value
    assert rows["002.lemma"][0] == "these models"
    # Fewer models than a bootstrap over them needs: the jackknife over models, with Student's t.
    few = make_connection(build_tables(models=STANDALONE[:3]))
    r = _by_id(intervals.compute(few))[("003.F2.fisher", "overall")]  # (a mean without a finite-vector bias)
    assert r["ci_method"].startswith("jackknife over 3 models, t with 2 df") and r["n_units"] == 3
    means = few.execute("select avg(fisher_pc0) from heads group by model order by model").fetchall()
    sd = float(np.std([m[0] for m in means], ddof=1))
    # (equal models: the t interval on the three models' means)
    assert r["ci_high"] - r["ci_low"] == pytest.approx(2 * 4.302653 * sd / math.sqrt(3), rel=1e-6)
    # One model: the overall finding is about that model, its key-head groups resampled.
    restrict_models(few, ["m00"])
    assert few.execute("select estimand from findings where id = '003.F1.pos_var_q'").fetchall()[0][0] == "these models"
    r = _by_id(intervals.compute(few))[("003.F1.pos_var_q", "overall")]
    assert r["ci_method"].startswith("approximate: stratified jackknife over 20 key-head groups, in strata of layers (t with 16 df")


def _set(tables: dict, name: str, **columns) -> dict:
    t = tables[name]
    for col, value in columns.items():
        i = t.schema.get_field_index(col)
        t = t.set_column(i, col, pa.array([value] * t.num_rows, t.schema.field(col).type))
    return {**tables, name: t}


def test_bounded_values_stay_in_bounds_and_a_share_of_all_heads_is_not_a_point():
    # Every head classifies its vectors perfectly and every head has a recency bias: 100% in every
    # resample, yet finitely many heads and vectors.
    tables = _set(build_tables(models=STANDALONE[:1]), "heads", qk_accuracy_pc01=1.0, n_q=500, n_k=500)
    got = _by_id(intervals.compute(make_connection(tables)))
    acc = got[("003.F2.accuracy", "overall")]
    # 20 heads (each its own key head) at 100%: together they rule out no more than ~3/20 of heads
    # below it (and far less than that of their 20,000 vectors).
    lo, _ = wilson_interval(20, 20)
    assert acc["ci_high"] == 1.0 and acc["ci_low"] == pytest.approx(lo) and acc["ci_low"] < wilson_interval(2e4, 2e4)[0]
    assert "shares of vectors" in acc["ci_method"]
    # and it says why such a claim stays open at this size
    assert "20 key-head groups leave up to 16.1% of a model's heads below it unseen" in acc["ci_method"]
    assert "ruling out x% takes about 3.8/x groups per model" in acc["ci_method"]
    positive = got[("002.F2.bias_positive", "overall")]
    assert positive["estimate"] == 1.0 and positive["ci_high"] == 1.0
    assert positive["ci_low"] == pytest.approx(wilson_interval(20, 20)[0])  # 20 heads, each its own group
    for (fid, _), r in got.items():
        if r["ci_low"] is None:
            continue
        assert r["ci_low"] <= r["ci_high"], fid
        if fid.startswith(("003.F4.", "002.F2.", "003.F2.accuracy", "002.F3.", "003.F1.pos_var", "003.F1.pc0")):
            assert 0.0 <= r["ci_low"] and r["ci_high"] <= 1.0, fid


def test_a_maximum_has_no_interval_and_says_why():
    got = _by_id(intervals.compute(make_connection(build_tables())))
    r = got[("002.F4.max_angle_r", "overall")]
    assert r["ci_low"] is None and r["ci_high"] is None and r["ci_method"].startswith("none:")


def test_few_vectors_widen_an_interval_towards_the_value_at_many():
    tables = build_tables(models=STANDALONE[:1])
    many = _by_id(intervals.compute(make_connection(_set(tables, "heads", n_q=10**9, n_k=10**9))))
    few = _by_id(intervals.compute(make_connection(_set(tables, "heads", n_q=64, n_k=64))))
    key = ("002.F1.abs_r_k_a", "overall")  # reads low with few vectors (x_bias < 0)
    assert few[key]["ci_low"] == pytest.approx(many[key]["ci_low"])
    # -0.09 * d / n = -0.09 * 16 / 64 on every head: the mean moves up by that much at most.
    assert few[key]["ci_high"] == pytest.approx(many[key]["ci_high"] + 0.09 * 16 / 64)
    assert "finite-vector bias" in few[key]["ci_method"] and "vector" not in many[key]["ci_method"]


def test_normal_sums_stand_in_for_the_weights_over_many_units(monkeypatch):
    con = make_connection(build_tables(models=STANDALONE[:2]))
    restrict_models(con, ["m00"])
    monkeypatch.setattr(intervals, "JACKKNIFE_UNITS", 4)  # (a bootstrap at these 20 groups)
    exact = _by_id(intervals.compute(con))
    monkeypatch.setattr(intervals, "EXACT_UNITS", 5)
    normal = _by_id(intervals.compute(con))
    compared = 0
    for key, r in exact.items():
        # (the differences between taxonomy categories rest on 4 of these 20 groups each: the normal law
        # of their sums needs many groups carrying them, as it has beyond EXACT_UNITS = 1,000)
        if key[0] in ("003.ap.content_vs_qpos", "003.ap.qpos_vs_posdom"):
            continue
        if "bootstrap over" in r["ci_method"] and "normal sums" in normal[key]["ci_method"]:
            width = r["ci_high"] - r["ci_low"]
            assert normal[key]["ci_low"] == pytest.approx(r["ci_low"], abs=0.15 * width), key
            assert normal[key]["ci_high"] == pytest.approx(r["ci_high"], abs=0.15 * width), key
            compared += 1
    assert compared >= 10


def test_weights_too_large_to_keep_are_drawn_again_by_block_and_give_the_same_bytes(monkeypatch):
    """Issue 48: a large set of weights is drawn a block at a time and not kept (two kept sets of a
    family's median were a 140,000-head refresh's peak); the draws, so the intervals, are the same."""
    tables = build_tables()
    monkeypatch.setattr(intervals, "MAX_WEIGHTS", 20_000)  # (blocks of a few hundred resamples)
    kept = intervals.compute(make_connection(tables)).drop_columns(["computed_at"])
    reps = intervals._Replicates()
    monkeypatch.setattr(intervals, "_Replicates", lambda: reps)
    monkeypatch.setattr(intervals, "KEEP_WEIGHTS", 0)
    drawn = intervals.compute(make_connection(tables)).drop_columns(["computed_at"])
    assert drawn.equals(kept)
    assert reps._weights == {}  # (nothing held past its finding)
    bootstrapped = [m for m in kept.column("ci_method").to_pylist() if m and "bootstrap over" in m]
    assert len(bootstrapped) >= 10


def test_few_key_head_groups_get_the_stratified_jackknife_with_t_down_to_four(monkeypatch):
    # One model of 4 layers x 5 heads (each its own key head): 20 groups in 4 strata, 16 df
    tables = build_tables(models=STANDALONE[:1])
    con = make_connection(tables)
    r = _by_id(intervals.compute(con))[("003.F2.fisher", "overall")]  # a mean without a finite-vector bias
    assert r["ci_method"].startswith("approximate: stratified jackknife over 20 key-head groups, in strata of layers (t with 16 df")
    heads = con.execute("select layer, fisher_pc0 from heads order by layer, head").fetchnumpy()
    x, layer = heads["fisher_pc0"], heads["layer"]
    # independently: the stratified variance of the mean of 20 equal groups, t with 16 df
    var = sum(5 / 4 * ((x[layer == h] - x[layer == h].mean()) ** 2).sum() for h in range(4)) / 20 ** 2
    half = 2.119905 * math.sqrt(var)
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(x.mean() - half), pytest.approx(x.mean() + half))
    # from JACKKNIFE_UNITS groups on, the bootstrap
    monkeypatch.setattr(intervals, "JACKKNIFE_UNITS", 20)
    assert _by_id(intervals.compute(con))[("003.F2.fisher", "overall")]["ci_method"].startswith("approximate: bootstrap over 20")
    monkeypatch.undo()
    # from APPROXIMATE_UNITS groups on, no longer labelled approximate
    monkeypatch.setattr(intervals, "APPROXIMATE_UNITS", 20)
    assert _by_id(intervals.compute(con))[("003.F2.fisher", "overall")]["ci_method"].startswith("stratified jackknife")
    monkeypatch.undo()
    # 2 layers x 2 heads: 4 groups, 2 strata, 2 df: still an interval (t = 4.30); a median needs a bootstrap
    small = {**tables, "heads": tables["heads"].filter(pa.compute.and_(pa.compute.less(tables["heads"]["layer"], 2),
                                                                       pa.compute.less(tables["heads"]["head"], 2)))}
    got = _by_id(intervals.compute(make_connection(small)))
    assert got[("003.F2.fisher", "overall")]["ci_method"].startswith(
        "approximate: stratified jackknife over 4 key-head groups, in strata of layers (t with 2 df")
    assert got[("002.F1.slope_ratio", "overall")]["ci_low"] is None
    assert "a median needs a bootstrap" in got[("002.F1.slope_ratio", "overall")]["ci_method"]
    # 3 groups: none, and why
    three = {**small, "heads": small["heads"].slice(0, 3)}
    r = _by_id(intervals.compute(make_connection(three)))[("003.F2.fisher", "overall")]
    assert r["ci_low"] is None and r["ci_method"].startswith("too few key-head groups for an interval (3 in 1 stratum")


def test_a_layer_with_one_group_joins_the_next():
    cluster = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    layer = np.array([0, 1, 1, 2, 5, 0, 0, 3])
    # Model 0: layer 0 (one group) joins layer 1 -> {0,1,2}; layer 2 and 5 (one each) -> {3,4};
    # model 1: layer 0 has two; layer 3 (one, the last) joins the one before.
    assert intervals._strata(cluster, layer).tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    assert intervals._strata(np.array([0]), np.array([3])).tolist() == [0]


def test_a_refresh_within_a_small_memory_cap_stores_the_same_bytes_and_gives_the_settings_back(tmp_path, monkeypatch):
    # Past its memory cap DuckDB spills the refresh's rows to a temporary folder: the same intervals
    # and findings; and the database's settings (shared by the process's connections) are as before.
    import pyarrow.parquet as pq

    import qkdb
    from qkdb.warehouse import catalog

    from helpers.datasets import make_dataset

    home = tmp_path / "home"
    for i, name in enumerate(("toy-a", "toy-b")):
        qkdb.ingest(make_dataset(tmp_path / f"ds{i}", seed=i), name, home=home, workers=1,
                    family="Toy", gqa_ratio=2, n_layers=2)

    def stored():
        iv = pq.read_table(home / "finding_intervals" / "data.parquet").drop_columns(["computed_at"])
        return iv, pq.read_table(home / "finding_results" / "data.parquet")

    other = qkdb.connect(home, read_only=True)  # (the same DuckDB instance as the refresh's)
    try:
        settings = "select current_setting('threads'), current_setting('memory_limit'), current_setting('temp_directory')"
        before = other.execute(settings).fetchall()
        catalog.refresh_intervals(home)
        unbounded = stored()
        assert other.execute(settings).fetchall() == before
        attempts = []
        real = catalog._refresh
        monkeypatch.setattr(catalog, "_refresh", lambda con, home, folder: attempts.append(1) or real(con, home, folder))
        # 48 MB: within it; 20 MB: too little for DuckDB to run the queries at all, the refresh runs
        # again without the cap.
        for cap, tries in (("48MB", 1), ("20MB", 2)):
            monkeypatch.setattr(catalog, "REFRESH_MEMORY", cap)
            attempts.clear()
            catalog.refresh_intervals(home)
            assert other.execute(settings).fetchall() == before
            capped = stored()
            assert capped[0].equals(unbounded[0]) and capped[1].equals(unbounded[1]), cap
            assert len(attempts) == tries, cap
    finally:
        other.close()


def test_a_large_warehouses_snapshot_is_a_file_that_gives_the_same_bytes_and_is_removed(tmp_path, monkeypatch):
    # From SNAPSHOT_ON_DISK_HEADS heads the refresh keeps finding_inputs in a file of the home (DuckDB
    # then holds only what its cap allows): the same intervals and findings as in memory, the file
    # gone afterwards, and a file a killed refresh left there removed by the next.
    import pyarrow.parquet as pq

    import qkdb
    from qkdb.warehouse import catalog

    from helpers.datasets import make_dataset

    home = tmp_path / "home"
    qkdb.ingest(make_dataset(tmp_path / "ds", seed=3), "toy", home=home, workers=1, family="Toy", gqa_ratio=2, n_layers=2)

    def stored():
        iv = pq.read_table(home / "finding_intervals" / "data.parquet").drop_columns(["computed_at"])
        return iv, pq.read_table(home / "finding_results" / "data.parquet")

    in_memory = stored()
    seen = []
    real = intervals.snapshot_inputs

    def spy(con, folder=None):
        real(con, folder)
        seen.append((folder, intervals._snapshot_row(con)[1]))
        assert folder is not None and Path(seen[-1][1]).is_file() and Path(seen[-1][1]).parent == folder
        # (the sums read the file's rows: the temporary view shadowing finding_inputs names its database)
        assert con.execute("select count(*) from finding_inputs").fetchall()[0][0] > 0

    monkeypatch.setattr(intervals, "snapshot_inputs", spy)
    monkeypatch.setattr(catalog, "SNAPSHOT_ON_DISK_HEADS", 1)
    left = home / catalog.SNAPSHOT_DIR / "qkdb_snapshot_killed.duckdb"
    left.parent.mkdir()
    left.write_bytes(b"left by a killed refresh")
    catalog.refresh_intervals(home)
    assert len(seen) == 1
    on_disk = stored()
    assert on_disk[0].equals(in_memory[0]) and on_disk[1].equals(in_memory[1])
    assert not (home / catalog.SNAPSHOT_DIR).exists()


@pytest.mark.parametrize("where", ["", "where false"])
def test_the_sums_columns_are_duckdbs_own_values_with_each_string_one_object(where):
    import duckdb

    con = duckdb.connect()
    sql = ("select * from (values ('a', 1, 2.5, 7::bigint), (null, null, null, 8), ('a', 3, null, 9), ('bb', 4, 1.0, 10)) "
           f"t(s, i, x, n) {where}")
    ours, theirs = intervals._columns(con.sql(sql).to_arrow_table()), con.sql(sql).fetchnumpy()
    assert list(ours) == list(theirs)
    for name in theirs:
        a, b = np.ma.asarray(ours[name]), np.ma.asarray(theirs[name])
        assert a.tolist() == b.tolist() and a.dtype == b.dtype, name
    if not where:
        assert ours["s"][0] is ours["s"][2]  # (one object for each distinct string)


def test_a_refresh_run_again_on_its_connection_stores_the_same_findings(tmp_path):
    # Past its memory cap a refresh runs again on the same connection (catalog.refresh_intervals):
    # what it kept for the first run (its snapshot, the small views it keeps as tables) is made anew.
    import pyarrow.parquet as pq

    import qkdb
    from qkdb.warehouse import catalog

    from helpers.datasets import make_dataset

    home = tmp_path / "home"
    qkdb.ingest(make_dataset(tmp_path / "ds"), "toy", home=home, workers=1, family="Toy", gqa_ratio=2, n_layers=2)
    once = pq.read_table(home / "finding_results" / "data.parquet")
    con = catalog.open_catalog(home, read_only=True)
    try:
        catalog._refresh(con, home, None)
        catalog._refresh(con, home, None)
        kept = {r[0] for r in con.execute("select table_name from duckdb_tables() where temporary").fetchall()}
    finally:
        con.close()
    assert set(catalog._FROZEN) <= kept
    assert pq.read_table(home / "finding_results" / "data.parquet").equals(once)

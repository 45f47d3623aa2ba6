"""The warehouse on disk: publish, re-ingest, remove, and the catalog opened by plain DuckDB."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import qkdb
from qkdb.errors import InputError, RegistryError, WarehouseError
from qkdb.warehouse import store
from qkdb.warehouse.schema import TABLES

from helpers.datasets import make_dataset

FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2)


def _count(con, sql):
    return con.execute(sql).fetchall()[0][0]


def test_empty_warehouse_has_typed_empty_views(home):
    con = qkdb.connect(read_only=False)
    try:
        for name, table in TABLES.items():
            cols = [r[0] for r in con.execute(f"describe {name}").fetchall()]
            assert cols == [c.name for c in table.columns], name
            assert _count(con, f"select count(*) from {name}") == 0
        assert _count(con, "select count(*) from head_metrics") == 0
    finally:
        con.close()


def test_ingest_fills_every_core_table(dataset, home):
    res = qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    assert (res.heads_done, res.heads_skipped) == (8, 0)
    con = qkdb.connect()
    try:
        assert _count(con, "select count(*) from heads where model = 'toy'") == 8
        assert _count(con, "select count(*) from pca where model = 'toy'") == 8 * 10
        assert _count(con, "select count(*) from rotation") == 8
        assert _count(con, "select count(*) from head_metrics") == 8
        assert _count(con, "select count(*) from ingest_runs") == 1
        row = con.execute(
            "select family, gqa_ratio, head_dim, n_heads, source from models where model = 'toy'"
        ).fetchall()[0]
        assert row == ("Toy", 2, 16, 8, "path")
        # the planted structure: recency bias positive, keys drift faster than queries
        n_pos, ratio = con.execute(
            "select count(*) filter (where bias_strength > 0), median(abs(alpha_k) / abs(alpha_q)) from rotation"
        ).fetchall()[0]
        assert n_pos == 8 and 1.6 < ratio < 2.4
        depth = con.execute("select distinct depth, depth_bin from heads order by depth").fetchall()
        assert depth == [(0.0, 0), (1.0, 9)]
        # What a reader needs to judge the finite-vector bias: vectors, dimension, and the texts
        # they come from (the toy dataset's example ids are 0-3, in queries and keys alike).
        assert con.execute("select distinct n_q, n_k, head_dim, n_texts from heads").fetchall() == [(800, 800, 16, 4)]
    finally:
        con.close()


def test_reingest_replaces_and_unchanged_is_skipped(dataset, home):
    first = qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    again = qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    assert again.unchanged and again.heads_done == 0
    forced = qkdb.ingest(dataset, "toy", workers=1, force=True, **FACTS)
    assert forced.heads_done == 8 and forced.run_id != first.run_id
    partial = qkdb.ingest(dataset, "toy", heads="0", workers=1, **FACTS)
    assert partial.heads_done == 4
    con = qkdb.connect()
    try:
        assert _count(con, "select count(*) from heads") == 4  # replaced, never duplicated
        assert _count(con, "select count(*) from ingest_runs") == 3  # history is kept
    finally:
        con.close()
    versions = [p for p in (home / store.STORE / "toy").iterdir() if p.name != "current"]
    assert len(versions) == 1  # old versions are cleaned up


def test_two_models_and_remove(tmp_path, home):
    a = make_dataset(tmp_path / "a", seed=1)
    b = make_dataset(tmp_path / "b", seed=2)
    qkdb.ingest(a, "toy-a", workers=1, **FACTS)
    qkdb.ingest(b, "toy-b", workers=1, **FACTS)
    assert qkdb.remove("toy-a") is True
    assert qkdb.remove("toy-a") is False
    con = qkdb.connect()
    try:
        for name in TABLES:
            models = {r[0] for r in con.execute(f"select distinct model from {name}").fetchall()}
            assert "toy-a" not in models, name
        assert _count(con, "select count(*) from heads where model = 'toy-b'") == 8
    finally:
        con.close()


def test_catalog_opens_with_plain_duckdb_from_another_directory(dataset, home, tmp_path):
    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    code = (
        "import duckdb, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
        "print(con.sql('select count(*) from rotation').fetchall()[0][0]); "
        "print(con.sql('select count(*) from head_metrics').fetchall()[0][0])"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", code, str(home / "qk.duckdb")], cwd=elsewhere, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["8", "8"]


def test_workers_give_the_same_numbers(dataset, home, tmp_path):
    qkdb.ingest(dataset, "one", workers=1, **FACTS)
    qkdb.ingest(dataset, "two", workers=2, **FACTS)
    con = qkdb.connect()
    try:
        q = "select * exclude (model) from rotation where model = '{}' order by layer, head"
        one, two = con.execute(q.format("one")).fetchnumpy(), con.execute(q.format("two")).fetchnumpy()
        for col in ("r_q_a", "alpha_k", "bias_strength", "separation_strength"):
            np.testing.assert_array_equal(one[col], two[col])
    finally:
        con.close()


def test_run_groups_submits_at_once_and_closing_it_stops_the_pool(dataset, monkeypatch):
    from concurrent.futures import ProcessPoolExecutor

    from qkdb.ingest.engine.pool import run_groups
    from qkdb.ingest.sources.plan import plan_groups
    from qkdb.ingest.sources.layout import discover
    from qkdb.ingest.options import IngestOptions
    from qkdb.ingest.sources.registry import ModelSpec

    calls = []
    for name in ("submit", "shutdown"):
        real = getattr(ProcessPoolExecutor, name)
        monkeypatch.setattr(ProcessPoolExecutor, name,
                            lambda self, *a, _n=name, _f=real, **k: calls.append(_n) or _f(self, *a, **k))
    groups = plan_groups(discover(dataset), 2)
    spec, options = ModelSpec(model="toy", n_layers=2, gqa_ratio=2), IngestOptions(points=0, complement=False)
    outcomes = run_groups(groups, spec, options, set(), workers=2)
    assert calls == ["submit"] * 4  # before anything is asked of it: the look-ahead of 2 per worker
    first = next(outcomes)
    assert first.error is None and first.rows is not None
    outcomes.close()
    assert calls[-1] == "shutdown"  # closed early: the pool is shut down, not left running
    with pytest.raises(StopIteration):
        next(outcomes)
    everything = list(run_groups(groups, spec, options, set(), workers=2))
    assert sorted((o.layer, o.head) for o in everything) == [(l, h) for l in range(2) for h in range(4)]


def test_same_model_concurrently_is_refused(dataset, home):
    lock = store.acquire_model(home, "toy")
    try:
        with pytest.raises(WarehouseError, match="another qkdb process"):
            qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    finally:
        lock.release()
    assert not store.is_ingested(home, "toy")


def test_bad_input_leaves_the_warehouse_as_it_was(dataset, home):
    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    before = sorted(p.relative_to(home) for p in (home / store.STORE).rglob("*"))
    (dataset / "l01h03q" / "data.parquet").write_bytes(b"garbage")
    with pytest.raises(qkdb.QkdbError, match="l01h03q"):
        qkdb.ingest(dataset, "toy", workers=1, force=True, **FACTS)
    after = sorted(p.relative_to(home) for p in (home / store.STORE).rglob("*"))
    assert before == after
    assert not any((home / store.STAGING).iterdir())
    res = qkdb.ingest(dataset, "toy", workers=1, force=True, skip_bad_heads=True, **FACTS)
    assert (res.heads_done, res.heads_skipped) == (7, 1) and res.skipped[0][0] == "l01h03"


def test_unknown_model_without_facts_suggests_close_names(dataset):
    with pytest.raises(RegistryError, match="llama3.2-3b"):
        qkdb.ingest(dataset, "llama3.2-3", workers=1)


def test_registry_model_from_local_path_uses_registry_facts(tmp_path, home):
    ds = make_dataset(tmp_path / "q", layers=2, q_heads=4, kv_heads=2)  # qwen3-0.6b: ratio 16/8 = 2
    res = qkdb.ingest(ds, "qwen3-0.6b", workers=1)
    assert res.heads_done == 8
    con = qkdb.connect()
    try:
        row = con.execute("select family, n_layers, rope_theta, in_paper from models").fetchall()[0]
        assert row == ("Qwen3", 28, 1000000.0, True)
        assert con.execute("select max(depth_bin) from heads").fetchall()[0][0] == 0  # layers 0, 1 of 28
    finally:
        con.close()


def test_length_dependent_rope_scaling_fits_frequencies_and_malformed_scaling_is_refused(dataset, home):
    # dynamic NTK (and longrope) change the frequencies with each text's length: with nothing recorded
    # about which were used, the planes' frequencies are fitted (said once), never computed from theta.
    res = qkdb.ingest(dataset, "toy", workers=1, rope_theta=10000.0,
                      rope_scaling={"rope_type": "dynamic", "factor": 2.0}, **FACTS)
    assert any("'dynamic'" in n and "fits each plane's frequency" in n for n in res.notes), res.notes
    con = qkdb.connect()
    try:
        assert con.execute("select distinct omega_source from rope_planes").fetchall() == [("fitted",)]
        assert con.execute("select rope_source, rope_inv_freq from models").fetchall() == [("fitted", None)]
    finally:
        con.close()
    with pytest.raises(qkdb.QkdbError, match="factor"):
        qkdb.ingest(dataset, "toy", workers=1, force=True, rope_theta=10000.0,
                    rope_scaling={"rope_type": "linear"}, **FACTS)
    res = qkdb.ingest(dataset, "toy", workers=1, rope_theta=10000.0,
                      rope_scaling={"rope_type": "linear", "factor": 2.0}, **FACTS)
    con = qkdb.connect()
    try:
        scaling, source, freq = con.execute("select rope_scaling, rope_source, rope_inv_freq from models").fetchall()[0]
        assert '"linear"' in scaling and res.heads_done == 8 and source == "derived"
        np.testing.assert_allclose(freq, 10000.0 ** (-np.arange(0, 16, 2) / 16) / 2.0, rtol=1e-12)
    finally:
        con.close()


def _rewrite(path, vectors, positions):
    from qkdb.ingest.sources.layout import write_head

    folder = path.parent
    layer, head, kind = int(folder.name[1:3]), int(folder.name[4:6]), folder.name[6]
    write_head(folder.parent, layer, head, kind, vectors, positions)


def test_non_finite_rows_are_refused_or_dropped_and_counted(dataset, home):
    from qkdb.ingest.sources.layout import read_head

    path = dataset / "l00h01q" / "data.parquet"
    data = read_head(path)
    X = data.vectors.copy()
    X[:5, 0] = np.nan
    X[5:8, 3] = np.inf
    _rewrite(path, X, data.positions)
    with pytest.raises(InputError, match=rf"{path}: 8 vector values .*\(8 NaN or infinite\) in 8 of {len(X)} rows"):
        qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    result = qkdb.ingest(dataset, "toy", workers=1, drop_bad_vectors=True, **FACTS)
    assert [n for n in result.notes if "dropped" in n] == [
        "dropped 8 rows whose vectors hold NaN, ±inf or values beyond ±65504 (--drop-bad-vectors), "
        "counted in heads.n_dropped, in 1 file: l00h01q 8"
    ]
    con = qkdb.connect()
    try:
        n_q, dropped = con.execute("select n_q, n_dropped from heads where layer = 0 and head = 1").fetchall()[0]
        assert (n_q, dropped) == (len(X) - 8, 8)
    finally:
        con.close()


def test_too_few_vectors_and_constant_positions_are_named(dataset, home):
    from qkdb.ingest.sources.layout import read_head

    path = dataset / "l01h00q" / "data.parquet"
    data = read_head(path)
    _rewrite(path, data.vectors[:10], data.positions[:10])
    with pytest.raises(qkdb.QkdbError, match=r"l01h00q.*10 usable vectors, fewer than the minimum 16"):
        qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    _rewrite(path, data.vectors, np.full(len(data.positions), 7))
    with pytest.raises(qkdb.QkdbError, match=r"l01h00q.*have position 7"):
        qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    assert not store.is_ingested(home, "toy")


def test_skipped_heads_are_recorded_in_ingest_runs(dataset, home):
    import json

    (dataset / "l00h02q" / "data.parquet").write_bytes(b"not parquet")
    res = qkdb.ingest(dataset, "toy", workers=1, skip_bad_heads=True, **FACTS)
    assert res.heads_skipped == 1
    con = qkdb.connect()
    try:
        done, n_skipped, skipped = con.execute("select heads_done, heads_skipped, skipped from ingest_runs").fetchall()[0]
    finally:
        con.close()
    assert (done, n_skipped) == (7, 1)
    (entry,) = json.loads(skipped)
    assert entry["head"] == "l00h02" and "cannot read parquet" in entry["reason"]


def test_empty_dataset_and_stray_folders(tmp_path, home):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(qkdb.QkdbError, match="no query head folders"):
        qkdb.ingest(empty, "toy", workers=1, **FACTS)
    ds = make_dataset(tmp_path / "ds")
    (ds / "layer0-head1").mkdir()
    (ds / "layer0-head1" / "data.parquet").write_bytes(b"x")
    res = qkdb.ingest(ds, "toy", workers=1, **FACTS)
    assert res.heads_done == 8 and res.notes[0] == "ignored folder layer0-head1"
    assert [n for n in res.notes[1:] if "no rope_theta is known" not in n] == []  # (no theta: fitted, said)


def test_head_dim_differing_between_query_and_key_is_named(dataset, home):
    from qkdb.ingest.sources.layout import read_head

    path = dataset / "l00h00k" / "data.parquet"
    data = read_head(path)
    _rewrite(path, data.vectors[:, :8], data.positions)
    with pytest.raises(qkdb.QkdbError, match=r"l00h00q.*head_dim 16 differs from its key head's 8.*l00h00k"):
        qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    assert not store.is_ingested(home, "toy")


def test_fit_rows_subsamples_only_the_phase_statistics_and_is_recorded(dataset, home):
    # 800 vectors per file: 1,600 pooled per head, fewer than the default 2,048 (all are used).
    for model, rows in (("every", None), ("ample", 100_000), ("default", 2048), ("few", 200)):
        qkdb.ingest(dataset, model, workers=1, fit_rows=rows, **FACTS)
    con = qkdb.connect(home)

    def rows_of(model, sql):
        return con.execute(sql.format(model=model)).fetchall()

    stats = "select angle_r, ring, omega_r_squared from complement where model = '{model}' order by layer, head, pair"
    planes = "select coherence_q, coherence_k, radius_q from rope_planes where model = '{model}' order by layer, head, j"
    exact = "select var_frac from complement where model = '{model}' order by layer, head, pair"
    core = "select * exclude (model, omega, omega_r_squared) from head_metrics where model = '{model}' order by layer, head"
    assert rows_of("every", stats) == rows_of("ample", stats) == rows_of("default", stats)
    assert rows_of("every", planes) == rows_of("ample", planes)
    assert rows_of("few", stats) != rows_of("every", stats)  # 200 rows: another sample, other values
    assert rows_of("few", planes) != rows_of("every", planes)
    assert rows_of("few", exact) == rows_of("every", exact)  # var_frac never subsamples
    assert rows_of("few", core) == rows_of("every", core)  # nor anything outside §4.3 (omega is of it)
    recorded = {m: json.loads(p)["fit_rows"] for m, p in con.execute(
        "select model, parameters from ingest_runs").fetchall()}
    assert recorded == {"every": None, "ample": 100_000, "default": 2048, "few": 200}


@pytest.mark.parametrize(("option", "message"), [
    (dict(fit_rows=1), "fit_rows must be >= 2"), (dict(points=-1), "points must be >= 0"),
    (dict(n_components=0), "n_components must be >= 1"),
])
def test_out_of_range_options_are_input_errors_before_any_work(dataset, home, option, message):
    with pytest.raises(qkdb.QkdbError, match=message):
        qkdb.ingest(dataset, "toy", workers=1, **option, **FACTS)
    assert not store.is_ingested(home, "toy")


def test_floats_are_stored_plain_and_keys_as_dictionaries(dataset, home):
    import pyarrow.parquet as pq

    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    current = home / store.STORE / "toy" / "current"
    for name in ("heads", "pca", "rotation", "points", "complement", "rope_planes"):
        meta = pq.ParquetFile(current / name / "data.parquet").metadata
        assert meta.num_rows > 0, name
        for i in range(meta.num_columns):
            col = meta.row_group(0).column(i)
            field = TABLES[name].arrow_schema.field(col.path_in_schema)
            dictionary = any("DICTIONARY" in e for e in col.encodings)
            assert dictionary == (field.name in TABLES[name].dictionary_columns), (name, field.name, col.encodings)
            assert not (dictionary and pa.types.is_floating(field.type)), (name, field.name)
            if field.name in ("layer", "head", "kind"):
                assert dictionary, (name, field.name)


def test_tables_are_written_in_large_row_groups(dataset, home, monkeypatch):
    import pyarrow.parquet as pq

    qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    current = home / store.STORE / "toy" / "current"
    for name in ("heads", "pca", "rotation", "points"):
        assert pq.ParquetFile(current / name / "data.parquet").metadata.num_row_groups == 1, name
    # past the threshold the buffer is flushed: several row groups, the same rows
    monkeypatch.setattr(store.Staging, "ROW_GROUP_ROWS", 2048)
    qkdb.ingest(dataset, "toy", workers=1, force=True, **FACTS)
    points = pq.ParquetFile(current / "points" / "data.parquet")
    assert points.metadata.num_row_groups == 4 and points.metadata.num_rows == 8 * 1024


def test_rows_with_a_null_position_are_dropped_and_said_once(dataset, home):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # A query file and a key file with null positions (the key file serves two query heads).
    for name, n_null in (("l00h01q", 3), ("l01h00k", 2)):
        path = dataset / name / "data.parquet"
        table = pq.read_table(path)
        pos = table.column("position").to_pylist()
        pos[:n_null] = [None] * n_null
        pq.write_table(table.set_column(table.schema.get_field_index("position"), "position",
                                        pa.array(pos, table.schema.field("position").type)), path)
    result = qkdb.ingest(dataset, "toy", workers=1, **FACTS)
    said = [n for n in result.notes if "dropped" in n]
    assert said == ["dropped 5 rows whose vector or position is null, counted in heads.n_dropped, in 2 files: "
                    "l00h01q 3, l01h00k 2"]
    con = qkdb.connect()
    try:
        got = dict(((l, h), n) for l, h, n in con.execute("select layer, head, n_dropped from heads").fetchall())
    finally:
        con.close()
    assert got[(0, 1)] == 3 and got[(1, 0)] == got[(1, 1)] == 2 and got[(0, 0)] == 0


def test_no_connection_of_qkdb_draws_duckdbs_progress_bar(dataset, home):
    # DuckDB draws a progress bar on stdout for a query of over 2 s by default: on a large warehouse
    # the findings' refresh after an ingest, or a long `qkdb query`, would write it among the data.
    qkdb.ingest(dataset, "toy", workers=1, family="Toy", gqa_ratio=2, n_layers=2)
    for read_only in (True, False):
        con = qkdb.connect(home, read_only=read_only)
        try:
            assert con.execute("select current_setting('enable_progress_bar')").fetchall() == [(False,)]
        finally:
            con.close()

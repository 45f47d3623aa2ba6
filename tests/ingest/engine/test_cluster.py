"""Ingesting on a Ray cluster (issue 22): a real Ray head on loopback, real worker processes, real kills.

The tests marked ``cluster`` need the extra (``pip install -e '.[cluster]'``) and start a head
with ``ray start`` (tests/helpers/ray_head.py); every process it started is killed at the end.
The others check what needs no Ray: addresses, the missing-extra message, that qkdb never loads
Ray unless asked, and several ``--path`` on one machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import duckdb
import pytest

from qkdb.errors import EXIT_CODES, InputError
from qkdb.ingest.engine.cluster import check_cluster_address
from qkdb.warehouse import store
from qkdb.warehouse.schema import TABLES

from helpers.datasets import make_dataset

QKDB = [sys.executable, "-m", "qkdb"]


def _simulated(root, name: str, *, seed: int, layers: int = 2, q_heads: int = 4, vectors: int = 400, d: int = 32):
    from qkdb.ingest import simulate

    return simulate(root / name, model=name, layers=layers, q_heads=q_heads, kv_heads=2, head_dim=d, vectors=vectors,
                    seed=seed, workers=1)


def _tables(home) -> dict[str, list]:
    """Every versioned table's rows, in a fixed order; ``models.ingested_at`` (the publish time) left out."""
    con = duckdb.connect()
    out = {}
    for name, table in TABLES.items():
        if not table.versioned:
            continue
        cols = ", ".join(f'"{c.name}"' for c in table.columns if c.name != "ingested_at")
        out[name] = con.sql(
            f"select {cols} from read_parquet('{home}/{name}/*/*.parquet', hive_partitioning = true) order by all"
        ).fetchall()
    return out


def _runs(home) -> list[tuple]:
    con = duckdb.connect(str(home / "qk.duckdb"), read_only=True)
    try:
        return con.sql("select model, cluster, ray_version from ingest_runs order by model").fetchall()
    finally:
        con.close()


def _nothing_of(home, model: str) -> None:
    """No trace of ``model`` in the warehouse: no version, no table link, no run, no staging left over."""
    assert not store.has_history(home, model)
    assert not list(home.glob(f"*/model={model}"))
    assert not list((home / store.STAGING).glob(f"{model}.*"))


# -- without Ray ---------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["local", "auto", "10.1.2.3:6379", "head-0.ray:10001", "ray://head:10001"])
def test_cluster_addresses_of_every_form_are_taken(address):
    assert check_cluster_address(f" {address} ") == address


@pytest.mark.parametrize("address", ["", "head", "head:", ":6379", "head:port", "head:70000", "ray://head",
                                     "http://head:8265", "ray://head:1/x"])
def test_other_cluster_addresses_are_refused_naming_the_forms(address):
    with pytest.raises(InputError, match="give 'local', 'auto', HOST:PORT or ray://HOST:PORT"):
        check_cluster_address(address)


def test_a_missing_ray_is_one_line_naming_the_extra(tmp_path):
    # `import ray` fails as it does where the extra is not installed (None in sys.modules).
    ds = make_dataset(tmp_path / "ds")
    code = "import sys; sys.modules['ray'] = None; from qkdb.__main__ import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "ingest", "--path", str(ds), "--model", "toy", "--family", "Toy", "--gqa-ratio",
         "2", "--n-layers", "2", "--cluster", "local", "--home", str(tmp_path / "home")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == EXIT_CODES["system"]  # the machine lacks the extra; the command line is right
    assert done.stderr.strip().splitlines() == [
        "error: --cluster needs Ray (ray is missing): pip install 'qkdb[cluster]'"
    ]
    assert done.stdout == ""
    assert not (tmp_path / "home").exists()


def test_qkdb_never_imports_ray_unless_a_cluster_is_asked_for(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    code = (
        "import sys, qkdb\n"
        f"qkdb.ingest({str(ds)!r}, model='toy', family='Toy', gqa_ratio=2, n_layers=2, workers=1, home={str(tmp_path / 'h')!r})\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


def test_several_paths_are_several_models_named_by_their_datasets(tmp_path):
    a, b = _simulated(tmp_path, "sim-a", seed=1), _simulated(tmp_path, "sim-b", seed=2)
    home = tmp_path / "home"
    done = subprocess.run([*QKDB, "ingest", "--path", str(a), "--path", str(b), "-q", "-j", "1", "--home", str(home)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert store.ingested_models(home) == ["sim-a", "sim-b"]
    assert [r[1:] for r in _runs(home)] == [(None, None), (None, None)]  # no cluster: nothing recorded
    refused = subprocess.run([*QKDB, "ingest", "--path", str(a), "--path", str(b), "--model", "x", "--home", str(home)],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert "--model goes with one --path" in refused.stderr


def test_a_failed_model_among_several_paths_fails_alone_without_a_cluster(tmp_path):
    a, b = _simulated(tmp_path, "sim-a", seed=1), _simulated(tmp_path, "sim-b", seed=2)
    bad = next(iter(sorted(b.glob("l00h00q/data.parquet"))))
    bad.write_bytes(b"not a parquet file")
    home = tmp_path / "home"
    done = subprocess.run([*QKDB, "ingest", "--path", str(a), "--path", str(b), "-q", "-j", "1", "--home", str(home)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_CODES["input"]  # the first (only) failure's kind
    assert str(bad) in done.stderr and "1 of 2 models failed" in done.stderr
    assert store.ingested_models(home) == ["sim-a"]


def test_a_workers_tables_travel_compressed_and_come_back_equal():
    # What a task sends the driver: every table as a zstd Arrow stream. The points' NULL
    # complement scores are most of a model's uncompressed bytes; packed they cost next to nothing.
    import pyarrow as pa

    from qkdb.warehouse import ArrowRows, pack_tables, unpack_tables

    rows = ArrowRows()
    n = 5000
    rows.add(TABLES["points"], {"layer": 0, "head": 1, "idx": list(range(n)), "kind": ["q"] * n,
                                "position": list(range(n)), "pc0": [0.5 * i for i in range(n)]})
    tables = rows.tables()
    packed = pack_tables(tables)
    back = unpack_tables(packed)
    assert back["points"].equals(tables["points"]) and back["points"].schema == TABLES["points"].arrow_schema
    assert back["points"].column("c0").null_count == n
    assert sum(map(len, packed.values())) < tables["points"].nbytes / 20
    assert isinstance(packed["points"], bytes) and pa.ipc.open_stream(packed["points"]).schema == tables["points"].schema


def _published(tmp_path, *names) -> tuple:
    """A warehouse with these simulated models ingested on this machine, and their datasets."""
    from qkdb import api

    home = tmp_path / "home"
    found = [_simulated(tmp_path, n, seed=i, vectors=200) for i, n in enumerate(names, 1)]
    for ds in found:
        api.ingest(ds, home=home, workers=1, points=0, complement=False)
    return home, found


def _damage_log(home, model: str) -> None:
    """Overwrite every ``ingest_runs`` file of ``model`` with bytes no reader takes for parquet."""
    logs = sorted((home / "ingest_runs" / f"model={model}").glob("*.parquet"))
    assert logs
    for f in logs:
        f.write_bytes(b"not a parquet file")


def test_only_the_targets_run_logs_are_read_for_their_fingerprints(tmp_path):
    import pyarrow as pa

    from qkdb import pipeline

    home, (a, b) = _published(tmp_path, "sim-a", "sim-b")
    mine = pipeline._published_fingerprints(home, ["sim-a", "sim-new", "../bad"])
    assert list(mine) == ["sim-a"] and len(mine["sim-a"]) == 64
    _damage_log(home, "sim-b")
    assert pipeline._published_fingerprints(home, ["sim-a"]) == mine  # sim-b's damaged log is not read
    with pytest.raises(pa.ArrowInvalid):  # (reading them all would: what run_on_cluster did)
        pipeline._published_fingerprints(home)


def test_a_batchs_models_are_the_names_given_or_those_its_readable_datasets_name(tmp_path):
    from qkdb import pipeline

    a = _simulated(tmp_path, "sim-a", seed=1, vectors=200)
    no_name = make_dataset(tmp_path / "anonymous", n=200)
    assert pipeline._target_models([(None, "llama3.2-1b"), (a, None), (no_name, "toy")]) == [
        "llama3.2-1b", "sim-a", "toy"]
    # A path only the cluster's nodes have, or a dataset that does not name its model: every log is read.
    assert pipeline._target_models([(a, None), (tmp_path / "on-the-nodes-only", None)]) is None
    assert pipeline._target_models([(no_name, None)]) is None
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "qkdb_dataset.json").write_text("{not json")
    assert pipeline._target_models([(tmp_path / "broken", None)]) is None


SECRET = "hf_driver_secret_0123456789"


@pytest.mark.parametrize("address", ["local", "10.0.0.5:6379", "ray://head:10001"])
def test_a_tasks_arguments_carry_no_token_by_default(tmp_path, monkeypatch, address):
    import pickle

    from qkdb import pipeline
    from qkdb.ingest import IngestOptions

    monkeypatch.setenv("HF_TOKEN", SECRET)  # the driver's own token: the workers resolve theirs
    targets = [(None, "llama3.2-1b"), (tmp_path / "ds", None)]
    calls = pipeline._cluster_calls(targets, IngestOptions(), None, {}, address)
    assert [c.args[2].token for c in calls] == [None, None]
    assert all(SECRET.encode() not in pickle.dumps(c.args) for c in calls)
    assert SECRET not in repr(IngestOptions(token=SECRET))  # nor in a repr, where logs and tracebacks show it


def test_a_token_given_is_sent_unless_the_local_instances_workers_have_it(tmp_path, monkeypatch):
    import pickle

    from qkdb import pipeline
    from qkdb.ingest import IngestOptions

    monkeypatch.setenv("HF_TOKEN", SECRET)

    def sent(token, address):
        (call,) = pipeline._cluster_calls([(None, "llama3.2-1b")], IngestOptions(token=token), None, {}, address)
        return call.args[2].token, token.encode() in pickle.dumps(call.args)

    # --cluster local: a Ray instance this process starts, whose workers inherit its environment.
    assert sent(SECRET, "local") == (None, False)
    assert sent("hf_another_token", "local") == ("hf_another_token", True)
    # A running cluster: the driver cannot know what its nodes hold (docs/cluster.md says how to avoid it).
    assert sent(SECRET, "10.0.0.5:6379") == (SECRET, True)


def test_a_workers_result_carries_no_token_back(tmp_path):
    import pickle

    from qkdb import pipeline
    from qkdb.ingest import IngestOptions

    ds = _simulated(tmp_path, "sim-a", seed=1, vectors=200)
    computed = pipeline.compute_model(str(ds), None, IngestOptions(token=SECRET, workers=1, points=0, complement=False),
                                      None, {})
    assert isinstance(computed, pipeline._Computed) and computed.staged.done == 8
    assert SECRET.encode() not in pickle.dumps(computed)  # (it goes through Ray's object store)


# -- on a real Ray head ----------------------------------------------------------------------------

cluster = pytest.mark.cluster


@pytest.fixture(scope="module")
def ray_head():
    from helpers.ray_head import running_head

    with running_head() as head:
        yield head


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return [_simulated(root, f"sim-{i}", seed=i) for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def local_tables(tmp_path_factory, datasets):
    """The same datasets ingested on this machine, with the local pool: what the cluster must reproduce."""
    home = tmp_path_factory.mktemp("local") / "home"
    args = [a for ds in datasets for a in ("--path", str(ds))]
    done = subprocess.run([*QKDB, "ingest", *args, "-q", "-j", "2", "--home", str(home)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return _tables(home)


def _on_cluster(head, home, *args, timeout=300):
    return subprocess.run([*QKDB, "ingest", *args, "--cluster", head.address, "-q", "--home", str(home)],
                          capture_output=True, text=True, timeout=timeout, env=head.env)


class _BusyHead:
    """Ray's client on a head that fails to start this client's server ``fails`` times, then connects.

    (The real failure — the head's per-client server missing its start-up deadline under load — is
    not reproducible on demand; this stands in for ``ray`` inside RayCluster only.)"""

    __version__ = "test"

    def __init__(self, fails: int):
        self.fails, self.calls, self.shutdowns = fails, 0, 0

    def init(self, **kwargs):
        self.calls += 1
        if self.calls <= self.fails:
            raise ConnectionAbortedError("Initialization failure from server:\n")

    def shutdown(self):
        self.shutdowns += 1


@pytest.mark.parametrize("fails, connected", [(0, True), (2, True), (3, False)])
def test_a_ray_client_retries_a_head_that_failed_to_start_its_server(monkeypatch, fails, connected):
    import socket

    from qkdb.errors import ClusterError
    from qkdb.ingest.engine import cluster as cluster_module

    monkeypatch.setattr(cluster_module.time, "sleep", lambda s: None)
    with socket.socket() as listener:  # the head's port answers (the probe before connecting)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"ray://127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setattr(cluster_module, "import_ray", lambda: _BusyHead(fails))
        rc = cluster_module.RayCluster(address)
        if connected:
            with rc:
                pass
            assert rc.ray.calls == fails + 1
        else:
            with pytest.raises(ClusterError, match=r"Initialization failure from server: \(3 attempts\)"):
                rc.__enter__()
            assert rc.ray.calls == cluster_module.CLIENT_ATTEMPTS == 3


@cluster
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_unreachable_cluster_is_one_network_line_at_once(tmp_path, scheme):
    from helpers.ray_head import free_port

    address = f"{scheme}127.0.0.1:{free_port()}"  # nothing listens there
    ds = make_dataset(tmp_path / "ds")
    done = subprocess.run(
        [*QKDB, "ingest", "--path", str(ds), "--cluster", address, "--home", str(tmp_path / "home")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == EXIT_CODES["network"]
    assert done.stderr.strip().splitlines() == [f"error: cannot reach the Ray cluster at {address}: connection refused"]
    assert not (tmp_path / "home").exists()


@cluster
def test_a_cluster_ingest_gives_the_tables_of_a_local_one(ray_head, datasets, local_tables, tmp_path):
    import ray

    home = tmp_path / "home"
    done = _on_cluster(ray_head, home, *[a for ds in datasets for a in ("--path", str(ds))])
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert sorted(line.split(":")[0] for line in done.stderr.splitlines() if line.startswith("ingested")) == [
        "ingested sim-1", "ingested sim-2", "ingested sim-3"]
    assert _tables(home) == local_tables
    assert _runs(home) == [(f"sim-{i}", ray_head.address, ray.__version__) for i in (1, 2, 3)]
    # The findings' intervals were computed for the batch, as after a local publish.
    con = duckdb.connect(str(home / "qk.duckdb"), read_only=True)
    assert con.sql("select count(*) from finding_intervals").fetchall()[0][0] > 0
    con.close()

    again = _on_cluster(ray_head, home, *[a for ds in datasets for a in ("--path", str(ds))])
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("already ingested from these files") == 3  # checked on the workers


@cluster
def test_the_api_through_the_ray_client(ray_head, datasets, local_tables, tmp_path):
    home = tmp_path / "home"
    code = (
        "import qkdb\n"
        f"r = qkdb.ingest({str(datasets[1])!r}, cluster={ray_head.client_address!r}, home={str(home)!r})\n"
        "print(r.model, r.heads_done)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ray_head.env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sim-2", "8"]
    assert {t: [r for r in rows if "sim-2" in r] for t, rows in _tables(home).items()} == {
        t: [r for r in rows if "sim-2" in r] for t, rows in local_tables.items()}


@cluster
def test_a_damaged_model_fails_alone_naming_its_file(ray_head, tmp_path):
    good = [_simulated(tmp_path, "good-1", seed=1), _simulated(tmp_path, "good-2", seed=2)]
    damaged = _simulated(tmp_path, "damaged", seed=3)
    bad = damaged / "l01h02q" / "data.parquet"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # cut short, as by a failed copy
    home = tmp_path / "home"
    done = _on_cluster(ray_head, home, "--path", str(good[0]), "--path", str(damaged), "--path", str(good[1]))
    assert done.returncode == EXIT_CODES["input"]  # a damaged dataset: bad input
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: damaged:")]
    assert len(errors) == 1 and str(bad) in errors[0], done.stderr
    assert "1 of 3 models failed: damaged" in done.stderr
    assert store.ingested_models(home) == ["good-1", "good-2"]
    _nothing_of(home, "damaged")


@cluster
def test_a_computed_model_is_published_under_its_lock_and_waits_for_it(ray_head, datasets, tmp_path):
    import time

    import ray

    home = tmp_path / "home"
    lock = store.acquire_model(home, "sim-1")  # another ingest or removal of sim-1 holds it
    try:
        t0 = time.monotonic()
        busy = _on_cluster(ray_head, home, "--path", str(datasets[0]), "--path", str(datasets[1]))
        to_lock = time.monotonic() - t0  # (the run that reaches the lock: the waiting one is released later)
        assert busy.returncode == EXIT_CODES["busy"], busy.stderr
        assert "error: sim-1: another qkdb process is ingesting or removing model 'sim-1'" in busy.stderr
        assert store.ingested_models(home) == ["sim-2"]
        _nothing_of(home, "sim-1")
        waiting = subprocess.Popen(
            [*QKDB, "ingest", "--path", str(datasets[0]), "--wait", "120", "--cluster", ray_head.address, "-q",
             "--home", str(home)], stderr=subprocess.PIPE, text=True, env=ray_head.env)
        time.sleep(to_lock + 2)
        assert waiting.poll() is None  # still waiting for the lock
    finally:
        lock.release()
    _, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, err
    assert store.ingested_models(home) == ["sim-1", "sim-2"]
    assert _runs(home) == [(f"sim-{i}", ray_head.address, ray.__version__) for i in (1, 2)]


def _killer(head, task: str, times: int, killed: list, stop: threading.Event) -> threading.Thread:
    """Kill the worker running ``task`` each time one is seen, ``times`` times at most (SIGKILL: no clean-up)."""

    def run():
        while not stop.is_set() and len(killed) < times:
            for p in head.task_processes(task):
                if p.pid in killed:  # killed already, still dying (a loaded machine reaps it late)
                    continue
                try:
                    p.kill()
                    killed.append(p.pid)
                except Exception:  # noqa: BLE001 - it ended by itself meanwhile
                    pass
            stop.wait(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _big(tmp_path, name):
    # Its task must run long enough to be killed mid-way on every try: with 4 layers (~0.6 s) a
    # killer polling a loaded machine sometimes missed one; 8 layers take ~1.2 s.
    return _simulated(tmp_path, name, seed=7, layers=8, q_heads=8, vectors=3000, d=64)


@cluster
def test_a_worker_killed_mid_task_is_retried_and_the_model_published_whole(ray_head, tmp_path):
    big = _big(tmp_path, "big")
    home = tmp_path / "home"
    killed, stop = [], threading.Event()
    thread = _killer(ray_head, "qkdb-ingest:", 1, killed, stop)
    try:
        done = _on_cluster(ray_head, home, "--path", str(big), "--workers", "1")
    finally:
        stop.set()
        thread.join()
    assert len(killed) == 1
    assert done.returncode == 0, done.stderr
    local = tmp_path / "local"
    ref = subprocess.run([*QKDB, "ingest", "--path", str(big), "-q", "-j", "2", "--home", str(local)],
                         capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    assert _tables(home) == _tables(local)


@cluster
def test_a_worker_lost_on_every_try_fails_its_model_cleanly(ray_head, tmp_path):
    from qkdb.ingest.engine.cluster import RETRIES

    big, small = _big(tmp_path, "big"), _simulated(tmp_path, "small", seed=4)
    home = tmp_path / "home"
    killed, stop = [], threading.Event()
    # Only the big model's task: its name is its path until its worker reads the model's name.
    thread = _killer(ray_head, f"qkdb-ingest:{big}", RETRIES + 1, killed, stop)
    try:
        done = _on_cluster(ray_head, home, "--path", str(big), "--path", str(small))
    finally:
        stop.set()
        thread.join()
    assert len(killed) == RETRIES + 1
    assert done.returncode == EXIT_CODES["network"]  # the cluster lost it: worth another try later
    assert f"error: {big}: " in done.stderr and f"worker lost after {RETRIES} retries" in done.stderr, done.stderr
    assert store.ingested_models(home) == ["small"]
    _nothing_of(home, "big")


@cluster
def test_cluster_local_starts_ray_here_and_leaves_nothing_running(tmp_path):
    import psutil
    import ray

    from helpers.ray_head import LOOPBACK_ENV, short_tmp

    ds = _simulated(tmp_path, "sim-l", seed=5)
    home = tmp_path / "home"
    with short_tmp() as ray_tmp:
        env = {**os.environ, **LOOPBACK_ENV, "RAY_TMPDIR": str(ray_tmp)}
        done = subprocess.run(
            [*QKDB, "ingest", "--path", str(ds), "--cluster", "local", "-j", "2", "-q", "--home", str(home)],
            capture_output=True, text=True, timeout=300, env=env,
        )
        left = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if any(str(ray_tmp) in part for part in p.info["cmdline"] or ()):
                    left.append(p)
            except psutil.Error:
                continue
        for p in left:  # (a failure must not leave them running either)
            p.kill()
    assert done.returncode == 0, done.stderr
    assert _runs(home) == [("sim-l", "local", ray.__version__)]
    assert left == []


@cluster
def test_a_cluster_ingest_reads_only_its_own_models_run_logs(ray_head, tmp_path):
    home, (a, b) = _published(tmp_path, "sim-a", "sim-b")
    _damage_log(home, "sim-b")  # another model's log, unreadable: it must not matter
    same = ("--points", "0", "--no-complement")  # the parameters _published ingested it with
    again = _on_cluster(ray_head, home, "--path", str(a), *same)
    assert again.returncode == 0, again.stderr
    assert again.stderr.strip() == "sim-a: already ingested from these files with these parameters (use --force to redo)"
    c = _simulated(tmp_path, "sim-c", seed=3, vectors=200)
    new = _on_cluster(ray_head, home, "--path", str(c), "--model", "sim-c", *same)
    assert new.returncode == 0, new.stderr
    assert new.stderr.startswith("ingested sim-c: 8 heads")
    assert store.ingested_models(home) == ["sim-a", "sim-b", "sim-c"]


@cluster
def test_on_a_cluster_a_network_failure_does_not_stop_the_other_models(ray_head, tmp_path):
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    a, b = _simulated(tmp_path, "sim-a", seed=1, vectors=200), _simulated(tmp_path, "sim-b", seed=2, vectors=200)
    home = tmp_path / "home"
    code = (
        "import json, qkdb\n"
        f"out = qkdb.ingest_many([(None, 'llama3.2-1b'), ({str(a)!r}, None), (None, 'qwen3-0.6b'), ({str(b)!r}, None)],\n"
        f"    cluster={ray_head.address!r}, home={str(home)!r}, endpoint={dead!r}, token=False)\n"
        "print(json.dumps(sorted([o.model, type(o).__name__, getattr(o, 'attempted', None),\n"
        "                         getattr(getattr(o, 'error', None), 'kind', None)] for o in out)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ray_head.env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["llama3.2-1b", "ModelFailure", True, "network"], ["qwen3-0.6b", "ModelFailure", True, "network"],
        ["sim-a", "IngestResult", None, None], ["sim-b", "IngestResult", None, None]]
    assert store.ingested_models(home) == ["sim-a", "sim-b"]

"""The CLI's entry point stays light, and starts the ingest's workers early only when they will run."""

import os
import subprocess
import sys

import pytest

from qkdb.ingest.engine.runtime import is_ingest, scoped_env, wants_workers


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_entry_point_imports_nothing_heavy():
    # The fork server's imports overlap the CLI's only if reaching the entry point is cheap.
    code = (
        "import sys, qkdb.__main__, qkdb.ingest.engine.runtime\n"
        "print(sorted(m for m in ('numpy', 'pyarrow', 'duckdb', 'typer', 'scipy') if m in sys.modules))"
    )
    assert _run(code) == "[]"


def test_cli_and_ingest_engine_leave_duckdb_and_pyarrow_compute_unimported():
    # ~0.1 s and ~0.06 s on the parent's way to the first head (and the fork server's): duckdb is
    # imported when the warehouse is opened, pyarrow.compute only for unusual files.
    code = (
        "import sys, qkdb.cli, qkdb.api, qkdb.ingest.engine.pool\n"
        "print([m for m in ('duckdb', 'pyarrow.compute') if m in sys.modules])"
    )
    assert _run(code) == "[]"


def test_ingest_is_the_function_whatever_is_imported_first():
    # `qkdb.ingest` is both the API function and the package of the ingest's modules.
    code = (
        "import qkdb.ingest.sources.layout, qkdb.ingest.engine.pool, qkdb\n"
        "from qkdb import ingest\n"
        "print(callable(qkdb.ingest), qkdb.ingest is ingest, qkdb.ingest.__module__)"
    )
    assert _run(code) == "True True qkdb.api"


def test_lazy_api_attributes():
    import qkdb

    assert qkdb.__version__ == qkdb.version()
    assert callable(qkdb.connect) and callable(qkdb.remove)
    assert "connect" in dir(qkdb)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        qkdb.nope  # noqa: B018


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["ingest", "--model", "x"], True),
        (["--debug", "ingest", "--path", "d", "--model", "x"], True),
        (["ingest", "--model", "x", "--workers", "4"], True),
        (["ingest", "--model", "x", "--workers", "1"], False),
        (["ingest", "--model", "x", "--workers=1"], False),
        (["ingest", "--model", "x", "-j", "1"], False),
        (["ingest", "--model", "x", "-j1"], False),
        (["ingest", "--help"], False),
        (["ingest", "-h"], False),
        (["query", "select 1"], False),
        (["models"], False),
        ([], False),
    ],
)
def test_wants_workers(argv, expected, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert wants_workers(argv) is expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["ingest", "--model", "x"], True),
        (["--debug", "ingest", "--path", "d"], True),
        (["ingest", "--model", "x", "--workers", "1"], True),
        (["ingest", "--help"], False),
        (["query", "select 1"], False),
        ([], False),
    ],
)
def test_is_ingest(argv, expected):
    assert is_ingest(argv) is expected


def test_wants_no_workers_on_one_core(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert wants_workers(["ingest", "--model", "x"]) is False


@pytest.mark.parametrize("entry", ["module", "script"])
def test_cli_ingest_with_workers_end_to_end(tmp_path, entry):
    # The early fork server, the light entry point and the lazy API together, in real processes:
    # `python -m qkdb` (main module by name) and the console script (main module by path).
    from pathlib import Path

    from qkdb.api import connect
    from qkdb.ingest.capture.simulate import simulate

    data = simulate(tmp_path / "data", layers=2, q_heads=4, kv_heads=2, head_dim=16, vectors=400)
    script = Path(sys.executable).with_name("qkdb")
    assert script.exists(), "the console script is installed with the package"
    cmd = [sys.executable, "-m", "qkdb"] if entry == "module" else [str(script)]
    home = tmp_path / "home"
    out = subprocess.run([*cmd, "ingest", "--path", str(data), "--model", "toy", "--home", str(home), "-q",
                          "--workers", "2", "--points", "0"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    con = connect(home)
    assert con.execute("select count(*) from heads where model = 'toy'").fetchone() == (8,)


_CHURN = """
import resource, sys
import numpy as np
from qkdb.ingest.engine.runtime import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "tuned" else None
def churn():
    # Like one head of the complement stage: several MiB-sized temporaries alive at once, then freed.
    arrays = [np.ones(1 << 19) for _ in range(6)]  # 6 x 4 MiB, every page touched
    del arrays
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    churn()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_keep_freed_memory_reuses_pages_instead_of_faulting_them_in_again():
    # By default glibc gives the 24 MiB back to the system after each round (unmapped, or trimmed
    # from the heap's top) and the next round faults every page in again, zeroed; tuned, the
    # same pages are reused.
    def faults(mode):
        out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True)
        applied, n = out.stdout.split()
        return applied, int(n)

    applied, tuned = faults("tuned")
    _, default = faults("default")
    assert applied == "True"  # glibc, as on every Linux machine this project supports
    pages_per_round = 6 * (4 << 20) // 4096
    assert default > 2 * pages_per_round  # the cost being avoided is real here (~half a round each)
    assert tuned < pages_per_round // 10


_WORKER_THREADS = """
import os
from concurrent.futures import ProcessPoolExecutor

def probe():
    import numpy  # noqa: F401  (loads OpenBLAS, which would start its threads here)
    return os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")), os.environ.get("QKDB_FORK_SERVER", "unset")

if __name__ == "__main__":
    from qkdb.ingest.engine.pool import _pool
    with _pool(2) as pool:
        env, threads, mark = pool.submit(probe).result()
    print(env, threads, mark, os.environ.get("OPENBLAS_NUM_THREADS", "unset"), os.environ.get("QKDB_FORK_SERVER", "unset"))
"""


def test_workers_run_with_one_blas_thread_and_the_callers_environment_is_restored(tmp_path):
    # A fresh interpreter, so that the fork server is started by qkdb's code, not by an earlier test.
    script = tmp_path / "probe.py"
    script.write_text(_WORKER_THREADS)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, env=env)
    worker_env, threads, worker_mark, parent_env, parent_mark = out.stdout.split()
    assert worker_env == "1"
    assert int(threads) == 1  # the worker's own thread: no BLAS threads (before: one per core - 1, per library)
    assert parent_env == "unset"
    assert worker_mark == parent_mark == "unset"  # the fork server's mark stays in the server


_FAST_EXIT = """
import atexit, os, sys
atexit.register(lambda: print("teardown ran", flush=True))  # registered first, so it would run last
if sys.argv[1] == "marked":
    os.environ["QKDB_FORK_SERVER"] = "1"
from qkdb.ingest.engine import fork_server  # noqa: F401
print("mark", os.environ.get("QKDB_FORK_SERVER", "gone"), flush=True)
"""


@pytest.mark.parametrize(("mode", "expected"), [("marked", ["mark gone"]), ("plain", ["mark gone", "teardown ran"])])
def test_fork_server_module_makes_only_the_marked_process_exit_without_teardown(mode, expected):
    out = subprocess.run([sys.executable, "-c", _FAST_EXIT, mode], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:-1] == expected


def test_scoped_env_restores_set_and_unset_variables(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "8")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with scoped_env({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}):
        assert os.environ["OPENBLAS_NUM_THREADS"] == os.environ["OMP_NUM_THREADS"] == "1"
    assert os.environ["OPENBLAS_NUM_THREADS"] == "8"
    assert "OMP_NUM_THREADS" not in os.environ


_ENTRY_ENV = """
import os, sys, types
seen = types.ModuleType("qkdb.cli")
seen.main = lambda: print(os.environ.get("OPENBLAS_NUM_THREADS", "unset"))
sys.modules["qkdb.cli"] = seen  # stands in for the CLI: only the entry point's own work is observed
import qkdb.__main__
sys.argv = ["qkdb", *sys.argv[1:]]
qkdb.__main__.main()
"""


@pytest.mark.parametrize(
    ("argv", "preset", "expected"),
    [
        (["ingest", "--path", "d", "--workers", "1"], None, "1"),
        (["query", "select 1"], None, "unset"),
        (["ingest", "--path", "d", "--workers", "1"], "4", "4"),  # the user's choice is kept
    ],
)
def test_entry_point_gives_an_ingest_process_one_blas_thread(argv, preset, expected):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = subprocess.run([sys.executable, "-c", _ENTRY_ENV, *argv], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == expected


_ENTRY_EXIT = """
import sys, types
fake = types.ModuleType("qkdb.cli")
def main():
    print("rows on stdout")  # block-buffered into a pipe: only a flush delivers it
    print("a message", file=sys.stderr)
    code = {"none": None, "three": 3, "text": "boom"}[sys.argv[-1]]
    if sys.argv[-2] == "raise":
        raise SystemExit(code)
fake.main = main
sys.modules["qkdb.cli"] = fake
import qkdb.__main__
sys.argv = ["qkdb", "ingest", "--workers", "1", *sys.argv[1:]]
qkdb.__main__.main()
print("not reached", flush=True)
"""


@pytest.mark.parametrize(
    ("how", "code", "returncode", "stderr"),
    [
        ("return", "none", 0, "a message\n"),
        ("raise", "none", 0, "a message\n"),
        ("raise", "three", 3, "a message\n"),
        ("raise", "text", 1, "a message\nboom\n"),
    ],
)
def test_an_ingest_exits_at_once_with_its_code_and_its_output_delivered(how, code, returncode, stderr):
    out = subprocess.run([sys.executable, "-c", _ENTRY_EXIT, how, code], capture_output=True, text=True)
    assert out.returncode == returncode
    assert out.stdout == "rows on stdout\n"
    assert out.stderr == stderr


def test_cli_ingest_error_through_the_entry_point(tmp_path):
    out = subprocess.run([sys.executable, "-m", "qkdb", "ingest", "--path", str(tmp_path / "missing"),
                          "--model", "toy", "--gqa-ratio", "1", "--n-layers", "2", "--home", str(tmp_path / "home")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "missing" in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""

"""Ingest from the Hugging Face Hub against a real HTTP server on 127.0.0.1 (tests/hub_server.py).

Nothing here touches the network: every call passes ``endpoint=`` (the fake Hub) and ``cache_dir=``
(a temporary Hugging Face cache). ``HF_HUB_OFFLINE`` is read by huggingface_hub once at import, so
in-process tests switch its module constant and one test runs a subprocess with the real variable.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import pytest
from typer.testing import CliRunner

from helpers.hub_server import FakeHub
from qkdb.errors import EXIT_CODES, HubError
from qkdb.ingest.sources import hub as hubmod
from qkdb.ingest.sources.plan import plan_groups
from qkdb.ingest.sources.layout import discover
from qkdb.ingest.sources.registry import lookup
from qkdb.ingest.sources.select import HeadSelection
from qkdb.ingest.capture.simulate import simulate

REPO = "viktoroo/sniffed-qk"
LLAMA = lookup("llama3.2-1b")  # 32 query heads, 8 KV heads: key head = h // 4
QWEN = lookup("qwen3-0.6b")  # 16 query heads, 8 KV heads: key head = h // 2


# --------------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------------


def _head_folders_only(root: Path, out: Path) -> Path:
    """Copy only the head folders (a real sniffed-qk branch has no qkdb metadata files)."""
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        (out / folder.name).mkdir(parents=True)
        (out / folder.name / "data.parquet").write_bytes((folder / "data.parquet").read_bytes())
    return out


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("hub-datasets")
    sim_llama = simulate(base / "sim-llama", layers=3, q_heads=32, kv_heads=8, head_dim=64, vectors=300,
                         sample_q_heads=10, seed=1, workers=1)
    sim_qwen = simulate(base / "sim-qwen", layers=2, q_heads=16, kv_heads=8, head_dim=32, vectors=200,
                        sample_q_heads=5, seed=2, workers=1)
    return {
        "llama": _head_folders_only(sim_llama, base / "llama"),
        "qwen": _head_folders_only(sim_qwen, base / "qwen"),
    }


def _saver_metadata(spec, n_layers: int, n_q: int, n_kv: int, sampled: int) -> dict:
    """qk-sniffer's model_metadata for a capture of ``spec`` (its attention-plasticity configs' settings)."""
    return {
        "source_dataset": "viktoroo/longbench-pro-128k-plus", "dataset_name": "", "dataset_split": "train",
        "attention_scope": "full_only", "sampling_strategy": "uniform", "sampling_bucket_size": 2048,
        "head_sampling_strategy": "random_query", "head_sampling_seed": 0,
        "head_sampling_requested_query_heads": 300, "head_sampling_selected_query_heads": sampled,
        "head_sampling_num_layers": n_layers, "head_sampling_num_query_heads": n_q,
        "head_sampling_num_key_heads": n_kv, "dataset_repo": REPO, "dataset_branch": spec.dataset_revision,
    }


def _push(repo, branch: str, root: Path, spec=None) -> str:
    """A branch laid out as qk-sniffer pushes it: head folders at the root, README.md, _saver_state.json, .gitattributes."""
    spec = spec or LLAMA
    return repo.push_capture(branch, root, model_name=spec.hf_model,
                             metadata=_saver_metadata(spec, 3, spec.n_q_heads, spec.n_kv_heads, 10))


@pytest.fixture
def fake(datasets):
    """The fake Hub with the dataset repo and two model branches, each laid out as qk-sniffer pushes it."""
    with FakeHub(page_size=7) as hub:
        repo = hub.add_repo(REPO)
        _push(repo, LLAMA.dataset_revision, datasets["llama"], LLAMA)
        _push(repo, QWEN.dataset_revision, datasets["qwen"], QWEN)
        yield hub


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hf-cache"


def _open(fake, cache, spec=LLAMA, heads=None, **kw):
    return hubmod.open_source(
        kw.pop("repo", None), kw.pop("revision", None), spec, HeadSelection.parse(heads),
        endpoint=fake.url, cache_dir=cache, token=kw.pop("token", False), **kw,
    )


def _expected_files(root: Path, spec, heads: str | None) -> set[str]:
    """The repo paths the selection needs, from the local copy through the engine's own planner."""
    groups = plan_groups(discover(root), spec.gqa_ratio, HeadSelection.parse(heads))
    return {f"{f.path.parent.name}/data.parquet" for g in groups for f in (g.key, *g.queries)}


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def offline(monkeypatch):
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; its checks read this constant at call time.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


# --------------------------------------------------------------------------------------------------
# listing and downloading only what the heads need
# --------------------------------------------------------------------------------------------------


def test_heads_selection_downloads_only_the_needed_files(fake, cache, datasets):
    heads = "l00h03,l02h21"
    src = _open(fake, cache, heads=heads)
    assert src.commit == fake.repos[REPO].branches[LLAMA.dataset_revision]
    want = _expected_files(datasets["llama"], LLAMA, heads)
    assert set(src.files) == want and len(want) == 4  # two query heads and their two key heads
    assert fake.downloaded() == {}  # planning downloads nothing

    groups = list(src.groups())
    got = fake.downloaded()
    assert set(got) == want and set(got.values()) == {1}  # each needed file once, nothing else
    assert sorted((q.layer, q.head) for g in groups for q in g.queries) == [(0, 3), (2, 21)]
    for g in groups:
        assert g.key.head == g.queries[0].head // LLAMA.gqa_ratio
        for f in (g.key, *g.queries):
            original = datasets["llama"] / f.path.parent.name / "data.parquet"
            assert f.path.is_file() and _sha(f.path) == _sha(original)
            assert src.cached(f"{f.path.parent.name}/data.parquet") == f.path

    # The branch was listed once, at the pinned commit, following the pages.
    counts = fake.counts()
    tree = [p for (m, p) in counts if "/tree/" in p]
    assert tree == [f"/api/datasets/{REPO}/tree/{src.commit}"]
    assert counts[("GET", tree[0])] > 1  # the fake pages every 7 entries
    assert counts[("GET", f"/api/datasets/{REPO}/revision/{LLAMA.dataset_revision}")] == 1


def test_second_run_downloads_nothing(fake, cache, datasets):
    first = list(_open(fake, cache, heads="0").groups())
    fake.clear_log()
    src = _open(fake, cache, heads="0")
    assert src.download_bytes() == 0
    second = list(src.groups())
    assert sorted(g.key.path for g in second) == sorted(g.key.path for g in first)
    assert fake.downloaded() == {}
    assert not any(r.method == "HEAD" for r in fake.log)  # cached files cost no request at all


def test_layer_selection_and_plan_match_a_local_discovery(fake, cache, datasets):
    src = _open(fake, cache, heads="1-2")
    local = plan_groups(discover(datasets["llama"]), LLAMA.gqa_ratio, HeadSelection.parse("1-2"))
    as_keys = lambda gs: [(g.layer, g.kv_head, tuple((q.layer, q.head) for q in g.queries)) for g in gs]  # noqa: E731
    assert as_keys(src.plan) == as_keys(local)
    assert src.planned == [(q.layer, q.head) for g in local for q in g.queries]
    assert all(f.split("/")[0][:3] in ("l01", "l02") for f in src.files)
    assert sum(src.sizes.values()) == src.download_bytes() > 0


def test_progress_reports_every_byte(fake, cache):
    seen = []
    src = _open(fake, cache, heads="0", progress=seen.append, max_workers=3)
    total = src.download_bytes()
    list(src.groups())
    assert sum(seen) == total


def test_report_to_sends_cumulative_download_progress(fake, cache):
    events = []
    src = _open(fake, cache, heads="1", max_workers=4)
    src.report_to(lambda event, **info: events.append((event, info)), model="llama3.2-1b")
    list(src.groups())
    total = sum(src.sizes.values())
    assert events[0] == ("download", {"total": total, "done": 0, "model": "llama3.2-1b"})
    done = [info["done"] for _, info in events]
    assert done == sorted(done) and done[-1] == total


def test_progress_counts_xet_downloads_once():
    # Xet-backed repos download through hf_xet, which reports network and written bytes separately.
    from types import SimpleNamespace

    from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter

    seen = []
    bar = type("Bar", (hubmod._ByteBar,), {"callback": staticmethod(seen.append)})
    with XetDownloadProgressReporter(reconstruction_desc="f", total=1000, log_level=30, tqdm_class=bar) as rep:
        for written, received in ((0, 300), (400, 600), (1000, 700)):
            rep.update_progress(SimpleNamespace(
                total_bytes_completed=written, total_transfer_bytes_completed=received, total_bytes=1000,
                total_bytes_completion_rate=None, total_transfer_bytes_completion_rate=None,
            ))
    assert sum(seen) == 1000


def test_closing_early_cancels_the_remaining_downloads(fake, cache):
    src = _open(fake, cache, max_workers=1)
    gen = src.groups()
    next(gen)
    gen.close()  # e.g. the ingest failed on the first group
    n = sum(fake.downloaded().values())
    assert n < len(src.files)
    assert sum(fake.downloaded().values()) == n  # nothing keeps downloading in the background


# --------------------------------------------------------------------------------------------------
# revisions
# --------------------------------------------------------------------------------------------------


def test_revision_pinning_branch_vs_commit(fake, cache, datasets, tmp_path):
    repo = fake.repos[REPO]
    old = repo.branches[LLAMA.dataset_revision]
    # The branch moves on: one query head's file changes.
    changed = tmp_path / "changed"
    changed.mkdir()
    for folder in datasets["llama"].iterdir():
        (changed / folder.name).mkdir()
        data = (folder / "data.parquet").read_bytes()
        (changed / folder.name / "data.parquet").write_bytes(data + b"\0" if folder.name == "l00h03q" else data)
    new = _push(repo, LLAMA.dataset_revision, changed)
    assert new != old

    pinned = _open(fake, cache, heads="l00h03", revision=old)
    assert pinned.commit == old and pinned.revision == old
    [g_old] = list(pinned.groups())
    assert _sha(g_old.queries[0].path) == _sha(datasets["llama"] / "l00h03q" / "data.parquet")

    latest = _open(fake, cache, heads="l00h03")
    assert latest.commit == new
    [g_new] = list(latest.groups())
    assert g_new.queries[0].path.read_bytes()[-1:] == b"\0"
    # Every file request named a commit sha, never the moving branch.
    resolve = [r.path for r in fake.log if "/resolve/" in r.path]
    assert resolve and all(f"/resolve/{old}/" in p or f"/resolve/{new}/" in p for p in resolve)


def test_branch_names_are_url_encoded(fake, cache, datasets):
    branch = "team/llama3.2-1b.v2+test"  # dots, a slash and a plus
    sha = _push(fake.repos[REPO], branch, datasets["llama"])
    src = _open(fake, cache, heads="l00h03", revision=branch)
    assert src.commit == sha
    assert len(list(src.groups())) == 1
    assert any(r.path == f"/api/datasets/{REPO}/revision/{branch}" for r in fake.log)


# --------------------------------------------------------------------------------------------------
# errors: one line naming what was asked
# --------------------------------------------------------------------------------------------------


def test_repo_not_found(fake, cache):
    with pytest.raises(HubError, match=r"someone/nothing.*not found.*hf auth login"):
        _open(fake, cache, repo="someone/nothing")


def test_branch_not_found_lists_close_branches(fake, cache):
    with pytest.raises(HubError) as err:
        _open(fake, cache, revision="llama3.2-1b-longbench")
    msg = str(err.value)
    assert "branch 'llama3.2-1b-longbench' not found" in msg
    assert LLAMA.dataset_revision in msg and "\n" not in msg


def test_commit_not_found(fake, cache):
    with pytest.raises(HubError, match=r"commit '0{40}' not found"):
        _open(fake, cache, revision="0" * 40)


def test_gated_repo_says_how_to_log_in_and_a_token_opens_it(fake, cache):
    fake.repos[REPO].gated = True
    src = _open(fake, cache, heads="l00h03")
    with pytest.raises(HubError, match=r"gated.*hf auth login.*HF_TOKEN"):
        list(src.groups())
    assert fake.downloaded() == {}
    ok = _open(fake, cache, heads="l00h03", token="hf_valid_token")
    assert len(list(ok.groups())) == 1


def test_private_repo_without_token(fake, cache):
    fake.repos[REPO].private = True
    # A bare 401 (no X-Error-Code) from a non-Hub host reaches us as an HTTP 401, not "repo not found".
    with pytest.raises(HubError, match=r"sniffed-qk.*not authorised \(HTTP 401\).*hf auth login.*HF_TOKEN"):
        _open(fake, cache)
    assert _open(fake, cache, heads="l00h03", token="hf_valid_token").commit


def test_head_missing_on_the_branch(fake, cache):
    with pytest.raises(HubError, match=r"l00h04q not found on the branch"):
        _open(fake, cache, heads="l00h03,l00h04")


def test_key_heads_missing_for_the_gqa_mapping_are_named_before_any_download(fake, cache):
    wrong = LLAMA.with_overrides(gqa_ratio=2)  # like qwen3-14b's disputed ratio: keys h // 2 do not exist
    # The missing folder first, with the query heads that read it; then the ratio that fits the branch.
    with pytest.raises(HubError, match=r"key head folders missing: l00h01k \(read by l00h03q\); .*"
                                       r"with --gqa-ratio 4 the query heads read exactly the key folders there are"):
        _open(fake, cache, spec=wrong, heads="0")
    assert fake.downloaded() == {}


def test_file_listed_but_not_served(fake, cache):
    path = "l00h03q/data.parquet"
    fake.unserved.add(path)
    src = _open(fake, cache, heads="l00h03")
    with pytest.raises(HubError, match=r"head file .*l00h03q/data.parquet is missing on the branch"):
        list(src.groups())


def test_offline_with_nothing_cached(fake, cache, offline):
    with pytest.raises(HubError, match=r"offline \(HF_HUB_OFFLINE=1\).*never downloaded"):
        _open(fake, cache)
    assert fake.log == []


# --------------------------------------------------------------------------------------------------
# offline from the cache
# --------------------------------------------------------------------------------------------------


def test_offline_works_from_the_cache(fake, cache, monkeypatch):
    online = _open(fake, cache, heads="0")
    online_groups = list(online.groups())
    fake.clear_log()

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    src = _open(fake, cache, heads="0")  # the branch name resolves through the cache's refs
    assert src.commit == online.commit and src.offline and src.listing == "cached listing"
    assert sorted((g.layer, g.kv_head, g.key.path) for g in src.groups()) == sorted(
        (g.layer, g.kv_head, g.key.path) for g in online_groups
    )
    assert fake.log == []  # not a single request

    # Heads that were never downloaded: one clear error naming them, before anything runs.
    with pytest.raises(HubError, match=r"offline.*not in the Hugging Face cache.*l01h"):
        _open(fake, cache, heads="1")
    # A head that is not on the branch at all is told apart from one that is merely not cached.
    with pytest.raises(HubError, match=r"l00h04q not found in the local cache"):
        _open(fake, cache, heads="l00h04")


def test_offline_without_a_saved_listing_uses_the_snapshot(fake, cache, datasets, monkeypatch):
    # Files fetched by another Hugging Face tool: in the cache, but no saved tree listing.
    wanted = sorted(_expected_files(datasets["llama"], LLAMA, "0"))
    for path in wanted:
        huggingface_hub.hf_hub_download(REPO, path, repo_type="dataset", revision=LLAMA.dataset_revision,
                                        endpoint=fake.url, cache_dir=cache, token=False)
    assert not (cache / "datasets--viktoroo--sniffed-qk" / "trees").exists()
    fake.clear_log()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    src = _open(fake, cache)  # every head asked for: only the cached ones can be known
    assert src.listing.startswith("cached snapshot")
    assert sorted(src.files) == wanted
    layer0 = sorted(k for k in discover(datasets["llama"]).queries if k[0] == 0)
    assert sorted((q.layer, q.head) for g in src.groups() for q in g.queries) == layer0
    assert fake.log == []


def test_offline_environment_variable_in_a_fresh_process(fake, cache, tmp_path):
    online = _open(fake, cache, heads="l02h21")
    list(online.groups())
    fake.clear_log()
    script = tmp_path / "offline.py"
    script.write_text(
        "import sys\n"
        "from qkdb.ingest.sources import hub\n"
        "from qkdb.ingest.sources.registry import lookup\n"
        "from qkdb.ingest.sources.select import HeadSelection\n"
        "src = hub.open_source(None, None, lookup('llama3.2-1b'), HeadSelection.parse('l02h21'),\n"
        "                      endpoint=sys.argv[1], cache_dir=sys.argv[2], token=False)\n"
        "print(src.commit, len(list(src.groups())))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, str(script), fake.url, str(cache)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [online.commit, "1"]
    assert fake.log == []


# --------------------------------------------------------------------------------------------------
# connections cut mid-download
# --------------------------------------------------------------------------------------------------


def test_a_cut_download_is_resumed(fake, cache, datasets):
    path = "l00h03q/data.parquet"
    fake.cut(path, times=1)
    [g] = list(_open(fake, cache, heads="l00h03").groups())
    assert _sha(g.queries[0].path) == _sha(datasets["llama"] / "l00h03q" / "data.parquet")
    assert fake.downloaded()[path] == 2  # cut once, fetched again, intact


def test_a_download_that_keeps_failing_is_retried_then_fails_and_a_rerun_resumes(fake, cache, datasets):
    bad = "l00h13q/data.parquet"
    fake.cut(bad, times=-1)
    src = _open(fake, cache, heads="0", retries=1, retry_wait=0.01)
    with pytest.raises(HubError, match=r"download of .*l00h13q/data.parquet failed after 2 attempts.*run again"):
        list(src.groups())
    heads = [r for r in fake.log if r.method == "HEAD" and r.path.endswith("l00h13q/data.parquet")]
    assert len(heads) == 2  # our retry on top of huggingface_hub's own resumes
    done_before = {p for p in src.files if src.cached(p) is not None}
    assert bad not in done_before and len(done_before) == len(src.files) - 1
    assert not list((cache / "datasets--viktoroo--sniffed-qk" / "blobs").glob("*incomplete"))

    # The network is back: a re-run downloads only the file that failed.
    fake.cut(bad, times=0)
    fake.clear_log()
    again = _open(fake, cache, heads="0")
    assert again.missing_from_cache() == [bad]
    groups = list(again.groups())
    assert dict(fake.downloaded()) == {bad: 1}
    assert len(groups) == len(again.plan)
    q = next(q for g in groups for q in g.queries if q.head == 13)
    assert _sha(q.path) == _sha(datasets["llama"] / "l00h13q" / "data.parquet")


# --------------------------------------------------------------------------------------------------
# branches
# --------------------------------------------------------------------------------------------------


def test_list_branches_matches_registry_models(fake, cache):
    fake.repos[REPO].push("scratch", {"README.md": b"hi"})
    branches, origin = hubmod.list_branches(REPO, endpoint=fake.url, token=False)
    assert origin == "hub"
    by_name = {b.name: b for b in branches}
    assert by_name[LLAMA.dataset_revision].models == ("llama3.2-1b",)
    assert by_name[QWEN.dataset_revision].models == ("qwen3-0.6b",)
    assert by_name["scratch"].models == ()
    assert by_name["scratch"].commit == fake.repos[REPO].branches["scratch"]
    assert hubmod.models_on_hub(branches) == ["qwen3-0.6b", "llama3.2-1b"]  # registry order


def test_list_branches_offline_uses_cached_refs(fake, cache, monkeypatch):
    _open(fake, cache, heads="l00h03")  # resolving the branch records it in the cache
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    branches, origin = hubmod.list_branches(REPO, endpoint=fake.url, token=False, cache_dir=cache)
    assert origin == "cache"
    assert [(b.name, b.models) for b in branches] == [(LLAMA.dataset_revision, ("llama3.2-1b",))]


def test_list_branches_errors(fake):
    with pytest.raises(HubError, match="not found"):
        hubmod.list_branches("someone/nothing", endpoint=fake.url, token=False)


# --------------------------------------------------------------------------------------------------
# `qkdb hub list`
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def cli():
    import qkdb.cli.hub  # noqa: F401 - registers `qkdb hub` on the app
    from qkdb.cli.app import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_cli_hub_list_table_and_json(fake, cli):
    r = cli("hub", "list", "--endpoint", fake.url)
    assert r.exit_code == 0, r.output
    assert LLAMA.dataset_revision in r.stdout and "llama3.2-1b" in r.stdout and "qwen3-0.6b" in r.stdout
    assert "registry model(s) have no branch" in r.stderr and "registry" not in r.stdout
    r = cli("hub", "list", "--endpoint", fake.url, "--format", "json")
    rows = {row["branch"]: row for row in json.loads(r.stdout)}
    assert rows[QWEN.dataset_revision]["models"] == "qwen3-0.6b"
    assert rows[LLAMA.dataset_revision]["commit"] == fake.repos[REPO].branches[LLAMA.dataset_revision]


def test_cli_hub_list_error_is_one_line(fake, cli):
    r = cli("hub", "list", "--endpoint", fake.url, "--repo", "someone/nothing")
    assert r.exit_code == EXIT_CODES["not_found"]
    assert r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "someone/nothing" in r.stderr and "Traceback" not in r.stderr


_MAIN = "import qkdb.cli.hub; from qkdb.cli.app import main; main()"


def test_cli_hub_list_in_a_subprocess_with_hf_endpoint(fake, tmp_path):
    env = {**os.environ, "HF_ENDPOINT": fake.url, "HF_HUB_CACHE": str(tmp_path / "hf-cache")}
    out = subprocess.run([sys.executable, "-c", _MAIN, "hub", "list", "--format", "csv"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == '"branch","commit","models"'
    assert any(line.startswith(f'"{LLAMA.dataset_revision}"') for line in lines[1:])


# --------------------------------------------------------------------------------------------------
# the whole ingest, by registry name, through qkdb.api
# --------------------------------------------------------------------------------------------------


METRIC_TABLES = ("heads", "pca", "rotation", "complement", "rope_planes", "points")


def _rows(home: Path, table: str):
    from qkdb import api

    con = api.connect(home)
    try:
        return con.sql(f"select * from {table} order by all").fetchall()
    finally:
        con.close()


def test_ingest_by_registry_name_equals_ingest_from_a_local_path(fake, cache, datasets, tmp_path):
    from qkdb import api

    hub_home, path_home = tmp_path / "from-hub", tmp_path / "from-path"
    res = api.ingest(model="llama3.2-1b", heads="l00h03,l02h21", endpoint=fake.url, cache_dir=cache, token=False,
                     home=hub_home, workers=1)
    assert res.heads_done == len([k for k in discover(datasets["llama"]).queries if k in ((0, 3), (2, 21))])
    # The head files the selection needs, and the branch's record of its capture (provenance), nothing else.
    assert set(fake.downloaded()) == _expected_files(datasets["llama"], LLAMA, "l00h03,l02h21") | {"_saver_state.json"}

    api.ingest(datasets["llama"], model="llama3.2-1b", heads="l00h03,l02h21", home=path_home, workers=1)
    for table in METRIC_TABLES:
        assert _rows(hub_home, table) == _rows(path_home, table), table

    con = api.connect(hub_home)
    run = con.sql("select source, location, revision, commit from ingest_runs").fetchall()
    con.close()
    assert run == [("hub", REPO, LLAMA.dataset_revision, fake.repos[REPO].branches[LLAMA.dataset_revision])]


def test_a_failed_hub_ingest_leaves_the_warehouse_untouched(fake, cache, tmp_path):
    from qkdb import api

    home = tmp_path / "home"
    api.ingest(model="llama3.2-1b", heads="l00h03", endpoint=fake.url, cache_dir=cache, token=False, home=home, workers=1)
    before = _rows(home, "heads")
    fake.repos[REPO].gated = True
    with pytest.raises(HubError, match="gated"):
        api.ingest(model="llama3.2-1b", heads="0", endpoint=fake.url, cache_dir=tmp_path / "empty-cache",
                   token=False, home=home, workers=1, force=True)
    assert _rows(home, "heads") == before


# --------------------------------------------------------------------------------------------------
# several models from the CLI: --series and --all go model by model
# --------------------------------------------------------------------------------------------------

_QKDB = "from qkdb.cli.app import main; main()"


def _qkdb(fake, tmp_path, *args):
    env = {**os.environ, "HF_ENDPOINT": fake.url, "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
           "QKDB_HOME": str(tmp_path / "home")}
    return subprocess.run([sys.executable, "-c", _QKDB, *args], env=env, capture_output=True, text=True, timeout=300)


def _ingested(tmp_path) -> list[tuple[str, str, str]]:
    from qkdb import api

    con = api.connect(tmp_path / "home")
    try:
        return con.sql("select model, source, revision from models order by model").fetchall()
    finally:
        con.close()


def test_cli_ingest_all_takes_every_registry_model_on_the_hub(fake, tmp_path):
    out = _qkdb(fake, tmp_path, "ingest", "--all", "-q", "-j", "1", "--points", "0", "--no-complement")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    assert _ingested(tmp_path) == [
        ("llama3.2-1b", "hub", LLAMA.dataset_revision),
        ("qwen3-0.6b", "hub", QWEN.dataset_revision),
    ]


def test_cli_ingest_series_reports_each_failure_and_goes_on(fake, datasets, tmp_path):
    from qkdb.ingest.sources.registry import series_models

    checkpoints = series_models("smollm3-3b")  # 16 query / 4 KV heads: key head = h // 4, as for Llama
    for spec in checkpoints[:2]:
        _push(fake.repos[REPO], spec.dataset_revision, datasets["llama"], spec)
    out = _qkdb(fake, tmp_path, "ingest", "--series", "smollm3-3b", "-q", "-j", "1", "--heads", "0",
                "--points", "0", "--no-complement")
    assert out.returncode == EXIT_CODES["not_found"]  # (the first failure's kind: its branch is missing)
    assert "8 of 10 models failed" in out.stderr
    for spec in checkpoints[2:]:
        assert f"error: {spec.model}:" in out.stderr
    assert "Traceback" not in out.stderr
    assert [m for m, _, _ in _ingested(tmp_path)] == sorted(s.model for s in checkpoints[:2])


# --------------------------------------------------------------------------------------------------
# one policy for a batch on one machine: a Hub that cannot be reached stops it (api.ingest_many)
# --------------------------------------------------------------------------------------------------


def _dead_endpoint() -> str:
    import socket

    with socket.socket() as s:  # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_ingest_many_stops_at_a_network_failure_and_returns_the_models_not_attempted(datasets, tmp_path):
    from qkdb import api
    from qkdb.warehouse import store

    home = tmp_path / "home"
    targets = [(datasets["llama"], "llama3.2-1b"), (None, "llama3.2-3b"), (datasets["qwen"], "qwen3-0.6b"),
               (None, "qwen3-4b")]
    said = []  # (outcome, the models published when it was said)
    out = api.ingest_many(targets, home=home, endpoint=_dead_endpoint(), cache_dir=tmp_path / "hf-cache",
                          token=False, workers=1, points=0, complement=False,
                          on_result=lambda o: said.append((o, store.ingested_models(home))))
    assert [o for o, _ in said] == out  # each said as it was known, in the order returned
    first, stop, *rest = out
    assert isinstance(first, api.IngestResult) and first.model == "llama3.2-1b"
    assert said[0][1] == ["llama3.2-1b"]  # said once published, before the next model started
    assert isinstance(stop, api.ModelFailure) and stop.attempted and stop.model == "llama3.2-3b"
    assert stop.error.kind == "network" and "connection to http://127.0.0.1" in str(stop.error)
    # The local dataset after it is not attempted either: the batch stops, as the CLI's always did.
    assert [(f.model, f.attempted, f.error.kind) for f in rest] == [
        ("qwen3-0.6b", False, "network"), ("qwen3-4b", False, "network")]
    for f in rest:
        assert isinstance(f.error, HubError)
        assert str(f.error).startswith("not attempted: llama3.2-3b could not reach the Hub (dataset viktoroo/")
    assert store.ingested_models(home) == ["llama3.2-1b"]
    con = api.connect(home)
    try:  # the intervals were refreshed at the end of the batch, its failure notwithstanding
        from qkdb import warehouse

        assert warehouse.intervals_current(con)
    finally:
        con.close()


def test_ingest_many_goes_on_past_a_failure_of_another_kind(datasets, tmp_path):
    from qkdb import api

    out = api.ingest_many([(tmp_path / "nowhere", "llama3.2-1b"), (datasets["qwen"], "qwen3-0.6b")],
                          home=tmp_path / "home", workers=1, points=0, complement=False)
    assert [(type(o).__name__, o.model) for o in out] == [("ModelFailure", "llama3.2-1b"), ("IngestResult", "qwen3-0.6b")]
    assert out[0].error.kind == "not_found" and out[0].attempted


def test_cli_series_stops_at_an_unreachable_hub_once_listing_the_models_not_ingested(tmp_path):
    from qkdb.ingest.sources.registry import series_models

    env = {**os.environ, "HF_ENDPOINT": _dead_endpoint(), "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
           "QKDB_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", _QKDB, "ingest", "--series", "smollm3-3b", "-q", "-j", "1"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == EXIT_CODES["network"]
    lines = out.stderr.strip().splitlines()
    models = [s.model for s in series_models("smollm3-3b")]
    assert len(lines) == 1 and lines[0].startswith("error: dataset viktoroo/sniffed-qk at revision "), out.stderr
    assert lines[0].endswith(f"; not ingested: {', '.join(models)}")  # the first one too: said once, not per model


def test_a_branch_laid_out_as_qk_sniffer_pushes_it_ingests_by_name(fake, tmp_path):
    # The real layout (issue 32): head folders at the branch root, beside qk-sniffer's dataset card
    # (markdown, no YAML header), its _saver_state.json and .gitattributes.
    sha = fake.repos[REPO].branches[LLAMA.dataset_revision]
    files = fake.repos[REPO].commits[sha].files
    top = {path.split("/", 1)[0] for path in files}
    assert {"README.md", "_saver_state.json", ".gitattributes"} <= top
    assert all(p.count("/") == 1 and p.endswith("/data.parquet") for p in files if "/" in p)  # no prefix
    assert not files["README.md"].startswith(b"---") and files["README.md"].startswith(b"# sniffed-qk")
    state = json.loads(files["_saver_state.json"])
    assert state["model_name"] == LLAMA.hf_model and state["model_metadata"]["head_sampling_num_key_heads"] == 8
    out = _qkdb(fake, tmp_path, "ingest", "--model", "llama3.2-1b", "--heads", "0", "-j", "1", "--points", "0")
    assert out.returncode == 0, out.stderr
    assert "ignored" not in out.stderr  # the card, the state and .gitattributes are no head folders to report
    assert _ingested(tmp_path) == [("llama3.2-1b", "hub", LLAMA.dataset_revision)]
    # The branch's record of its capture is the model's provenance.
    from qkdb import api

    con = api.connect(tmp_path / "home", read_only=True)
    try:
        capture = json.loads(con.execute("select capture from models").fetchone()[0])
    finally:
        con.close()
    assert capture == {"written_by": "qk-sniffer", "model_name": state["model_name"], **state["model_metadata"],
                       "bucket_counts": state["bucket_counts"]}


def test_a_qk_sniffer_branch_ingests_by_repo_and_revision_alone(fake, tmp_path):
    # What `qkdb pull` suggests for a branch of captured vectors: no --model, the branch's
    # _saver_state.json names the model and its counts, as a folder's does for --path.
    out = _qkdb(fake, tmp_path, "ingest", "--repo", REPO, "--revision", LLAMA.dataset_revision, "--heads", "0",
                "-j", "1", "--points", "0")
    assert out.returncode == 0, out.stderr
    ((model, source, revision),) = _ingested(tmp_path)
    assert (source, revision) == ("hub", LLAMA.dataset_revision)
    assert model == "llama3.2-1b", out.stderr  # the registry's name of the state's Hugging Face id

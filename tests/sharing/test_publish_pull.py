"""`qkdb publish` / `qkdb pull` through the real huggingface_hub client against the fake Hub (tests/helpers/hub_server.py).

Every call passes ``endpoint=`` and ``cache_dir=`` (huggingface_hub reads ``HF_ENDPOINT`` once, at
import). The fake speaks the LFS upload protocol, not Xet: the client's Xet path is switched off,
as it is without ``hf_xet`` installed.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
from collections import Counter

import pyarrow.parquet as pq
import pytest
from huggingface_hub import constants

import qkdb
from helpers.datasets import make_dataset
from helpers.hub_server import FakeHub
from qkdb.errors import EXIT_CODES, HubError, QkdbError, WarehouseError
from qkdb.ingest import HEAD_DIR
from qkdb.sharing.layout import CARD, FINDINGS, MANIFEST
from qkdb.warehouse import TABLES, store

FACTS = dict(family="Toy", gqa_ratio=2, n_layers=2, workers=1)
WRITE, READ = "hf_write_token", "hf_valid_token"
REPO = "me/warehouse"

# Tables only a capture with each query's softmax normaliser fills (docs/attention.md)
NEED_NORMALISER = {"attention_mass", "attention_mass_text"}


@pytest.fixture(autouse=True)
def _lfs_uploads(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


@pytest.fixture(scope="module")
def publisher(tmp_path_factory):
    """A warehouse of two small models (module-wide: tests that change it copy it first)."""
    base = tmp_path_factory.mktemp("publisher")
    home = base / "home"
    qkdb.ingest(make_dataset(base / "ds-a", seed=0), "toy-a", home=home, **FACTS)
    qkdb.ingest(make_dataset(base / "ds-b", seed=1), "toy-b", home=home, **{**FACTS, "family": "Other"})
    return home


@pytest.fixture
def hub():
    with FakeHub(page_size=50) as fake:
        yield fake


def _publish(hub, home, **kw):
    # (figures take a few seconds a publish: only where they are looked at)
    kw.setdefault("figures", False)
    return qkdb.api.publish(kw.pop("repo", REPO), home=home, endpoint=hub.url, token=kw.pop("token", WRITE), **kw)


def _pull(hub, home, tmp_path, **kw):
    return qkdb.api.pull(kw.pop("repo", REPO), kw.pop("revision", None), home=home, endpoint=hub.url,
                         cache_dir=tmp_path / "hf-cache", token=False, **kw)


def _uploads(hub) -> list[str]:
    """The LFS objects PUT and the commits POSTed since the log was cleared."""
    return [r.path for r in hub.log if r.method == "PUT" or (r.method == "POST" and "/commit/" in r.path)]


def _rows(con, sql):
    return [tuple(repr(v) for v in r) for r in con.execute(sql).fetchall()]


def test_publish_makes_one_commit_of_tables_manifest_findings_card_and_figures_never_vectors(hub, publisher):
    done = _publish(hub, publisher, figures=True)
    repo = hub.repos[REPO]
    assert done.created_repo and done.commit == repo.branches["main"]
    assert len(repo.commits) == 2  # the repo's first commit (.gitattributes) and the publish: one commit
    files = repo.commits[done.commit].files
    for m in ("toy-a", "toy-b"):
        for name, table in TABLES.items():
            if table.versioned:
                assert files[f"{name}/model={m}/data.parquet"] == store.current_file(publisher, m, name).read_bytes()
        (run,) = [p for p in files if p.startswith(f"ingest_runs/model={m}/")]
    assert {MANIFEST, CARD, FINDINGS, "findings/finding_intervals.parquet"} <= set(files)
    assert done.figures and all(f"figures/{n}.png" in files for n in done.figures)
    assert all(files[f"figures/{n}.png"].startswith(b"\x89PNG") for n in done.figures)
    # Never a raw vector: no head folder, no vector column anywhere.
    assert not any(HEAD_DIR.match(part) for p in files for part in p.split("/"))
    for p, data in files.items():
        if p.endswith(".parquet"):
            assert "vector" not in pq.read_schema(io.BytesIO(data)).names, p
    man = json.loads(files[MANIFEST])
    assert man["qkdb_version"] == qkdb.version() and man["duckdb_version"]
    assert set(man["tables"]) == set(TABLES) and man["params"]["plane_alpha"] == 0.01
    for m, entry in man["models"].items():
        runs = list((publisher / "ingest_runs" / f"model={m}").glob("*.parquet"))
        params = json.loads(pq.read_table(runs[0]).column("parameters")[0].as_py())
        assert entry["fingerprint"] == params["fingerprint"] and entry["parameters"] == params
        assert entry["source"]["kind"] == "path" and entry["source"]["dataset"].endswith(f"ds-{m[-1]}")
        assert entry["rope"]["rope_pairing"] == "half" and "rope_theta" in entry["rope"]
        for path, h in entry["files"].items():
            assert hashlib.sha256(files[path]).hexdigest() == h["sha256"] and len(files[path]) == h["bytes"]
    card = files[CARD].decode()
    assert card.startswith("---\n") and f"qkdb pull {REPO}" in card and "| `toy-a` | Toy |" in card
    findings = pq.read_table(io.BytesIO(files[FINDINGS])).to_pylist()
    con = qkdb.connect(publisher)
    try:
        assert len(findings) == con.sql("select count(*) from findings").fetchall()[0][0]
    finally:
        con.close()
    shown = [r for r in findings if r["status"] != "no data"]
    assert shown and all(f"`{r['id']}`" in card for r in shown)


def test_the_cards_figures_of_more_models_than_a_figure_has_rows_draw_what_qkdb_chart_draws(hub, publisher, monkeypatch):
    """A publish names its models to the card's figures, and named models are all drawn, a row each:
    a 472-model warehouse failed on depth-heatmap-rk's 9,440 rows. Past the figures' limit of rows the
    card draws what `qkdb chart` draws (here the limit is one row: the first of the first family)."""
    from qkdb.charts import data

    def png(done, name="depth-heatmap-rk") -> bytes:
        return hub.repos[REPO].commits[done.commit].files[f"figures/{name}.png"]

    both = _publish(hub, publisher, figures=True)
    monkeypatch.setattr(data, "MAX_MODEL_ROWS", 1)
    one = _publish(hub, publisher, figures=True, branch="limited")
    assert "depth-heatmap-rk" in both.figures and "depth-heatmap-rk" in one.figures
    # (a figure renders to the same bytes every time: with both models named, both rows would be drawn again)
    assert png(one) != png(both)
    assert png(one, "rq-vs-rk") == png(both, "rq-vs-rk")  # (a figure without a row per model is as it was)


def test_publishing_unchanged_models_again_uploads_nothing_and_makes_no_commit(hub, publisher):
    first = _publish(hub, publisher, figures=True)
    hub.clear_log()
    again = _publish(hub, publisher, figures=True)  # (the figures too: rendered again, the same bytes)
    assert not again.changed and again.commit == first.commit and again.uploaded == []
    assert _uploads(hub) == []
    assert len(hub.repos[REPO].commits) == 2


def test_a_changed_model_uploads_its_own_files_only(hub, publisher, tmp_path):
    import shutil

    home = tmp_path / "home"
    shutil.copytree(publisher, home, symlinks=True)
    _publish(hub, home)
    qkdb.ingest(make_dataset(tmp_path / "ds-b2", seed=7), "toy-b", home=home, **{**FACTS, "family": "Other"})
    hub.clear_log()
    done = _publish(hub, home)
    assert done.changed and len(hub.repos[REPO].commits) == 3
    assert not [p for p in done.uploaded if "model=toy-a" in p]  # the unchanged model: not one byte
    # (the attention-mass tables have no rows without a captured normaliser: the same empty file both
    # times, not sent again)
    assert {f"{t}/model=toy-b/data.parquet" for t, tb in TABLES.items()
            if tb.versioned and t not in NEED_NORMALISER} <= set(done.uploaded)
    old_run = [p for p in done.deleted if p.startswith("ingest_runs/model=toy-b/")]
    assert len(old_run) == 1  # the run of the replaced version goes, the new run comes
    puts = [r for r in hub.log if r.method == "PUT"]
    assert len(puts) == len([p for p in done.uploaded if p.endswith((".parquet", ".png"))])


def test_pull_adds_the_models_and_the_findings_and_report_are_the_publishers(hub, publisher, tmp_path):
    _publish(hub, publisher)
    home = tmp_path / "pulled"
    done = _pull(hub, home, tmp_path)
    assert done.added == ["toy-a", "toy-b"] and done.findings_match is True and done.origin == "hub"
    for m in ("toy-a", "toy-b"):
        for name, table in TABLES.items():
            if table.versioned:  # the publisher's files, byte for byte
                assert store.current_file(home, m, name).read_bytes() == store.current_file(publisher, m, name).read_bytes()
    a, b = qkdb.connect(publisher), qkdb.connect(home)
    try:
        for sql in ("select * from findings order by id, scope", "select * from head_metrics order by all",
                    "select * from models order by model"):
            assert _rows(a, sql) == _rows(b, sql), sql
        runs = b.sql("select model, source, location, revision from ingest_runs order by model, finished_at").fetchall()
        assert [r[1] for r in runs] == ["path", "pull", "path", "pull"]
        assert runs[1][2:] == (REPO, "main")
    finally:
        a.close()
        b.close()


def test_pulling_again_changes_nothing_and_other_data_is_refused_unless_forced(hub, publisher, tmp_path):
    _publish(hub, publisher)
    home = tmp_path / "pulled"
    _pull(hub, home, tmp_path)
    hub.clear_log()
    again = _pull(hub, home, tmp_path)
    assert again.unchanged == ["toy-a", "toy-b"] and again.added == [] and hub.downloaded() == {}
    # A model of the same name with other data, here: refused, and nothing is written.
    other = tmp_path / "other"
    qkdb.ingest(make_dataset(tmp_path / "ds-x", seed=9), "toy-a", home=other, **FACTS)
    before = store.current_file(other, "toy-a", "rotation").read_bytes()
    with pytest.raises(WarehouseError) as err:
        _pull(hub, other, tmp_path)
    assert err.value.exit_code == EXIT_CODES["input"] and "toy-a" in str(err.value) and "--force" in str(err.value)
    assert store.current_file(other, "toy-a", "rotation").read_bytes() == before
    assert not store.is_ingested(other, "toy-b")  # (refused before anything was added)
    forced = _pull(hub, other, tmp_path, force=True)
    assert forced.replaced == ["toy-a"] and forced.added == ["toy-b"]
    assert store.current_file(other, "toy-a", "rotation").read_bytes() == store.current_file(publisher, "toy-a", "rotation").read_bytes()


def test_a_pulled_model_is_current_for_an_ingest_of_the_same_data(hub, publisher, tmp_path):
    """The pull's run carries the publisher's fingerprint: ingesting the same files with the same parameters skips."""
    _publish(hub, publisher)
    home = tmp_path / "pulled"
    _pull(hub, home, tmp_path, models=["toy-a"])
    again = qkdb.ingest(publisher.parent / "ds-a", "toy-a", home=home, **FACTS)
    assert again.unchanged


def test_pull_of_some_models_and_an_unknown_one(hub, publisher, tmp_path):
    _publish(hub, publisher)
    done = _pull(hub, tmp_path / "one", tmp_path, models=["toy-b"])
    assert done.added == ["toy-b"] and done.findings_match is None  # (other models than published: nothing to compare)
    with pytest.raises(WarehouseError) as err:
        _pull(hub, tmp_path / "two", tmp_path, models=["nope"])
    assert err.value.exit_code == EXIT_CODES["not_found"] and "toy-a, toy-b" in str(err.value)
    assert not (tmp_path / "two").exists()


def test_pull_works_offline_once_pulled(hub, publisher, tmp_path, monkeypatch):
    _publish(hub, publisher)
    _pull(hub, tmp_path / "online", tmp_path)
    hub.clear_log()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    done = _pull(hub, tmp_path / "offline", tmp_path)
    assert done.added == ["toy-a", "toy-b"] and done.origin != "hub" and done.findings_match is True
    assert hub.log == []  # not one request


def test_a_reader_sees_a_pulled_model_whole_or_not_at_all(hub, publisher, tmp_path, monkeypatch):
    """Paused with the model's new version written and not yet switched in: readers see none of it; then all of it."""
    _publish(hub, publisher)
    home = tmp_path / "pulled"
    qkdb.ingest(make_dataset(tmp_path / "ds-c", seed=3), "toy-c", home=home, **FACTS)  # (a warehouse to read meanwhile)
    monkeypatch.setitem(store.PAUSES, "before_swap", 2.0)
    puller = threading.Thread(target=_pull, args=(hub, home, tmp_path), kwargs={"models": ["toy-a"]})
    puller.start()
    versions = home / store.STORE / "toy-a"
    deadline = time.monotonic() + 60
    while not (versions.is_dir() and any(versions.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.02)
    tables = [n for n, t in TABLES.items() if t.versioned]
    count = "select " + ", ".join(f"(select count(*) from {t} where model = 'toy-a')" for t in tables)
    con = qkdb.connect(home)
    try:
        assert not (versions / "current").exists()  # (the pause: written, not switched in)
        assert con.execute(count).fetchall()[0] == (0,) * len(tables)
    finally:
        con.close()
    puller.join()
    con, pub = qkdb.connect(home), qkdb.connect(publisher)
    try:
        # every table's rows, as the publisher has them (the attention-mass tables: none, without a
        # captured normaliser)
        got, want = con.execute(count).fetchall()[0], pub.execute(count).fetchall()[0]
        assert got == want and sum(n > 0 for n in got) == len(tables) - len(NEED_NORMALISER)
    finally:
        con.close()
        pub.close()


# -- refusals, each one line with its kind ---------------------------------------------------------


def test_a_read_only_token_cannot_publish_and_the_remote_is_unchanged(hub, publisher):
    with pytest.raises(HubError) as err:
        _publish(hub, publisher, token=READ)  # the repo cannot even be made
    assert err.value.exit_code == EXIT_CODES["input"] and "write access" in str(err.value)
    assert REPO not in hub.repos
    first = _publish(hub, publisher, models=["toy-a"])
    with pytest.raises(HubError) as err:
        _publish(hub, publisher, token=READ, models=["toy-a", "toy-b"])  # the repo exists: refused at the upload
    assert err.value.exit_code == EXIT_CODES["input"] and "HTTP 403" in str(err.value)
    assert "unchanged" in str(err.value) and hub.repos[REPO].branches["main"] == first.commit


def test_a_model_repo_of_that_name_is_said_on_publish_and_pull(hub, publisher, tmp_path):
    hub.model_repos.add("me/a-model")
    with pytest.raises(HubError) as err:
        _publish(hub, publisher, repo="me/a-model")
    assert err.value.exit_code == EXIT_CODES["input"] and "is a model repo" in str(err.value)
    with pytest.raises(HubError) as err:
        _pull(hub, tmp_path / "h", tmp_path, repo="me/a-model")
    assert err.value.exit_code == EXIT_CODES["not_found"] and "is a model repo" in str(err.value)
    assert "me/a-model" not in hub.repos and not (tmp_path / "h").exists()


def test_an_unknown_revision_and_a_branch_that_is_no_warehouse(hub, publisher, tmp_path):
    _publish(hub, publisher)
    with pytest.raises(HubError) as err:
        _pull(hub, tmp_path / "h", tmp_path, revision="nope")
    assert err.value.exit_code == EXIT_CODES["not_found"] and "'nope' not found" in str(err.value)
    hub.repos[REPO].push("capture", {"l00h00q/data.parquet": b"x", ".gitattributes": b""})
    with pytest.raises(HubError) as err:
        _pull(hub, tmp_path / "h", tmp_path, revision="capture")
    assert err.value.exit_code == EXIT_CODES["input"] and f"qkdb ingest --repo {REPO} --revision capture" in str(err.value)
    with pytest.raises(HubError) as err:  # and publish does not write over it
        _publish(hub, publisher, branch="capture")
    assert err.value.exit_code == EXIT_CODES["input"] and "not a qkdb warehouse" in str(err.value)
    assert _publish(hub, publisher, branch="capture", force=True).changed
    assert not (tmp_path / "h").exists()


def test_a_commit_named_by_its_first_characters(hub, publisher, tmp_path, monkeypatch):
    first = _publish(hub, publisher).commit
    repo = hub.repos[REPO]
    later = repo.push("main", {**repo.commits[first].files, "NOTES.txt": b"a later commit"})
    # An older commit of the branch, by git's 7 characters: found in the branch's history.
    done = _pull(hub, tmp_path / "old", tmp_path, revision=first[:7])
    assert done.added == ["toy-a", "toy-b"] and done.commit == first
    assert any(r.path.startswith(f"/api/datasets/{REPO}/commits/") for r in hub.log)
    # The branch's head, by 12: no history needed.
    hub.clear_log()
    assert _pull(hub, tmp_path / "head", tmp_path, revision=later[:12]).commit == later
    assert not any("/commits/" in r.path for r in hub.log)
    # A prefix of no commit: not found, naming it; fewer than 7 characters is a branch name, not a sha.
    missing = next(p for p in ("0000000", "fffffff") if not any(c.startswith(p) for c in repo.commits))
    for rev in (missing, first[:6]):
        with pytest.raises(HubError) as err:
            _pull(hub, tmp_path / "none", tmp_path, revision=rev)
        assert err.value.exit_code == EXIT_CODES["not_found"] and repr(rev) in str(err.value)
    # Offline, from the commits in the cache.
    hub.clear_log()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert _pull(hub, tmp_path / "offline", tmp_path, revision=first[:9]).commit == first
    assert hub.log == []


def test_models_left_out_are_refused_unless_pruned(hub, publisher):
    _publish(hub, publisher)
    with pytest.raises(HubError) as err:
        _publish(hub, publisher, models=["toy-a"])
    assert err.value.exit_code == EXIT_CODES["input"] and "toy-b" in str(err.value) and "--prune" in str(err.value)
    done = _publish(hub, publisher, models=["toy-a"], prune=True)
    files = hub.repos[REPO].commits[done.commit].files
    assert not [p for p in files if "model=toy-b" in p] and [p for p in files if "model=toy-a" in p]
    assert json.loads(files[MANIFEST])["models"].keys() == {"toy-a"}
    # The card's findings are those of the models published (what a pull of the branch computes).
    findings = pq.read_table(io.BytesIO(files[FINDINGS]))
    assert set(findings.column("n_models").to_pylist()) <= {None, 0, 1}


def test_a_branch_of_its_own(hub, publisher, tmp_path):
    _publish(hub, publisher)
    done = _publish(hub, publisher, branch="only-b", models=["toy-b"])
    assert hub.repos[REPO].branches["only-b"] == done.commit != hub.repos[REPO].branches["main"]
    pulled = _pull(hub, tmp_path / "h", tmp_path, revision="only-b")
    assert pulled.added == ["toy-b"] and pulled.findings_match is True


# -- a network failure in the middle: one commit or none, and the line says which ----------------------


def test_a_commit_cut_off_leaves_the_branch_as_it_was(hub, publisher):
    first = _publish(hub, publisher, models=["toy-a"])
    hub.commit_failure = "before"
    with pytest.raises(HubError) as err:
        _publish(hub, publisher, prune=True)
    message = str(err.value)
    assert err.value.exit_code == EXIT_CODES["network"] and "\n" not in message
    assert f"{REPO}@main is unchanged (still at {first.commit})" in message
    assert hub.repos[REPO].branches["main"] == first.commit and len(hub.repos[REPO].commits) == 2
    hub.clear_log()
    again = _publish(hub, publisher)  # run again: the objects uploaded before are not sent twice
    assert again.changed and not [r for r in hub.log if r.method == "PUT"]


def test_a_lost_reply_to_a_commit_that_was_made_is_said_and_is_a_success(hub, publisher):
    hub.commit_failure = "after"
    done = _publish(hub, publisher)
    assert done.note and "holds it, whole" in done.note and hub.repos[REPO].branches["main"] == done.commit


def test_an_upload_that_fails_once_is_retried(hub, publisher):
    hub.fail_uploads = 1
    done = _publish(hub, publisher)
    assert done.changed and hub.fail_uploads == 0


class _NoWait:
    """The ``time`` module as huggingface_hub's retry loop sees it, with its waits recorded instead of slept."""

    def __init__(self):
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def __getattr__(self, name):
        return getattr(time, name)


def test_uploads_that_keep_failing_leave_no_commit(hub, publisher, monkeypatch):
    """huggingface_hub retries a failing upload five times (1 + 2 + 4 + 8 + 8 s): every retry runs
    over real HTTP, only its waits are recorded instead of slept (49 s of the suite)."""
    from huggingface_hub.utils import _http

    _publish(hub, publisher, models=["toy-a"])
    before = dict(hub.repos[REPO].branches)
    hub.fail_uploads = -1
    clock = _NoWait()
    monkeypatch.setattr(_http, "time", clock)
    with pytest.raises(QkdbError) as err:
        _publish(hub, publisher, prune=True)
    assert "unchanged" in str(err.value) and "\n" not in str(err.value)
    assert hub.repos[REPO].branches == before and len(hub.repos[REPO].commits) == 2
    # The backoff really ran to its end: each upload thread waited 1, 2, 4, 8 and 8 s before its retries.
    assert Counter(clock.waits) >= Counter([1, 2, 4, 8, 8]), clock.waits


def test_a_file_that_is_not_the_manifests_is_refused_and_nothing_is_added(hub, publisher, tmp_path):
    done = _publish(hub, publisher)
    files = hub.repos[REPO].commits[done.commit].files
    path = "rotation/model=toy-b/data.parquet"
    files[path] = store.current_file(publisher, "toy-a", "rotation").read_bytes()  # (another model's file)
    hub.repos[REPO].blobs[hashlib.sha256(files[path]).hexdigest()] = (path, files[path])
    with pytest.raises(HubError) as err:
        _pull(hub, tmp_path / "h", tmp_path)
    assert err.value.exit_code == EXIT_CODES["input"] and path in str(err.value) and "sha256" in str(err.value)
    assert not (tmp_path / "h").exists()

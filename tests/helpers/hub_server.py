"""A fake Hugging Face Hub on 127.0.0.1 for the Hub-ingest tests (stdlib ``http.server`` only).

It implements the few endpoints ``huggingface_hub`` 2.x uses to list and download a dataset:

- ``GET  /api/datasets/{repo}/revision/{rev}``: ``{"id", "sha", ...}`` (branch or commit sha)
- ``GET  /api/datasets/{repo}/tree/{rev}[/{path}]?recursive=..``: entries, paged with ``Link: rel="next"``
- ``GET  /api/datasets/{repo}/refs``: ``branches`` / ``tags`` / ``converts``
- ``GET  /api/datasets/{repo}/commits/{rev}``: the revision's history, newest first (one page)
- ``HEAD /datasets/{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit`` and ``ETag``; LFS files answer 302
  to a second "CDN" server (another origin, as on the real Hub) with ``X-Linked-Etag``/``X-Linked-Size``
- ``GET  /datasets/{repo}/resolve/{rev}/{path}`` and ``GET /cdn/{sha256}``: the bytes, with ``Range`` support

and, for uploads (``huggingface_hub``'s ``create_repo``, ``create_branch``, ``create_commit``; see
"writing" below): ``POST /api/repos/create``, ``POST /api/validate-yaml``, ``POST .../preupload/{rev}``,
``POST /datasets/{repo}.git/info/lfs/objects/batch`` with its ``PUT`` of the bytes to the CDN server,
``POST .../commit/{rev}`` (one commit, all or nothing, honouring ``parentCommit``), ``POST .../branch/{b}``;
and ``GET /api/models/{repo}`` for model repos (:attr:`FakeHub.model_repos`). The fake speaks the LFS
protocol, not Xet: tests that upload set ``HF_HUB_DISABLE_XET`` (as a client without ``hf_xet`` would be).

Revisions arrive URL-encoded (branch names contain dots and may contain slashes), so the raw path is
split before it is decoded. Every request is logged (method, decoded path, Range header) so tests can
count what was downloaded. Switches simulate failures: a gated or private repo, a file that the tree
lists but ``resolve`` does not serve, and connections cut in the middle of a body.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".parquet", ".png", ".safetensors", ".bin", ".gguf")  # stored and served as LFS objects (uploads: preupload says "lfs")


# Memoised: every listing page names every file's hashes, and a full-size model is 496 files of
# 3.6 MB (hashing them per page made one listing take minutes). A file's bytes object is the key
# (bytes cache their hash; a dict lookup tries identity first).
@functools.lru_cache(maxsize=8192)
def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@functools.lru_cache(maxsize=8192)
def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def qk_sniffer_files(root: str | Path, *, model_name: str, metadata: dict | None = None) -> dict[str, bytes]:
    """The files of a capture as qk-sniffer writes and pushes it, from the head folders below ``root``.

    A real branch of ``viktoroo/sniffed-qk`` holds, at its root: one ``lLLhHH{q|k}/data.parquet``
    folder per captured head, qk-sniffer's dataset card ``README.md`` (markdown without a YAML
    header), its writer's ``_saver_state.json`` (``model_name``, ``model_metadata``,
    ``bucket_counts``) and ``.gitattributes``. ``metadata`` is the ``model_metadata`` to record.
    """
    import pyarrow.parquet as pq

    files, configs, buckets = {}, [], Counter()
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir() and (p / "data.parquet").is_file()):
        data = (folder / "data.parquet").read_bytes()
        files[f"{folder.name}/data.parquet"] = data
        configs.append(folder.name)
        try:  # (a test may push bytes that are no parquet file: they count in no bucket)
            buckets.update(pq.read_table(folder / "data.parquet", columns=["bucket"]).column("bucket").to_pylist())
        except (OSError, ValueError):
            pass
    metadata = dict(metadata or {})
    state = {"model_name": model_name, "model_metadata": metadata,
             "bucket_counts": {str(b): n for b, n in sorted(buckets.items())}}
    files["_saver_state.json"] = json.dumps(state, indent=2, sort_keys=True).encode()
    files["README.md"] = (
        "# sniffed-qk (model specialization)\n\nThis branch stores one model-specific specialization of the "
        "sniffed-qk dataset.\n\n## Current Specialization Metadata\n"
        f"- `model`: `{model_name}`\n"
        + "".join(f"- `{k}`: `{v}`\n" for k, v in sorted(metadata.items()))
        + f"- `captured_configs`: `{len(configs)}`\n\n## Captured Configs\n"
        + "".join(f"- `{c}`\n" for c in configs)
        + "\n## Dataset Layout\n- `README.md`\n- `lXXhYYq/data.parquet` for query vectors\n"
        "- `lXXhYYk/data.parquet` for key vectors\n"
    ).encode()
    files[".gitattributes"] = (
        b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.arrow filter=lfs diff=lfs merge=lfs -text\n"
    )
    return files


@dataclass
class Commit:
    sha: str
    files: dict[str, bytes]
    parent: str | None = None  # the commit it was made on (for the commits listing)


@dataclass
class FakeRepo:
    """A dataset repo: branches pointing at commits, each commit a dict of path -> bytes."""

    repo_id: str
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit sha
    commits: dict[str, Commit] = field(default_factory=dict)
    gated: bool = False  # resolve answers 403 GatedRepo unless the request carries an accepted token
    private: bool = False  # every endpoint answers a bare 401 unless the request carries an accepted token
    blobs: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # LFS sha256 -> (path, bytes)

    def push(self, branch: str, files: dict[str, bytes]) -> str:
        """Make a commit of exactly ``files`` on ``branch`` (created if new); return its sha."""
        h = hashlib.sha1(f"{self.repo_id}\0{branch}\0{len(self.commits)}".encode())
        for path in sorted(files):
            h.update(path.encode() + b"\0" + sha256_hex(files[path]).encode())
        sha = h.hexdigest()
        self.commits[sha] = Commit(sha, dict(files), self.branches.get(branch))
        for path, data in files.items():
            self.blobs[sha256_hex(data)] = (path, data)
        self.branches[branch] = sha
        return sha

    def push_dir(self, branch: str, root: str | Path, prefix: str = "") -> str:
        """Commit every file below ``root`` (paths relative to it, under ``prefix``)."""
        root = Path(root)
        files = {}
        for p in sorted(root.rglob("*")):
            if p.is_file():
                rel = p.relative_to(root).as_posix()
                files[f"{prefix.strip('/')}/{rel}" if prefix else rel] = p.read_bytes()
        files.setdefault(".gitattributes", b"*.parquet filter=lfs diff=lfs merge=lfs -text\n")
        return self.push(branch, files)

    def push_capture(self, branch: str, root: str | Path, *, model_name: str, metadata: dict | None = None) -> str:
        """Commit the head folders below ``root`` as qk-sniffer pushes a capture (:func:`qk_sniffer_files`); return the commit's sha."""
        return self.push(branch, qk_sniffer_files(root, model_name=model_name, metadata=metadata))

    def commit_for(self, rev: str) -> Commit | None:
        if rev in self.branches:
            return self.commits[self.branches[rev]]
        return self.commits.get(rev)


@dataclass
class Request:
    method: str
    path: str  # decoded path, without query
    range: str | None
    server: str  # "hub" or "cdn"


class FakeHub:
    """Two threading HTTP servers (the Hub and its CDN) sharing one state; start with ``with FakeHub() as hub``."""

    def __init__(self, page_size: int = 7, tokens: tuple[str, ...] = ("hf_valid_token",), rate: float | None = None):
        self.repos: dict[str, FakeRepo] = {}
        # Bytes per second of file bodies over all connections together (a node's link), None: as fast
        # as loopback goes. For benchmarks/hub.py.
        self.rate = rate
        self._link_free_at = 0.0
        self.page_size = page_size
        self.tokens = set(tokens)
        self.log: list[Request] = []
        self.lock = threading.Lock()
        # path -> how many more GETs of that repo file to cut; value < 0 means forever
        self.cuts: dict[str, int] = {}
        self.cut_fraction = 0.5
        self.unserved: set[str] = set()  # repo paths listed in trees but 404 on resolve
        # -- writing --
        self.write_tokens: set[str] = {"hf_write_token"}  # tokens that may create repos and commit (others: read only)
        self.model_repos: set[str] = set()  # ids of model repos (GET /api/models/{id} answers 200)
        self.models: dict[str, FakeRepo] = {}  # model repos with files (add_model): what from_pretrained downloads
        self.uploaded: dict[str, bytes] = {}  # LFS objects PUT but not yet in any commit (sha256 -> bytes)
        self.fail_uploads = 0  # the next N LFS PUTs answer 503 after reading the body (-1: every one)
        # "before": the commit request is read, then the connection is dropped and nothing committed;
        # "after": the commit is made, then the connection is dropped before the reply. Once each.
        self.commit_failure: str | None = None
        self._hub = self._cdn = None
        self._threads: list[threading.Thread] = []

    # -- set-up -----------------------------------------------------------------------------------
    def add_repo(self, repo_id: str) -> FakeRepo:
        repo = FakeRepo(repo_id)
        self.repos[repo_id] = repo
        return repo

    def add_model(self, repo_id: str) -> FakeRepo:
        """A model repo whose branches hold files (a checkpoint per branch, as Pythia's ``stepN``)."""
        repo = FakeRepo(repo_id)
        self.models[repo_id] = repo
        self.model_repos.add(repo_id)
        return repo

    def cut(self, path: str, times: int = 1) -> None:
        """Cut the connection mid-body for the next ``times`` downloads of ``path`` (-1: always).

        A cut sends the headers of the full answer, the bytes up to ``cut_fraction`` of the *file*
        (so a resumed Range request past that point gets no bytes at all), then closes the socket.
        """
        with self.lock:
            self.cuts[path] = times

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def start(self) -> "FakeHub":
        self._hub = _Server(("127.0.0.1", 0), _Handler, self, "hub")
        self._cdn = _Server(("127.0.0.1", 0), _Handler, self, "cdn")
        for srv in (self._hub, self._cdn):
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        for srv in (self._hub, self._cdn):
            if srv is not None:
                srv.shutdown()
                srv.close_connections()
                srv.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- inspection -------------------------------------------------------------------------------
    def clear_log(self) -> None:
        with self.lock:
            self.log.clear()

    def counts(self) -> Counter:
        with self.lock:
            return Counter((r.method, r.path) for r in self.log)

    def downloaded(self) -> Counter:
        """How many GETs of file bytes each repo file received (resolve or CDN), keyed by repo path."""
        out: Counter = Counter()
        with self.lock:
            log = list(self.log)
        for r in log:
            if r.method != "GET":
                continue
            if r.server == "cdn":
                out[self._cdn_path(r.path)] += 1
            elif (m := _RESOLVE.match(r.path)) is not None:
                out[m.group("path")] += 1
        return out

    def _cdn_path(self, path: str) -> str:
        hit = self.blob(path.rsplit("/", 1)[-1])
        return hit[0] if hit else path

    def blob(self, sha256: str) -> tuple[str, bytes] | None:
        """The repo path and bytes of an LFS object (what the CDN serves)."""
        for repo in (*self.repos.values(), *self.models.values()):
            if sha256 in repo.blobs:
                return repo.blobs[sha256]
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, hub: FakeHub, role: str):
        super().__init__(addr, handler)
        self.hub = hub
        self.role = role
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Drop kept-alive connections, so no client reuses one to reach a stopped fake."""
        with self._open_lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# --------------------------------------------------------------------------------------------------
# writing: what huggingface_hub's create_repo, create_branch and create_commit send (LFS, not Xet)
# --------------------------------------------------------------------------------------------------

GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.png filter=lfs diff=lfs merge=lfs -text\n"
_MODEL_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/[^/]+)?$")
_REPO_INFO = re.compile(r"^/api/datasets/(?P<repo>[^/]+/[^/]+)$")
_WRITE_API = re.compile(r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/(?P<what>preupload|commit|branch)/(?P<rev>[^/]+)$")
_LFS_BATCH = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch$")
_UPLOAD = re.compile(r"^/upload/(?P<sha256>[0-9a-f]{64})$")


def _commit_sha(repo: FakeRepo, parent: str, files: dict[str, bytes]) -> str:
    h = hashlib.sha1(f"{repo.repo_id}\0{parent}\0{len(repo.commits)}".encode())
    for path in sorted(files):
        h.update(path.encode() + b"\0" + sha256_hex(files[path]).encode())
    return h.hexdigest()


class _Writing:
    """The handler's write verbs (a mixin of :class:`_Handler`, kept apart from the read side)."""

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _may_write(self) -> bool:
        """Whether the request carries a write token; answers 401 (none or unknown) or 403 (read only) otherwise."""
        auth = self.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else None
        if token in self.hub.write_tokens:
            return True
        if token in self.hub.tokens:
            self._error(403, None, "You don't have the rights to write to this repository: your token is read-only.")
        else:
            self._error(401, None, "Invalid credentials in Authorization header")
        return False

    def _drop(self) -> None:
        """Close the connection without an answer (a network failure as the client sees it)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _dispatch_write(self, method: str) -> None:
        raw, _ = self._log(method)
        body = self._body()
        if self.server.role == "cdn":
            m = _UPLOAD.match(raw)
            if method != "PUT" or m is None:
                return self._error(404, None, f"no route for {method} {raw}")
            return self._upload(m.group("sha256"), body)
        if method != "POST":
            return self._error(405, None, "method not allowed")
        if raw == "/api/validate-yaml":
            return self._json({"errors": [], "warnings": []})
        if raw == "/api/repos/create":
            return self._create_repo(json.loads(body or b"{}"))
        if (m := _LFS_BATCH.match(raw)) is not None:
            return self._lfs_batch(unquote(m.group("repo")), json.loads(body or b"{}"))
        if (m := _WRITE_API.match(raw)) is not None:
            repo = self._repo(unquote(m.group("repo")))
            if repo is None or not self._may_write():
                return
            rev, what = unquote(m.group("rev")), m.group("what")
            if what == "branch":
                return self._create_branch(repo, rev, json.loads(body or b"{}"))
            if what == "preupload":
                return self._preupload(repo, rev, json.loads(body or b"{}"))
            return self._commit(repo, rev, body)
        self._error(404, None, f"no route for {method} {raw}")

    def _model_repo(self, repo_id: str, head: bool) -> None:
        if repo_id not in self.hub.model_repos:
            return self._error(404, "RepoNotFound", "Repository not found", head=head)
        self._json({"id": repo_id, "sha": hashlib.sha1(repo_id.encode()).hexdigest(), "private": False})

    def _create_repo(self, payload: dict) -> None:
        if not self._may_write():
            return
        if payload.get("type") != "dataset":
            return self._error(400, None, "this fake Hub creates dataset repos only")
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        if repo_id in self.hub.repos:
            return self._json({"error": "You already created this dataset repo", "url": f"{self.hub.url}/datasets/{repo_id}"}, 409)
        with self.hub.lock:
            repo = self.hub.add_repo(repo_id)
            repo.private = bool(payload.get("private")) or payload.get("visibility") == "private"
            repo.push("main", {".gitattributes": GITATTRIBUTES})  # (the Hub's first commit)
        self._json({"url": f"{self.hub.url}/datasets/{repo_id}", "name": repo_id, "id": repo_id})

    def _create_branch(self, repo: FakeRepo, branch: str, payload: dict) -> None:
        if branch in repo.branches:
            return self._error(409, None, f"Reference already exists: refs/heads/{branch}")
        start = repo.commit_for(payload.get("startingPoint") or "main")
        if start is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {payload.get('startingPoint')}")
        with self.hub.lock:
            repo.branches[branch] = start.sha
        self._json({})

    def _preupload(self, repo: FakeRepo, rev: str, payload: dict) -> None:
        commit = repo.commit_for(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        files = []
        for f in payload.get("files", []):
            lfs = f["path"].endswith(LFS_SUFFIXES)
            have = commit.files.get(f["path"])
            oid = None if have is None else (sha256_hex(have) if lfs else git_blob_sha(have))
            files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
        self._json({"files": files, "commitOid": commit.sha})

    def _lfs_batch(self, repo_id: str, payload: dict) -> None:
        repo = self._repo(repo_id)
        if repo is None or not self._may_write():
            return
        objects = []
        for o in payload.get("objects", []):
            entry = {"oid": o["oid"], "size": o["size"]}
            if self.hub.blob(o["oid"]) is None and o["oid"] not in self.hub.uploaded:
                entry["actions"] = {"upload": {"href": f"{self.hub.cdn_url}/upload/{o['oid']}", "header": {}}}
            objects.append(entry)
        self._json({"transfer": "basic", "objects": objects})

    def _upload(self, sha256: str, body: bytes) -> None:
        with self.hub.lock:
            failing = self.hub.fail_uploads
            if failing:
                self.hub.fail_uploads = failing - 1 if failing > 0 else failing
        if failing:
            return self._error(503, None, "Service Unavailable")
        if sha256_hex(body) != sha256:
            return self._error(400, None, "the body's sha256 is not the object id")
        with self.hub.lock:
            self.hub.uploaded[sha256] = body
        self._send(200)

    def _commit(self, repo: FakeRepo, rev: str, body: bytes) -> None:
        with self.hub.lock:
            failure, self.hub.commit_failure = self.hub.commit_failure, None
        if failure == "before":
            return self._drop()
        if rev not in repo.branches:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next((x["value"] for x in lines if x["key"] == "header"), {})
        with self.hub.lock:
            head = repo.branches[rev]
            parent = header.get("parentCommit")
            if parent and not head.startswith(parent):
                return self._error(412, None, f"A commit has happened since {parent}: the branch is at {head}")
            files = dict(repo.commits[head].files)
            for item in lines:
                key, value = item["key"], item.get("value", {})
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "lfsFile":
                    data = self.hub.uploaded.get(value["oid"]) or (self.hub.blob(value["oid"]) or (None, None))[1]
                    if data is None:
                        return self._error(422, None, f"LFS object {value['oid']} was never uploaded")
                    files[value["path"]] = data
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    files = {p: d for p, d in files.items() if not p.startswith(prefix)}
            sha = _commit_sha(repo, head, files)
            repo.commits[sha] = Commit(sha, files, head)
            for path, data in files.items():
                if path.endswith(LFS_SUFFIXES):
                    repo.blobs[sha256_hex(data)] = (path, data)
            repo.branches[rev] = sha
        if failure == "after":
            return self._drop()
        self._json({"commitUrl": f"{self.hub.url}/datasets/{repo.repo_id}/commit/{sha}", "commitOid": sha,
                    "pullRequestUrl": None})


# Raw (still URL-encoded) paths: the revision is exactly one segment.
_API = re.compile(r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/(?P<what>revision|tree|refs|commits)(?:/(?P<rev>[^/]+))?(?:/(?P<path>.*))?$")
_RESOLVE_RAW = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_RESOLVE = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>.+?)/(?P<path>.+)$")  # decoded, for logs
_CDN = re.compile(r"^/cdn/(?P<sha256>[0-9a-f]{64})$")


# -- model repos with files (FakeHub.add_model): what transformers' from_pretrained asks for --------------------

_MODEL_TREE_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<what>revision|tree|refs)(?:/(?P<rev>[^/]+))?"
                             r"(?:/(?P<path>.*))?$")
_MODEL_RESOLVE_RAW = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


class _ModelFiles:
    """The handler's routes for model repos with files (a mixin of :class:`_Handler`, kept apart like writing)."""

    def _model_files(self, raw: str, query: dict, head: bool) -> bool:
        """Serve a request for a model repo of :attr:`FakeHub.models` (True when it was one)."""
        models = self.hub.models
        m = _MODEL_TREE_API.match(raw)
        if m is not None and unquote(m.group("repo")) in models:
            if head:
                self._error(405, None, "method not allowed", head=True)
            else:
                self._api(m, query, repos=models, kind="models")
            return True
        m = _MODEL_RESOLVE_RAW.match(raw)
        if m is not None and unquote(m.group("repo")) in models:
            self._resolve(unquote(m.group("repo")), unquote(m.group("rev")), unquote(m.group("path")), head,
                          repos=models)
            return True
        return False



class _Handler(_ModelFiles, _Writing, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def hub(self) -> FakeHub:
        return self.server.hub

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        headers = dict(headers or {})
        headers.setdefault("Content-Length", len(body))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _send_paced(self, status: int, body: bytes, headers: dict, chunk: int = 1 << 20) -> None:
        """Send ``body`` through the hub's shared link of ``rate`` bytes/s: chunks take turns on it."""
        self._send(status, b"", {**headers, "Content-Length": len(body)}, head=True)
        view = memoryview(body)
        for start in range(0, len(body), chunk):
            part = view[start : start + chunk]
            with self.hub.lock:
                begin = max(time.monotonic(), self.hub._link_free_at)
                self.hub._link_free_at = done = begin + len(part) / self.hub.rate
            time.sleep(max(0.0, done - time.monotonic()))
            self.wfile.write(part)

    def _json(self, obj, status: int = 200, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str | None, message: str, head: bool = False, extra: dict | None = None) -> None:
        headers = {"Content-Type": "application/json", **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        headers["X-Error-Message"] = message
        self._send(status, json.dumps({"error": message}).encode(), headers, head=head)

    def _authorised(self) -> bool:
        auth = self.headers.get("Authorization", "")
        return auth.startswith("Bearer ") and auth[7:] in self.hub.tokens

    def _log(self, method: str) -> tuple[str, dict]:
        parts = urlsplit(self.path)
        with self.hub.lock:
            self.hub.log.append(Request(method, unquote(parts.path), self.headers.get("Range"), self.server.role))
        return parts.path, parse_qs(parts.query)

    # -- verbs ------------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch_write("POST")

    def do_PUT(self) -> None:
        self._dispatch_write("PUT")

    def _dispatch(self, method: str) -> None:
        raw, query = self._log(method)
        head = method == "HEAD"
        if self.server.role == "cdn":
            m = _CDN.match(raw)
            hit = self.hub.blob(m.group("sha256")) if m else None
            if hit is None:
                return self._error(404, None, "no such object", head=head)
            return self._serve_bytes(hit[1], head, hit[0])
        if self._model_files(raw, query, head):
            return None
        if (m := _MODEL_API.match(raw)) is not None:
            return self._model_repo(unquote(m.group("repo")), head)
        if (m := _REPO_INFO.match(raw)) is not None:  # repo_info without a revision: of its main branch
            raw = f"/api/datasets/{m.group('repo')}/revision/main"
        if m := _API.match(raw):
            if head:
                return self._error(405, None, "method not allowed", head=True)
            return self._api(m, query)
        if m := _RESOLVE_RAW.match(raw):
            return self._resolve(unquote(m.group("repo")), unquote(m.group("rev")), unquote(m.group("path")), head)
        self._error(404, None, f"no route for {raw}", head=head)

    def _repo(self, repo_id: str, head: bool = False, repos: dict | None = None) -> FakeRepo | None:
        repo = (self.hub.repos if repos is None else repos).get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found", head=head)
            return None
        if repo.private and not self._authorised():
            # The Hub answers a private repo without credentials like a missing one, without an error code.
            self._error(401, None, "Invalid username or password.", head=head)
            return None
        return repo

    def _api(self, m: re.Match, query: dict, repos: dict | None = None, kind: str = "datasets") -> None:
        repo = self._repo(unquote(m.group("repo")), repos=repos)
        if repo is None:
            return
        what = m.group("what")
        if what == "refs":
            branches = [
                {"name": b, "ref": f"refs/heads/{b}", "targetCommit": sha} for b, sha in sorted(repo.branches.items())
            ]
            return self._json({"branches": branches, "tags": [], "converts": []})
        rev = unquote(m.group("rev") or "main")
        commit = repo.commit_for(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        if what == "revision":
            return self._json({"id": repo.repo_id, "sha": commit.sha, "private": repo.private, "gated": repo.gated and "auto"})
        if what == "commits":  # the branch's history, newest first, on one page
            history = []
            while commit is not None:
                history.append({"id": commit.sha, "title": f"commit {commit.sha[:7]}", "message": "", "authors": [],
                                "date": "2026-01-01T00:00:00.000Z"})
                commit = repo.commits.get(commit.parent) if commit.parent else None
            return self._json(history)
        # tree
        sub = unquote(m.group("path") or "").strip("/")
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        entries = _tree_entries(commit, sub, recursive)
        if entries is None:
            return self._error(404, "EntryNotFound", f"{sub} does not exist on {rev}")
        cursor = int(query.get("cursor", ["0"])[0])
        page = entries[cursor : cursor + self.hub.page_size]
        headers = {}
        if cursor + self.hub.page_size < len(entries):
            nxt = (
                f"{self.hub.url}/api/{kind}/{repo.repo_id}/tree/{quote(rev, safe='')}"
                + (f"/{quote(sub)}" if sub else "")
                + f"?recursive={str(recursive).lower()}&expand=false&cursor={cursor + self.hub.page_size}"
            )
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._json(page, headers=headers)

    def _resolve(self, repo_id: str, rev: str, path: str, head: bool, repos: dict | None = None) -> None:
        repo = self._repo(repo_id, head=head, repos=repos)
        if repo is None:
            return
        if repo.gated and not self._authorised():
            return self._error(
                403 if self.headers.get("Authorization") else 401,
                "GatedRepo",
                "Access to this dataset is restricted. You must be authenticated and have been granted access.",
                head=head,
            )
        commit = repo.commit_for(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
        data = commit.files.get(path)
        if data is None or path in self.hub.unserved:
            return self._error(404, "EntryNotFound", f"{path} does not exist", head=head, extra={"X-Repo-Commit": commit.sha})
        base = {"X-Repo-Commit": commit.sha}
        if path.endswith(LFS_SUFFIXES):
            sha256 = sha256_hex(data)
            headers = {
                **base,
                "Location": f"{self.hub.cdn_url}/cdn/{sha256}",
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": len(data),
                "ETag": f'"{git_blob_sha(data)}"',
            }
            return self._send(302, b"", headers, head=head)
        if head:
            headers = {**base, "ETag": f'"{git_blob_sha(data)}"', "Content-Length": len(data)}
            return self._send(200, b"", headers, head=True)
        self._serve_bytes(data, False, path, extra=base)

    # -- bytes ------------------------------------------------------------------------------------
    def _serve_bytes(self, data: bytes, head: bool, repo_path: str, extra: dict | None = None) -> None:
        size = len(data)
        start = 0
        rng = self.headers.get("Range")
        headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", **(extra or {})}
        status = 200
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if not m or int(m.group(1)) >= size:
                return self._error(416, None, "range not satisfiable", head=head, extra={"Content-Range": f"bytes */{size}"})
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else size - 1
            data = data[start : end + 1]
            status = 206
            headers["Content-Range"] = f"bytes {start}-{start + len(data) - 1}/{size}"
        if head:
            return self._send(status, b"", {**headers, "Content-Length": len(data)}, head=True)
        with self.hub.lock:
            left = self.hub.cuts.get(repo_path, 0)
            if left:
                self.hub.cuts[repo_path] = left - 1 if left > 0 else left
        if not left:
            if self.hub.rate:
                return self._send_paced(status, data, headers)
            return self._send(status, data, headers)
        # Promise the whole answer, send up to the cut point of the file, then drop the connection.
        stop = max(0, int(size * self.hub.cut_fraction) - start)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[:stop])
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(2)
        except OSError:
            pass


def _tree_entries(commit: Commit, sub: str, recursive: bool) -> list[dict] | None:
    """The tree endpoint's entries below ``sub`` (files and folders, sorted), or None if ``sub`` is absent."""
    prefix = f"{sub}/" if sub else ""
    files = {p: d for p, d in commit.files.items() if p.startswith(prefix)}
    if sub and not files:
        return None
    dirs: set[str] = set()
    out: list[dict] = []
    for path, data in sorted(files.items()):
        rest = path[len(prefix) :]
        parts = rest.split("/")
        for i in range(1, len(parts)):
            dirs.add(prefix + "/".join(parts[:i]))
        if not recursive and len(parts) > 1:
            continue
        entry = {"type": "file", "oid": git_blob_sha(data), "size": len(data), "path": path}
        if path.endswith(LFS_SUFFIXES):
            entry["lfs"] = {"oid": sha256_hex(data), "size": len(data), "pointerSize": 134}
        out.append(entry)
    for d in sorted(dirs):
        if recursive or "/" not in d[len(prefix) :]:
            out.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "path": d})
    return sorted(out, key=lambda e: e["path"])


# --------------------------------------------------------------------------------------------------
# text datasets for `qkdb sniff --dataset`: parquet and jsonl data files laid out as on the Hub
# --------------------------------------------------------------------------------------------------


def parquet_bytes(columns: dict[str, list], row_group_size: int = 3) -> bytes:
    """One parquet file of ``columns`` (name -> values), in row groups of ``row_group_size`` rows."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf, row_group_size=row_group_size)
    return buf.getvalue()


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def parquet_shards(columns: dict[str, list], shards: int, split: str = "train", folder: str = "data") -> dict[str, bytes]:
    """``columns`` cut into ``shards`` parquet files named as the Hub names them:
    ``{folder}/{split}-0000i-of-0000n.parquet`` (rows in order across the shards)."""
    n = len(next(iter(columns.values())))
    bounds = [round(i * n / shards) for i in range(shards + 1)]
    return {
        f"{folder}/{split}-{i:05d}-of-{shards:05d}.parquet":
            parquet_bytes({k: v[bounds[i]:bounds[i + 1]] for k, v in columns.items()})
        for i in range(shards)
    }


def dataset_card(configs: list[dict]) -> bytes:
    """A dataset card (``README.md``) whose YAML header declares ``configs`` (config_name, data_files), as the Hub's."""
    lines = ["---", "configs:"]
    for c in configs:
        lines.append(f"- config_name: {c['config_name']}")
        lines.append("  data_files:")
        for split, path in c["data_files"].items():
            lines.append(f"  - split: {split}")
            lines.append(f"    path: {path}")
    lines += ["---", "", "# A text dataset", ""]
    return "\n".join(lines).encode()

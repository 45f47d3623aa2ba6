"""A fake Hugging Face Hub on 127.0.0.1 for the Hub-ingest tests (stdlib ``http.server`` only).

It implements the few endpoints ``huggingface_hub`` 2.x uses to list and download a dataset:

- ``GET  /api/datasets/{repo}/revision/{rev}``: ``{"id", "sha", ...}`` (branch or commit sha)
- ``GET  /api/datasets/{repo}/tree/{rev}[/{path}]?recursive=..``: entries, paged with ``Link: rel="next"``
- ``GET  /api/datasets/{repo}/refs``: ``branches`` / ``tags`` / ``converts``
- ``HEAD /datasets/{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit`` and ``ETag``; LFS files answer 302
  to a second "CDN" server (another origin, as on the real Hub) with ``X-Linked-Etag``/``X-Linked-Size``
- ``GET  /datasets/{repo}/resolve/{rev}/{path}`` and ``GET /cdn/{sha256}``: the bytes, with ``Range`` support

Revisions arrive URL-encoded (branch names contain dots and may contain slashes), so the raw path is
split before it is decoded. Every request is logged (method, decoded path, Range header) so tests can
count what was downloaded. Switches simulate failures: a gated or private repo, a file that the tree
lists but ``resolve`` does not serve, and connections cut in the middle of a body.
"""

from __future__ import annotations

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

LFS_SUFFIXES = (".parquet",)


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
        self.commits[sha] = Commit(sha, dict(files))
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
        self._hub = self._cdn = None
        self._threads: list[threading.Thread] = []

    # -- set-up -----------------------------------------------------------------------------------
    def add_repo(self, repo_id: str) -> FakeRepo:
        repo = FakeRepo(repo_id)
        self.repos[repo_id] = repo
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
        for repo in self.repos.values():
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


# Raw (still URL-encoded) paths: the revision is exactly one segment.
_API = re.compile(r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/(?P<what>revision|tree|refs)(?:/(?P<rev>[^/]+))?(?:/(?P<path>.*))?$")
_RESOLVE_RAW = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_RESOLVE = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>.+?)/(?P<path>.+)$")  # decoded, for logs
_CDN = re.compile(r"^/cdn/(?P<sha256>[0-9a-f]{64})$")


class _Handler(BaseHTTPRequestHandler):
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

    def _dispatch(self, method: str) -> None:
        raw, query = self._log(method)
        head = method == "HEAD"
        if self.server.role == "cdn":
            m = _CDN.match(raw)
            hit = self.hub.blob(m.group("sha256")) if m else None
            if hit is None:
                return self._error(404, None, "no such object", head=head)
            return self._serve_bytes(hit[1], head, hit[0])
        if m := _API.match(raw):
            if head:
                return self._error(405, None, "method not allowed", head=True)
            return self._api(m, query)
        if m := _RESOLVE_RAW.match(raw):
            return self._resolve(unquote(m.group("repo")), unquote(m.group("rev")), unquote(m.group("path")), head)
        self._error(404, None, f"no route for {raw}", head=head)

    def _repo(self, repo_id: str, head: bool = False) -> FakeRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found", head=head)
            return None
        if repo.private and not self._authorised():
            # The Hub answers a private repo without credentials like a missing one, without an error code.
            self._error(401, None, "Invalid username or password.", head=head)
            return None
        return repo

    def _api(self, m: re.Match, query: dict) -> None:
        repo = self._repo(unquote(m.group("repo")))
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
                f"{self.hub.url}/api/datasets/{repo.repo_id}/tree/{quote(rev, safe='')}"
                + (f"/{quote(sub)}" if sub else "")
                + f"?recursive={str(recursive).lower()}&expand=false&cursor={cursor + self.hub.page_size}"
            )
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._json(page, headers=headers)

    def _resolve(self, repo_id: str, rev: str, path: str, head: bool) -> None:
        repo = self._repo(repo_id, head=head)
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

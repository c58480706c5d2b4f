"""A Hub-compatible HTTP server on 127.0.0.1 for tests: just enough of the Hugging Face Hub API for
the real huggingface_hub client to create a repository, commit files, list the tree and download.

Why: huggingface_hub 2.4 speaks HTTP through its own client, so request-mocking libraries miss its
calls; pointing HF_ENDPOINT (or `endpoint=`) at this server runs the real client end to end with
nothing leaving the machine. State lives in the server object (repos -> commits -> files), so each
test gets a fresh Hub. Routes (see shared REFERENCE.md):

    POST /api/repos/create                      POST /api/validate-yaml
    POST /api/models/{id}/preupload/{rev}       POST /api/models/{id}/commit/{rev}   (NDJSON)
    GET  /api/models/{id}[/revision/{rev}]      GET  /api/models/{id}/tree/{rev}[/{path}]
    HEAD/GET /{id}/resolve/{rev}/{path}

Every request is recorded in `server.requests` as (method, path) so tests can assert on traffic.
A test can make the server lie like a hostile Hub: `info_sha` replaces the commit id that
repository info answers, `resolve_headers` replaces headers of download answers (X-Repo-Commit,
ETag). Hostile modes of issue 31 (each what a real attack sent to huggingface_hub's downloaders):

- `redirect`: "same-host" answers `/resolve/` with a 302 to `/cdn/...` on this server, whose answer
  carries `redirect_headers` (the right commit and a traversal ETag); "404" redirects to a path that
  answers 404 with `redirect_headers` (a traversal X-Repo-Commit); "cdn" redirects to `cdn_endpoint`
  (another server, as the real Hub sends LFS files to a CDN);
- `tree_extra`: per-path fields merged into tree records (Xet: `xetHash`, `lfs.oid` of `../..`);
- `serve_instead`: per-path bytes served by downloads in place of the committed file, while the
  listing still describes the committed one (an oversized file behind a small listing);
- `info_padding`: that many bytes of padding in the repository info (an answer too large to hold);
- `stall_s`: downloads send their headers, then wait that long before the body (a server that stalls).

`authorization` records the Authorization header of every request, as (path, header or None).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml


def git_blob_oid(data: bytes) -> str:
    """Git's blob id (what the Hub reports as a regular file's oid)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclasses.dataclass
class Commit:
    oid: str
    files: dict[str, bytes]
    message: str


@dataclasses.dataclass
class Repo:
    repo_id: str
    commits: list[Commit]

    @property
    def head(self) -> Commit:
        return self.commits[-1]

    def at(self, rev: str) -> Commit | None:
        if rev == "main":
            return self.head
        return next((c for c in self.commits if c.oid == rev), None)


class HubServer:
    """`with HubServer() as hub:` serves on hub.endpoint until the block ends (or hub.stop())."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.info_sha: str | None = None
        self.resolve_headers: dict[str, str] = {}
        self.redirect: str | None = None
        self.redirect_headers: dict[str, str] = {}
        self.cdn_endpoint = ""
        self.tree_extra: dict[str, dict] = {}
        self.serve_instead: dict[str, bytes] = {}
        self.info_padding = 0
        self.stall_s = 0.0
        self.authorization: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self.endpoint = ""

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> HubServer:
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        host, port = self._httpd.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        # a short poll interval: stop() returns within 50 ms instead of 500 ms
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection, so the client's kept-alive connections
        cannot keep talking to a server that is meant to be down."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self.lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._connections.clear()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # state ---------------------------------------------------------------------------------
    def create_repo(self, repo_id: str) -> bool:
        with self.lock:
            if repo_id in self.repos:
                return False
            oid = hashlib.sha1(f"init {repo_id} {time.time_ns()}".encode()).hexdigest()
            self.repos[repo_id] = Repo(repo_id, [Commit(oid, {}, "initial commit")])
            return True

    def files(self, repo_id: str, rev: str = "main") -> dict[str, bytes]:
        commit = self.repos[repo_id].at(rev)
        assert commit is not None
        return dict(commit.files)

    def put_file(self, repo_id: str, path: str, data: bytes) -> str:
        """Commit one file directly (lets tests plant files no honest client would push)."""
        with self.lock:
            repo = self.repos[repo_id]
            files = dict(repo.head.files)
            files[path] = data
            return self._commit(repo, files, f"plant {path}")

    def put_files(self, repo_id: str, files: dict[str, bytes]) -> str:
        """Commit several files at once, creating the repository if needed (a hostile publisher's
        hand-made repository: no client-side checks)."""
        self.create_repo(repo_id)
        with self.lock:
            repo = self.repos[repo_id]
            return self._commit(repo, {**repo.head.files, **files}, "plant files")

    def _commit(self, repo: Repo, files: dict[str, bytes], message: str) -> str:
        digest = hashlib.sha1(repo.head.oid.encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + git_blob_oid(files[path]).encode())
        digest.update(message.encode())
        oid = digest.hexdigest()
        repo.commits.append(Commit(oid, files, message))
        return oid


class _QuietServer(ThreadingHTTPServer):
    """A client that refuses an answer hangs up mid-stream: that is the client's right, not a
    server error worth a traceback on the test's stderr."""

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses connections

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        return None

    def setup(self) -> None:
        super().setup()
        with self.hub.lock:
            self.hub._connections.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.hub.lock:
            self.hub._connections.discard(self.connection)

    # plumbing ------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              *, head: bool = False, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client that stopped reading
                self.wfile.write(body)

    def _json(self, status: int, data: object, headers: dict[str, str] | None = None, *, head: bool = False) -> None:
        self._send(status, json.dumps(data).encode(), headers, head=head)

    def _error(self, status: int, code: str, message: str, *, head: bool = False) -> None:
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message}, head=head)

    def _repo(self, repo_id: str, *, head: bool = False) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            # The real Hub answers 401 + RepoNotFound for a repo that is missing or private.
            self._error(401, "RepoNotFound", f"Repository not found: {repo_id}", head=head)
        return repo

    def _commit_at(self, repo: Repo, rev: str, *, head: bool = False) -> Commit | None:
        commit = repo.at(rev)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
        return commit

    # routes --------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        self.hub.requests.append((method, path))
        self.hub.authorization.append((path, self.headers.get("Authorization")))
        parts = [unquote(p) for p in path.strip("/").split("/")]
        body = self._body() if method == "POST" else b""
        try:
            if method == "POST" and path == "/api/repos/create":
                return self._create(json.loads(body))
            if method == "POST" and path == "/api/validate-yaml":
                return self._validate_yaml(json.loads(body))
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                repo_id = f"{parts[2]}/{parts[3]}"
                rest = parts[4:]
                if method == "POST" and len(rest) == 2 and rest[0] == "preupload":
                    return self._preupload(repo_id, rest[1], json.loads(body))
                if method == "POST" and len(rest) == 2 and rest[0] == "commit":
                    return self._commit(repo_id, rest[1], body)
                if method == "GET" and (not rest or (len(rest) == 2 and rest[0] == "revision")):
                    return self._info(repo_id, rest[1] if rest else "main")
                if method == "GET" and len(rest) >= 2 and rest[0] == "tree":
                    recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
                    return self._tree(repo_id, rest[1], "/".join(rest[2:]), recursive)
            if method in ("HEAD", "GET") and parts[0] in ("cdn", "gone"):
                return self._redirected(parts, head=method == "HEAD")
            if method in ("HEAD", "GET") and len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head=method == "HEAD")
            self._error(404, "NotFound", f"no route for {method} {path}", head=method == "HEAD")
        except (ValueError, KeyError) as exc:
            self._error(400, "BadRequest", f"bad request: {exc}", head=method == "HEAD")

    def _create(self, payload: dict) -> None:
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        url = f"{self.hub.endpoint}/{repo_id}"
        if self.hub.create_repo(repo_id):
            return self._json(200, {"url": url})
        self._json(409, {"error": "You already created this model repo", "url": url})

    def _validate_yaml(self, payload: dict) -> None:
        content: str = payload["content"]
        if content.startswith("---"):
            front = content.split("---", 2)[1] if content.count("---") >= 2 else ""
            try:
                yaml.safe_load(front)
            except yaml.YAMLError as exc:
                return self._json(400, {"errors": [{"message": str(exc)}], "warnings": []})
        self._json(200, {"errors": [], "warnings": []})

    def _preupload(self, repo_id: str, rev: str, payload: dict) -> None:
        repo = self._repo(repo_id)
        if repo is None or (commit := self._commit_at(repo, rev)) is None:
            return
        files = []
        for f in payload["files"]:
            existing = commit.files.get(f["path"])
            files.append({"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                          "oid": git_blob_oid(existing) if existing is not None else None})
        self._json(200, {"files": files, "commitOid": commit.oid})

    def _commit(self, repo_id: str, rev: str, body: bytes) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        with self.hub.lock:
            if self._commit_at(repo, rev) is None:
                return
            files = dict(repo.head.files)
            message = ""
            for line in body.splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if key == "header":
                    message = value.get("summary", "")
                    parent = value.get("parentCommit")
                    if parent is not None and parent != repo.head.oid:
                        # Optimistic concurrency, as on the Hub: the branch moved since the client looked.
                        return self._error(412, "PreconditionFailed",
                                           f"A commit has happened since. Please refresh and try again.")
                elif key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    if value["path"] not in files:
                        return self._error(404, "EntryNotFound", "A file with this name doesn't exist")
                    del files[value["path"]]
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    files = {p: d for p, d in files.items() if not p.startswith(prefix)}
                else:  # lfsFile: this server stores regular files only
                    return self._error(400, "BadRequest", f"unsupported commit operation {key!r}")
            oid = self.hub._commit(repo, files, message)
        self._json(200, {"commitUrl": f"{self.hub.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid,
                         "pullRequestUrl": None})

    def _info(self, repo_id: str, rev: str) -> None:
        repo = self._repo(repo_id)
        if repo is None or (commit := self._commit_at(repo, rev)) is None:
            return
        sha = self.hub.info_sha if self.hub.info_sha is not None else commit.oid
        info = {"id": repo_id, "modelId": repo_id, "sha": sha, "private": False,
                "siblings": [{"rfilename": p} for p in sorted(commit.files)],
                "lastModified": "2025-01-01T00:00:00.000Z", "tags": [], "library_name": None}
        if self.hub.info_padding:
            info["padding"] = " " * self.hub.info_padding
        self._json(200, info)

    def _tree(self, repo_id: str, rev: str, folder: str, recursive: bool) -> None:
        repo = self._repo(repo_id)
        if repo is None or (commit := self._commit_at(repo, rev)) is None:
            return
        prefix = folder.strip("/") + "/" if folder.strip("/") else ""
        entries: dict[str, dict] = {}
        for path in sorted(commit.files):
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix):].split("/")
            for depth in range(1, len(rel)):  # folders on the way
                sub = prefix + "/".join(rel[:depth])
                if recursive or depth == 1:
                    entries.setdefault(sub, {"type": "directory", "oid": "0" * 40, "path": sub})
            if recursive or len(rel) == 1:
                data = commit.files[path]
                entries[path] = {"type": "file", "oid": git_blob_oid(data), "size": len(data), "path": path,
                                 **self.hub.tree_extra.get(path, {})}
        if prefix and not entries:
            return self._error(404, "EntryNotFound", f"{folder} does not exist on {rev}")
        self._json(200, list(entries.values()))

    def _resolve(self, repo_id: str, rev: str, path: str, *, head: bool) -> None:
        repo = self._repo(repo_id, head=head)
        if repo is None or (commit := self._commit_at(repo, rev, head=head)) is None:
            return
        data = commit.files.get(path)
        if data is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {rev}", head=head)
        if self.hub.redirect is not None:
            where = {"same-host": f"/cdn/{repo_id}/{commit.oid}/{path}", "404": f"/gone/{repo_id}/{commit.oid}/{path}",
                     "cdn": f"{self.hub.cdn_endpoint}/cdn/{repo_id}/{commit.oid}/{path}"}[self.hub.redirect]
            return self._send(302, b"", {"Location": where, "X-Repo-Commit": commit.oid}, head=head)
        data = self.hub.serve_instead.get(path, data)
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{git_blob_oid(data)}"', **self.hub.resolve_headers}
        if self.hub.stall_s and not head:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            time.sleep(self.hub.stall_s)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a patient client gets it all
                self.wfile.write(data)
            return
        self._send(200, data, headers, head=head, content_type="application/octet-stream")

    def _redirected(self, parts: list[str], *, head: bool) -> None:
        """Where `redirect` points: /cdn/{repo}/{commit}/{path} serves the file, /gone/... answers 404."""
        repo_id, oid, path = f"{parts[1]}/{parts[2]}", parts[3], "/".join(parts[4:])
        repo = self.hub.repos.get(repo_id)
        commit = repo.at(oid) if repo is not None else None
        data = commit.files.get(path) if commit is not None else None
        if parts[0] == "gone" or data is None:
            return self._send(404, b"not found", dict(self.hub.redirect_headers), head=head, content_type="text/plain")
        data = self.hub.serve_instead.get(path, data)
        self._send(200, data, dict(self.hub.redirect_headers), head=head, content_type="application/octet-stream")


def build_entry(compiled, entries_dir, *, accuracy: float = 1.0):
    """Write a small zoo entry from a CompiledCase the way training does (write_entry + card), with
    invented training / validation records. Returns the entry directory."""
    from pathlib import Path

    from zoo.artifact import write_entry
    from zoo.card import render_model_card

    name = compiled.case.entry_name
    circuit = compiled.graph.to_json()
    case = {**compiled.case.metadata(), "encoding": compiled.encoding.to_json()}
    training = {"method": "compiled", "seed": 0, "hyperparameters": {"lr": 1e-3, "batch_size": 256},
                "history": [{"step": 0, "loss": 0.0}], "wall_time_s": 0.0}
    # the shape siit.validation writes: figures under "metrics", one row per node
    validation = {"schema_version": 1, "metrics": {"accuracy": accuracy, "iia": 0.99, "siia": 0.98, "siia_min": 0.9},
                  "node_effects": [{"node": n, "in_circuit": True, "resample": 0.5, "mean": 0.4, "zero": 0.6,
                                    "inert": False} for n in circuit["nodes"]],
                  "max_out_of_circuit_effect": {"resample": 0.0, "mean": 0.0, "zero": 0.0}}
    readme = render_model_card(name=name, config=compiled.config, circuit=circuit, case=case,
                               training=training, validation=validation)
    return write_entry(Path(entries_dir) / name, state_dict=compiled.state_dict,
                       json_files={"config.json": compiled.config, "circuit.json": circuit, "case.json": case,
                                   "training.json": training, "validation.json": validation},
                       readme=readme)


def seed_compile_cache(root, compile_cache, case_ids) -> None:
    """Copy cases already compiled by the `compiled` fixture into a zoo root's compile cache: `zoo
    pull` compiles an entry's case to check its model, and a cold Tracr compile costs seconds."""
    import shutil
    from pathlib import Path

    for case_id in case_ids:
        src, dst = Path(compile_cache) / f"case-{case_id}", Path(root) / "compiled" / f"case-{case_id}"
        if src.is_dir() and not dst.exists():
            shutil.copytree(src, dst)


def _loopback_only(connect):
    def guarded(sock, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost") and not host.startswith("/"):
            raise AssertionError(f"a test tried to connect to {address!r}: nothing may leave 127.0.0.1")
        return connect(sock, address)

    return guarded


def hub_environment(monkeypatch, tmp_path):
    """Start a HubServer and point zoo + huggingface_hub at it for one test (in-process).

    huggingface_hub read its environment when it was imported (conftest sets HF_HUB_OFFLINE=1),
    so besides the env vars zoo reads per call, the two import-time constants that gate requests
    are patched for the duration of the test; any connection off 127.0.0.1 fails the test.
    """
    import socket as socket_module

    from huggingface_hub import constants

    hub = HubServer().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("ZOO_REPO_ID", "zoo-test/zoo")
    for var in ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)  # never send a real token
    monkeypatch.setattr(socket_module.socket, "connect", _loopback_only(socket_module.socket.connect))
    return hub

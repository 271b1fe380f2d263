"""A loopback stand-in for the Hugging Face Hub: the two things huggingface_hub asks of it
(a repository's file list, `GET /api/models/USER/REPO`, and a file, `HEAD`/`GET
/USER/REPO/resolve/REV/FILE` with ranges), over repositories of tiny files held in memory.
Tests point HF_ENDPOINT (or the Hub's `endpoint`) at it: nothing reaches the internet.

It can refuse tokens (`tokens`: a private repository's accepted tokens; any other token on any
repository is "invalid credentials", as the Hub answers), cut downloads short (`cuts`: file ->
the bytes each next GET sends before the connection drops), list a wrong checksum
(`listed_sha`), and it records every request."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Repo:
    files: dict[str, bytes]
    private: bool = False


@dataclass
class HubStandIn:
    repos: dict[str, Repo] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)
    cuts: dict[str, list[int]] = field(default_factory=dict)
    #: file -> the SHA-256 the file list claims instead of the content's (a corrupt download)
    listed_sha: dict[str, str] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> HubStandIn:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(head=True)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(head=False)

            def _json(self, status: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _repo(self, name: str) -> Repo | None:
                auth = self.headers.get("Authorization", "")
                token = auth.removeprefix("Bearer ").strip() or None
                if token is not None and token not in hub.tokens:
                    self._json(401, {"error": "Invalid credentials in Authorization header"})
                    return None
                repo = hub.repos.get(name)
                if repo is None or (repo.private and token is None):
                    self._json(401 if repo else 404, {"error": "Repository not found"},
                               {"X-Error-Code": "RepoNotFound"})
                    return None
                return repo

            def _answer(self, head: bool) -> None:
                path = self.path.split("?", 1)[0]
                hub.requests.append((self.command, path, self.headers.get("Range")))
                if path.startswith("/api/models/"):
                    parts = path.removeprefix("/api/models/").split("/")
                    repo = self._repo("/".join(parts[:2]))
                    if repo is not None:
                        self._json(200, {"id": "/".join(parts[:2]), "sha": COMMIT, "siblings": [
                            {"rfilename": n, "size": len(d), "lfs": {
                                "sha256": hub.listed_sha.get(n, hashlib.sha256(d).hexdigest()),
                                "size": len(d),
                                "pointerSize": 134}}
                            for n, d in repo.files.items()]})  # fmt: skip
                    return
                if "/resolve/" not in path:
                    self._json(404, {"error": "no such route"})
                    return
                name, rest = path.lstrip("/").split("/resolve/", 1)
                repo = self._repo(name)
                if repo is None:
                    return
                file = rest.split("/", 1)[1]
                data = repo.files.get(file)
                if data is None:
                    self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng.removeprefix("bytes=").split("-")[0] or 0)
                body = data[start:]
                self.send_response(206 if start else 200)
                etag = hashlib.sha256(data).hexdigest()
                self.send_header("ETag", f'"{etag}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(body)))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if head:
                    return
                cut = hub.cuts[file].pop(0) if hub.cuts.get(file) else None
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def point_at(hub: HubStandIn, monkeypatch, tmp_path) -> None:
    """Point huggingface_hub and the llama.cpp cache at `hub` and at caches in `tmp_path`, with
    no token and not offline, for one test."""
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # huggingface_hub asks its import-time endpoint for a registry of agent tools once a day:
    # nothing the tests need, and it must not reach the internet
    from huggingface_hub.utils import _detect_agent

    monkeypatch.setattr(_detect_agent, "_fetch_registry", lambda: None)
    # small chunks, so that a cut-short download has written what it received; no pause
    # between its retries
    import types

    from huggingface_hub import constants, file_download

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1000)
    monkeypatch.setattr(file_download, "time", types.SimpleNamespace(
        sleep=lambda s: None, time=__import__("time").time))  # fmt: skip

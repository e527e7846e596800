"""A local stand-in for the Hugging Face hub's file endpoints, for download tests without the network.

Two real HTTP servers on 127.0.0.1, answering as the hub does for LFS files:

- the hub: `HEAD|GET /{repo}/resolve/{revision}/{file}` -> 302 to the CDN with X-Repo-Commit, X-Linked-Etag (the
  sha256) and X-Linked-Size; 401 RepoNotFound for an unknown repo; 401/403 GatedRepo for a gated repo without a
  valid token; 404 EntryNotFound / RevisionNotFound; the same X-Error-Code headers huggingface_hub reads.
- the CDN (another port, so another origin, as on the real hub): `GET /blobs/{sha256}` with Range support.

Every request is recorded (headers, range, bytes sent) so tests can count what a resumed download asked for.
A file can be served corrupted, or its first transfer cut off or stalled after a number of bytes.
"""

from __future__ import annotations

import hashlib
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_CHUNK = 1 << 20


@dataclass
class Served:
    path: Path
    sha256: str
    size: int
    corrupt: bool = False  # serve one flipped byte (the reported sha256 stays the true one)
    cut_after: int | None = None  # first CDN transfer: drop the connection after this many bytes
    stall_after: int | None = None  # first CDN transfer: stop sending after this many bytes, until released
    reported_size: int | None = None  # X-Linked-Size to claim instead of the real size
    transfers: int = 0


@dataclass
class Request:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    status: int
    authorization: str | None
    range: str | None
    bytes_sent: int = 0


@dataclass
class FakeHub:
    repos: dict[str, dict[str, Served]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    token: str = "hf_fake_valid_token_for_tests"
    requests: list[Request] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def add(self, repo: str, path: Path, name: str | None = None, **options) -> Served:
        sha = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                sha.update(chunk)
        served = Served(path=path, sha256=sha.hexdigest(), size=path.stat().st_size, **options)
        self.repos.setdefault(repo, {})[name or path.name] = served
        return served

    def start(self) -> FakeHub:
        self._hub = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "hub"))
        self._cdn = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "cdn"))
        for server in (self._hub, self._cdn):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def by_sha(self, sha: str) -> Served | None:
        return next((s for files in self.repos.values() for s in files.values() if s.sha256 == sha), None)

    def cdn_gets(self) -> list[Request]:
        return [r for r in self.requests if r.server == "cdn" and r.method == "GET"]


def _handler(hub: FakeHub, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _record(self, status: int) -> Request:
            record = Request(
                role, self.command, self.path, status, self.headers.get("Authorization"), self.headers.get("Range")
            )
            hub.requests.append(record)
            return record

        def _reply(self, status: int, headers: dict[str, str]) -> None:
            self._record(status)
            self.send_response(status)
            for key, value in {**headers, "Content-Length": "0"}.items():
                self.send_header(key, value)
            self.end_headers()

        def _error(self, status: int, code: str, message: str) -> None:
            self._reply(status, {"X-Error-Code": code, "X-Error-Message": message, "X-Repo-Commit": COMMIT})

        def _serve(self, body: bool) -> None:
            if role == "hub":
                self._resolve()
            else:
                self._blob(body)

        def _resolve(self) -> None:
            parts = unquote(self.path.split("?")[0]).lstrip("/").split("/")
            if len(parts) < 5 or parts[2] != "resolve":
                return self._reply(404, {})
            repo, revision, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            if repo not in hub.repos:
                return self._error(401, "RepoNotFound", "Repository not found")
            if repo in hub.gated:
                auth = self.headers.get("Authorization")
                if auth is None:
                    return self._error(
                        401, "GatedRepo", f"Access to model {repo} is restricted. You must be authenticated."
                    )
                if auth != f"Bearer {hub.token}":
                    message = f"Access to model {repo} is restricted and you are not in the authorized list."
                    return self._error(403, "GatedRepo", message)
            if revision not in ("main", COMMIT):
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            served = hub.repos[repo].get(filename)
            if served is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            self._reply(
                302,
                {
                    "Location": f"{hub.cdn_url}/blobs/{served.sha256}",
                    "X-Repo-Commit": COMMIT,
                    "X-Linked-Etag": f'"{served.sha256}"',
                    "X-Linked-Size": str(served.reported_size or served.size),
                    "ETag": f'"{served.sha256}"',
                },
            )

        def _blob(self, body: bool) -> None:
            served = hub.by_sha(self.path.rsplit("/", 1)[-1].split("?")[0])
            if served is None:
                return self._reply(404, {})
            start = 0
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes=") and ranged.endswith("-"):
                start = int(ranged[len("bytes=") : -1])
            if start >= served.size:
                return self._reply(416, {"Content-Range": f"bytes */{served.size}"})
            status = 206 if start else 200
            record = self._record(status)
            self.send_response(status)
            self.send_header("Content-Length", str(served.size - start))
            self.send_header("Accept-Ranges", "bytes")
            if start:
                self.send_header("Content-Range", f"bytes {start}-{served.size - 1}/{served.size}")
            self.end_headers()
            if not body:
                return
            first = served.transfers == 0
            served.transfers += 1
            limit = served.size - start
            if first and served.cut_after is not None:
                limit = min(limit, served.cut_after)
            if first and served.stall_after is not None:
                limit = min(limit, served.stall_after)
            with open(served.path, "rb") as f:
                f.seek(start)
                while record.bytes_sent < limit:
                    offset = start + record.bytes_sent
                    chunk = f.read(min(_CHUNK, limit - record.bytes_sent))
                    middle = served.size // 2 - offset
                    if served.corrupt and 0 <= middle < len(chunk):
                        chunk = chunk[:middle] + bytes([chunk[middle] ^ 0xFF]) + chunk[middle + 1 :]
                    try:
                        self.wfile.write(chunk)
                    except OSError:  # the client went away (a test killed it)
                        return
                    record.bytes_sent += len(chunk)
            if record.bytes_sent < served.size - start:
                if first and served.stall_after is not None:
                    hub.release.wait(timeout=60)
                # Drop the connection mid-body, as a network failure would.
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    return Handler

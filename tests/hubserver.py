"""A hub-like HTTP server on 127.0.0.1 for tests: ``/{repo}/resolve/{revision}/{file}`` with Range support.

Serves model directories from disk under a fake commit hash and counts the bytes it sends per file, so
tests can check what a client really transferred. With ``token`` set, every repository is gated as on the
Hub: no token → 401 (GatedRepo), an unknown token → 401 (refused), a token in ``no_access`` → 403
(GatedRepo: authenticated, but access not granted). ``pointed_at`` points huggingface_hub and attngeom's
range cache at a server.

Faults for the ranged-read client (attngeom.sources.ranged): ``faults[file name]`` is a queue of faults applied, one
each, to that file's next ranged GETs: ``"drop"`` (send half the body, then close the connection),
``"503"``, ``"403"``, ``"truncate"`` (a valid 206 for only the first half of the range) and
``"ignore-range"`` (200 with the whole file).

With ``cdn=True`` weight files (.safetensors, .gguf, .bin) are redirected, as on the Hub, to a second
port (another origin) that needs no token; ``cdn_auth_seen`` counts requests that still carried one.

A simulated link for benchmarks: ``latency`` seconds before each answer, ``rate`` bytes/s shared by all
connections.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
from collections import Counter, defaultdict, deque
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


class HubServer:
    def __init__(
        self,
        repos: dict[str, Path],
        token: str | None = None,
        cdn: bool = False,
        no_access: frozenset = frozenset(),
    ) -> None:
        self.repos = repos
        self.token = token
        self.no_access = set(no_access)
        self.cdn_auth_seen = 0
        self.commit = hashlib.sha1(b"attngeom-test").hexdigest()
        self.bytes_sent: Counter[str] = Counter()
        self.requests: list[tuple[str, str]] = []
        self.ranges: list[tuple[str, int, int]] = []
        """(file name, first byte, last byte) of every ranged GET answered with a body."""
        self.faults: defaultdict[str, deque[str]] = defaultdict(deque)
        self.latency = 0.0
        self.rate: float | None = None
        self._free_at = 0.0
        self._lock = threading.Lock()
        self._etags: dict[Path, str] = {}
        self._servers = [ThreadingHTTPServer(("127.0.0.1", 0), self._handler()) for _ in range(1 + cdn)]
        for server in self._servers:
            server.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._servers[0].server_address[:2]
        return f"http://{host}:{port}"

    @property
    def cdn_url(self) -> str | None:
        if len(self._servers) < 2:
            return None
        host, port = self._servers[1].server_address[:2]
        return f"http://{host}:{port}"

    def etag(self, path: Path) -> str:
        with self._lock:
            if path not in self._etags:
                self._etags[path] = _sha256(path)
            return self._etags[path]

    def _count(self, name: str, sent: int) -> None:
        with self._lock:
            self.bytes_sent[name] += sent
            if self.rate:  # the link is busy until the bytes sent so far have drained at ``rate``
                now = time.monotonic()
                self._free_at = max(now, self._free_at) + sent / self.rate
                wait = self._free_at - now
            else:
                wait = 0.0
        time.sleep(wait)

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _resolve(self) -> Path | None:
                cdn = re.fullmatch(r"/cdn/(?P<repo>[^/]+/[^/]+)/(?P<file>.+)", self.path)
                if cdn:
                    hub.cdn_auth_seen += "Authorization" in self.headers
                    return hub.repos[cdn["repo"]] / cdn["file"]
                match = re.fullmatch(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.path)
                if not match or match["repo"] not in hub.repos:
                    self._fail(404, "RepoNotFound" if match else "EntryNotFound")
                    return None
                if match["rev"] not in ("main", hub.commit):
                    self._fail(404, "RevisionNotFound")
                    return None
                sent = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                if hub.token and sent != hub.token:
                    if sent in hub.no_access:
                        self._fail(403, "GatedRepo")
                    else:
                        self._fail(401, None if sent else "GatedRepo")
                    return None
                path = hub.repos[match["repo"]] / match["file"]
                if not path.is_file():
                    self._fail(404, "EntryNotFound")
                    return None
                if hub.cdn_url and path.suffix in (".safetensors", ".gguf", ".bin"):
                    self.send_response(302)  # the metadata a HEAD needs rides on the redirect, as on the Hub
                    self.send_header("Location", f"{hub.cdn_url}/cdn/{match['repo']}/{match['file']}")
                    self.send_header("X-Repo-Commit", hub.commit)
                    self.send_header("X-Linked-Etag", f'"{hub.etag(path)}"')
                    self.send_header("X-Linked-Size", str(path.stat().st_size))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return path

            def _fail(self, status: int, code: str | None) -> None:
                self.send_response(status)
                if code:
                    self.send_header("X-Error-Code", code)
                if code == "EntryNotFound":  # as on the Hub: the client caches that the file does not exist
                    self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _fault(self, path: Path) -> str | None:
                with hub._lock:
                    queue = hub.faults.get(path.name)
                    return queue.popleft() if queue else None

            def _serve(self, with_body: bool) -> None:
                hub.requests.append((self.command, self.path))
                time.sleep(hub.latency)
                path = self._resolve()
                if path is None:
                    return
                size = path.stat().st_size
                start, end = 0, size - 1
                ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
                fault = self._fault(path) if ranged and with_body else None
                if fault in ("503", "403"):
                    self._fail(int(fault), None)
                    return
                if fault == "ignore-range":
                    ranged = None
                if ranged:
                    start = int(ranged[1])
                    end = min(int(ranged[2]) if ranged[2] else end, end)
                    if fault == "truncate":
                        end = start + (end - start) // 2
                self.send_response(206 if ranged else 200)
                self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("ETag", f'"{hub.etag(path)}"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(end - start + 1))
                if ranged:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.end_headers()
                if not with_body:
                    return
                if ranged:
                    with hub._lock:
                        hub.ranges.append((path.name, start, end))
                stop = start + (end - start + 1) // 2 if fault == "drop" else end + 1
                with open(path, "rb") as handle:
                    handle.seek(start)
                    position = start
                    while position < stop:
                        block = handle.read(min(CHUNK, stop - position))
                        self.wfile.write(block)
                        hub._count(path.name, len(block))
                        position += len(block)
                if fault == "drop":
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            def do_HEAD(self) -> None:
                self._serve(with_body=False)

            def do_GET(self) -> None:
                try:
                    self._serve(with_body=True)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up (e.g. on a response it did not want)

        return Handler

    @contextmanager
    def running(self):
        for server in self._servers:
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        try:
            yield self
        finally:
            for server in self._servers:
                server.shutdown()
                server.server_close()


@contextmanager
def pointed_at(server: HubServer, home: Path):
    """huggingface_hub's endpoint and cache (``home/hf``) and attngeom's range cache (``home/cache``)
    pointed at ``server``, offline mode off, no token; all restored afterwards."""
    from huggingface_hub import constants

    names = (
        "ENDPOINT",
        "HUGGINGFACE_CO_URL_TEMPLATE",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_DISABLE_XET",
        "HF_HUB_OFFLINE",
    )
    saved = {name: getattr(constants, name) for name in names}
    saved_env = {
        name: os.environ.get(name) for name in ("ATTNGEOM_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
    }
    constants.ENDPOINT = server.url
    constants.HUGGINGFACE_CO_URL_TEMPLATE = server.url + "/{repo_id}/resolve/{revision}/{filename}"
    constants.HF_HOME, constants.HF_HUB_CACHE = str(home / "hf"), str(home / "hf" / "hub")
    constants.HF_HUB_DISABLE_XET, constants.HF_HUB_OFFLINE = True, False
    os.environ["ATTNGEOM_CACHE"] = str(home / "cache")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        os.environ.pop(name, None)
    try:
        yield server
    finally:
        for name, value in saved.items():
            setattr(constants, name, value)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

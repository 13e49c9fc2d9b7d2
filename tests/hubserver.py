"""A hub-like HTTP server on 127.0.0.1 for tests: ``/{repo}/resolve/{revision}/{file}`` with Range support.

Serves model directories from disk under a fake commit hash, optionally requires a bearer token, and
counts the bytes it sends per file, so tests can check what a client really transferred.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class HubServer:
    def __init__(self, repos: dict[str, Path], token: str | None = None) -> None:
        self.repos = repos
        self.token = token
        self.commit = hashlib.sha1(b"attngeom-test").hexdigest()
        self.bytes_sent: Counter[str] = Counter()
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _resolve(self) -> Path | None:
                match = re.fullmatch(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.path)
                if not match or match["repo"] not in hub.repos:
                    self._fail(404, "RepoNotFound" if match else "EntryNotFound")
                    return None
                if match["rev"] not in ("main", hub.commit):
                    self._fail(404, "RevisionNotFound")
                    return None
                if hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    self._fail(401, "GatedRepo")
                    return None
                path = hub.repos[match["repo"]] / match["file"]
                if not path.is_file():
                    self._fail(404, "EntryNotFound")
                    return None
                return path

            def _fail(self, status: int, code: str) -> None:
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _serve(self, with_body: bool) -> None:
                hub.requests.append((self.command, self.path))
                path = self._resolve()
                if path is None:
                    return
                data = path.read_bytes()
                start, end = 0, len(data) - 1
                ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
                if ranged:
                    start = int(ranged[1])
                    end = min(int(ranged[2]) if ranged[2] else end, end)
                self.send_response(206 if ranged else 200)
                self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(end - start + 1))
                if ranged:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.end_headers()
                if with_body:
                    self.wfile.write(data[start : end + 1])
                    hub.bytes_sent[path.name] += end - start + 1

            def do_HEAD(self) -> None:
                self._serve(with_body=False)

            def do_GET(self) -> None:
                self._serve(with_body=True)

        return Handler

    @contextmanager
    def running(self):
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()

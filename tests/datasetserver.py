"""A Hub-like server of dataset repositories on 127.0.0.1, for streaming the paper's corpora through
``datasets`` in tests (HF_ENDPOINT pointed at it, in a subprocess: both libraries read it at import).

Each repository has revisions by name (``main``, ``refs/convert/parquet``, …), each a folder on disk under
its own commit hash, readable by name or by hash. It answers what ``datasets.load_dataset(...,
streaming=True)`` and ``huggingface_hub``'s file system ask: the dataset info
(``/api/datasets/{repo}[/revision/{rev}]``), the file tree (``/api/datasets/{repo}/tree/{rev}/{path}``),
paths-info (POST), and the files (``/datasets/{repo}/resolve/{rev}/{path}``, HEAD and ranged GET).
``requests`` records every path asked, so a test can check which revision was read.

Faults, for the reader's bounds: ``faults[path in the repository]`` is ``"slow"`` (the body trickles, one
byte every ``slow_s`` seconds), ``"lie"`` (a Content-Length of the whole range, half of it sent, then the
connection closed), ``"drip"`` (one byte of each range, then the connection closed), ``"loop"`` (a
redirect to itself), ``"chain"`` (redirects to ever new URLs) or ``"500"``; ``info_sha`` replaces the commit the
dataset info names (a hostile server's ``../../x``); ``info_status`` answers the dataset info with that
HTTP status.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from hubserver import QuietServer


def commit_of(repo: str, revision: str) -> str:
    return hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()


@dataclass
class DatasetHub:
    """Dataset repositories: ``repos[repo][revision name] = folder``."""

    repos: dict[str, dict[str, Path]]
    url: str = ""
    requests: list[str] = field(default_factory=list)
    faults: dict[str, str] = field(default_factory=dict)
    slow_s: float = 0.5
    info_sha: str | None = None
    info_status: int | None = None
    server: QuietServer | None = None

    def find(self, repo: str, revision: str) -> tuple[str, Path] | None:
        """(commit, folder) of a revision given by name or commit hash."""
        for name, folder in self.repos.get(repo, {}).items():
            if revision in (name, commit_of(repo, name)):
                return commit_of(repo, name), folder
        return None


def _entry(folder: Path, path: Path) -> dict:
    relative = path.relative_to(folder).as_posix()
    if path.is_dir():
        return {
            "type": "directory",
            "oid": hashlib.sha1(relative.encode()).hexdigest(),
            "size": 0,
            "path": relative,
        }
    data = path.read_bytes()
    return {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": relative}


def _handler(hub: DatasetHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _json(self, payload, status: int = 200, code: str = "") -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _missing(self) -> None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _route(self) -> None:
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            hub.requests.append(f"{self.command} {path}")
            if path.startswith("/api/datasets/"):
                return self._api(path[len("/api/datasets/") :], parse_qs(parts.query))
            if path.startswith("/datasets/") and "/resolve/" in path:
                repo, _, rest = path[len("/datasets/") :].partition("/resolve/")
                return self._file(repo, rest)
            self._missing()

        def _split_revision(self, repo: str, rest: str) -> tuple[str, Path, str] | None:
            """(commit, folder, path) from "rev/path", the revision possibly holding slashes."""
            for name in sorted(hub.repos.get(repo, {}), key=len, reverse=True) + [
                commit_of(repo, n) for n in hub.repos.get(repo, {})
            ]:
                if rest == name or rest.startswith(name + "/"):
                    found = hub.find(repo, name)
                    return (*found, rest[len(name) + 1 :]) if found else None
            return None

        def _api(self, rest: str, query: dict) -> None:
            segments = rest.split("/")
            repo = "/".join(segments[:2])
            tail = "/".join(segments[3:])
            if repo not in hub.repos:
                return self._json({"error": "Repository not found"}, 404, "RepoNotFound")
            action = segments[2] if len(segments) > 2 else "revision"
            if action == "revision" and hub.info_status:
                return self._json({"error": "server error"}, hub.info_status)
            if action == "revision":
                found = hub.find(repo, tail or "main")
                if found is None:
                    return self._json({"error": "Revision not found"}, 404, "RevisionNotFound")
                commit, folder = found
                files = sorted(p for p in folder.rglob("*") if p.is_file())
                return self._json(
                    {
                        "id": repo,
                        "sha": hub.info_sha or commit,
                        "private": False,
                        "gated": False,
                        "disabled": False,
                        "tags": [],
                        "cardData": {},
                        "siblings": [{"rfilename": p.relative_to(folder).as_posix()} for p in files],
                    }
                )
            split = self._split_revision(repo, tail)
            if split is None:
                return self._json({"error": "Revision not found"}, 404, "RevisionNotFound")
            commit, folder, path = split
            if action == "tree":
                base = folder / path
                if not base.exists():
                    return self._json({"error": "Entry not found"}, 404, "EntryNotFound")
                recursive = query.get("recursive", ["false"])[0].lower() == "true"
                found = sorted(base.rglob("*") if recursive else base.iterdir())
                return self._json([_entry(folder, p) for p in found])
            if action == "paths-info":
                length = int(self.headers.get("Content-Length", 0))
                form = parse_qs(self.rfile.read(length).decode())
                paths = [p for p in form.get("paths", []) if (folder / p).exists()]
                return self._json([_entry(folder, folder / p) for p in paths])
            self._json({"error": "not served"}, 404)

        def _file(self, repo: str, rest: str) -> None:
            split = self._split_revision(repo, rest)
            if split is None or not (split[1] / split[2]).is_file():
                return self._missing()
            commit, folder, path = split
            fault = hub.faults.get(path)
            if fault in ("loop", "chain"):
                hop = int(parse_qs(urlsplit(self.path).query).get("hop", ["0"])[0])
                self.send_response(302)
                location = urlsplit(self.path).path + (f"?hop={hop + 1}" if fault == "chain" else "")
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                return self.end_headers()
            if fault == "500":
                return self._json({"error": "server error"}, 500)
            data = (folder / path).read_bytes()
            start, end = 0, len(data) - 1
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes="):
                first, _, last = ranged[6:].partition("-")
                start, end = int(first or 0), min(int(last) if last else len(data) - 1, len(data) - 1)
            body = data[start : end + 1]
            if ranged and start >= len(data):  # as the Hub: nothing to send, the size in Content-Range
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                return self.end_headers()
            self.send_response(206 if ranged else 200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
            self.send_header("X-Repo-Commit", commit)
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self.end_headers()
            if self.command == "HEAD":
                return
            if fault in ("lie", "drip"):
                self.wfile.write(body[: 1 if fault == "drip" else len(body) // 2])
                self.close_connection = True
            elif fault == "slow":
                for index in range(len(body)):
                    time.sleep(hub.slow_s)
                    self.wfile.write(body[index : index + 1])
                    self.wfile.flush()
            else:
                self.wfile.write(body)

        do_GET = do_HEAD = do_POST = _route

    return Handler


@contextmanager
def serving(repos: dict[str, dict[str, Path]]):
    """A running ``DatasetHub`` of ``repos``; its ``url`` goes into HF_ENDPOINT."""
    hub = DatasetHub(repos)
    server = QuietServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    hub.server = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()

"""A hub-like HTTP server on 127.0.0.1 for tests: ``/{repo}/resolve/{revision}/{file}`` with Range support.

Serves model directories from disk under a fake commit hash and counts the bytes it sends per file, so
tests can check what a client really transferred. With ``token`` set, every repository is gated as on the
Hub: no token → 401 (GatedRepo), an unknown token → 401 (refused), a token in ``no_access`` → 403
(GatedRepo: authenticated, but access not granted). ``pointed_at`` points huggingface_hub and attngeom's
range cache at a server.

Faults for the ranged-read client (attngeom.sources.ranged): ``faults[file name]`` is a queue of faults applied, one
each, to that file's next ranged GETs: ``"drop"`` (send half the body, then close the connection),
``"503"``, ``"403"``, ``"truncate"`` (a valid 206 for only the first half of the range) and
``"ignore-range"`` (200 with the whole file) and ``"drip"`` (a valid 206 whose first byte only is sent, then
the connection closed).

Hostile links, on every GET of a file whatever its range: ``trickle`` names files whose body comes one
byte every ``trickle_s`` seconds, ``slow_headers`` files whose status line and headers come so;
``redirects[file name]`` sends that many redirects before the file (each to
another URL), or a loop between two URLs when it is ``-1``; ``answers[file name] = (status, words)``
answers every request of that file with the status, ``words`` in its ``X-Error-Message`` and JSON body
(a server that puts its own text in an error).

With ``cdn=True`` weight files (.safetensors, .gguf, .bin) are redirected, as on the Hub, to a second
port (another origin) that needs no token; ``cdn_auth_seen`` counts requests that still carried one.

``commit_header`` set: every ``X-Repo-Commit`` carries it (a hostile endpoint).

A simulated link for benchmarks: ``latency`` seconds before each answer, ``rate`` bytes/s shared by all
connections.

The Hub's model listing, for zoo queries: ``GET /api/models`` answers what ``huggingface_hub.list_models``
sends (``search``, ``author``, ``filter`` tags, ``pipeline_tag``, ``gated``, ``num_parameters``, ``sort``
descending, ``limit``, ``expand``/``full``/``config``), ``page_size`` models a page, the next page in a
``Link`` header as on the Hub. Each repository's listing fields come from ``infos[repo]`` (downloads,
tags, config, ...); ``sha`` and ``siblings`` from the served folder. A listing's models are chosen and
sorted at its first page and kept for its later ones, so a listing of n models costs O(n log n), not
O(n) a page (benchmarks/bench_zoo.py lists 100,000). Every repository starts at
``commit``, or its own sha in ``commits``; ``add_revision`` moves a repository's main to a new folder and
commit, and the old commit stays readable by its sha. With ``gated_repos`` only those repositories are
gated (they need ``token``; without one nobody gets in); without it, ``token`` gates them all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from collections import Counter, defaultdict, deque
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit


class QuietServer(ThreadingHTTPServer):
    """Quiet when a client hangs up mid-reply: clients under test do, by design (a response they did not
    want, a trickle they gave up on), and a traceback on stderr would land in the output tests read."""

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 (socketserver's signature)
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


CHUNK = 1 << 20
SORT_FIELDS = {
    "downloads": "downloads",
    "likes": "likes",
    "createdAt": "createdAt",
    "lastModified": "lastModified",
    "trendingScore": "trendingScore",
}
"""``sort`` values of ``/api/models`` and the listing field each sorts by (descending, as the Hub)."""
DEFAULT_FIELDS = ("id", "likes", "downloads", "tags", "pipeline_tag", "library_name", "createdAt")
SCALE = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[str]:
    """The files under ``folder``, as sorted paths relative to it (``os.walk`` and string slicing: a fifth of
    ``rglob`` and ``relative_to``, which a listing of 100,000 repositories feels)."""
    root = str(folder)
    return sorted(
        os.path.join(parent, name)[len(root) + 1 :] for parent, _, names in os.walk(root) for name in names
    )


class HubServer:
    def __init__(
        self,
        repos: dict[str, Path],
        token: str | None = None,
        cdn: bool = False,
        no_access: frozenset = frozenset(),
        infos: dict[str, dict] | None = None,
        commits: dict[str, str] | None = None,
        gated_repos: frozenset | None = None,
        page_size: int = 100,
    ) -> None:
        self.repos = repos
        self.token = token
        self.no_access = set(no_access)
        self.cdn_auth_seen = 0
        self.commit = hashlib.sha1(b"attngeom-test").hexdigest()
        self.infos = infos or {}
        self.heads = dict(commits or {})
        """Each repository's main commit where it is not ``commit``."""
        self.old_revisions: dict[tuple[str, str], Path] = {}
        self.gated_repos = gated_repos
        self.page_size = page_size
        self.bytes_sent: Counter[str] = Counter()
        self.repo_bytes: Counter[str] = Counter()
        """Bytes of file bodies sent, per repository."""
        self.requests: list[tuple[str, str]] = []
        self.ranges: list[tuple[str, int, int]] = []
        """(file name, first byte, last byte) of every ranged GET answered with a body."""
        self.faults: defaultdict[str, deque[str]] = defaultdict(deque)
        self.trickle: set[str] = set()
        self.trickle_s = 0.5
        self.slow_headers: set[str] = set()
        self.redirects: dict[str, int] = {}
        self.answers: dict[str, tuple[int, str]] = {}
        self.latency = 0.0
        self.commit_header: str | None = None
        """A hostile server's answer: sent as every ``X-Repo-Commit`` instead of the commit."""
        self.honest_answers = 0
        """With ``commit_header``: the first answers that still name the true commit (a server that lies
        only once the client has checked it)."""
        self.rate: float | None = None
        self._free_at = 0.0
        self._lock = threading.Lock()
        self._etags: dict[Path, str] = {}
        self._listings: dict[str, list[str]] = {}
        """The repositories of each listing begun (its query less ``cursor``), for its later pages."""
        self._servers = [QuietServer(("127.0.0.1", 0), self._handler()) for _ in range(1 + cdn)]
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

    def head(self, repo: str) -> str:
        return self.heads.get(repo, self.commit)

    def tree(self, repo: str, revision: str) -> Path | None:
        """The folder served for ``repo`` at ``revision`` (``main`` or a commit sha), or None."""
        if revision in ("main", self.head(repo)):
            return self.repos[repo]
        return self.old_revisions.get((repo, revision))

    def add_revision(self, repo: str, folder: Path) -> str:
        """A new commit on ``repo``'s main serving ``folder``; the previous one stays readable by its sha."""
        self.old_revisions[(repo, self.head(repo))] = self.repos[repo]
        self.repos[repo] = folder
        self.heads[repo] = hashlib.sha1(f"{repo}@{len(self.old_revisions)}".encode()).hexdigest()
        return self.heads[repo]

    def gated(self, repo: str) -> bool:
        return repo in self.gated_repos if self.gated_repos is not None else self.token is not None

    def listing_item(self, repo: str, fields: set[str] | None) -> dict:
        """One model as ``/api/models`` shows it: ``fields`` of it (None: every field)."""
        info = self.infos.get(repo, {})
        folder = self.repos[repo]
        everything = {
            "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
            "id": repo,
            "sha": self.head(repo),
            "gated": info.get("gated", False),
            "siblings": [{"rfilename": name} for name in _files(folder)],
            **{k: v for k, v in info.items() if k != "gated"},
        }
        return {k: v for k, v in everything.items() if fields is None or k in fields or k in ("_id", "id")}

    def listing(self, query: dict[str, list[str]]) -> tuple[list[dict], int | None]:
        """One page of ``GET /api/models`` for the parsed ``query``, and the offset of the next page."""

        def one(name: str) -> str | None:
            return query[name][-1] if name in query else None

        key = json.dumps({k: v for k, v in query.items() if k != "cursor"}, sort_keys=True)
        start = int(one("cursor") or 0)
        if start == 0 or key not in self._listings:
            self._listings[key] = self.matching(query)
        repos = self._listings[key]
        if (one("full") or "").lower() in ("true", "1"):
            fields = None
        else:
            fields = set(query.get("expand", []) + query.get("expand[]", [])) or set(DEFAULT_FIELDS)
            if (one("config") or "").lower() in ("true", "1"):
                fields.add("config")
        size = min(int(one("limit") or self.page_size), self.page_size)
        page = [self.listing_item(r, fields) for r in repos[start : start + size]]
        return page, (start + size if start + size < len(repos) else None)

    def matching(self, query: dict[str, list[str]]) -> list[str]:
        """The repositories a listing's ``query`` selects, in its order."""

        def one(name: str) -> str | None:
            return query[name][-1] if name in query else None

        def params_of(repo: str) -> float:
            info = self.infos.get(repo, {})
            return float((info.get("safetensors") or info.get("gguf") or {}).get("total") or 0)

        repos = list(self.repos)
        if search := one("search"):
            repos = [r for r in repos if search.lower() in r.lower()]
        if author := one("author"):
            repos = [r for r in repos if r.split("/")[0] == author]
        for tag in query.get("filter", []):
            repos = [r for r in repos if tag in self.infos.get(r, {}).get("tags", ())]
        if pipeline_tag := one("pipeline_tag"):
            repos = [r for r in repos if self.infos.get(r, {}).get("pipeline_tag") == pipeline_tag]
        if (gated := one("gated")) is not None:
            wanted = gated.lower() in ("true", "1")
            repos = [r for r in repos if bool(self.infos.get(r, {}).get("gated")) == wanted]
        if bounds := one("num_parameters"):
            for kind, number, unit in re.findall(r"(min|max):([\d.]+)([KMBT]?)", bounds):
                bound = float(number) * SCALE[unit]
                repos = [r for r in repos if (params_of(r) - bound) * (1 if kind == "min" else -1) >= 0]
        if sort := one("sort"):
            field = SORT_FIELDS[sort]
            repos.sort(key=lambda r: (-(self.infos.get(r, {}).get(field) or 0), r))
        return repos

    def commit_for(self, commit: str) -> str:
        """What this answer's ``X-Repo-Commit`` says: ``commit``, or the hostile ``commit_header``."""
        with self._lock:
            if self.commit_header is None or self.honest_answers > 0:
                self.honest_answers -= 1
                return commit
        return self.commit_header

    def etag(self, path: Path) -> str:
        with self._lock:
            if path not in self._etags:
                self._etags[path] = _sha256(path)
            return self._etags[path]

    def _count(self, name: str, sent: int, repo: str = "") -> None:
        with self._lock:
            self.bytes_sent[name] += sent
            self.repo_bytes[repo] += sent
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
            def end_headers(self) -> None:
                if Path(urlsplit(self.path).path).name not in hub.slow_headers:
                    super().end_headers()
                    return
                head = b"".join([*self._headers_buffer, b"\r\n"])
                self._headers_buffer = []
                for at in range(len(head)):
                    time.sleep(hub.trickle_s)
                    self.wfile.write(head[at : at + 1])
                    self.wfile.flush()

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _hop(self) -> bool:
                """A redirect answered for a file in ``redirects`` (``?hop=N`` counts them); False otherwise."""
                url = urlsplit(self.path)
                hops = hub.redirects.get(Path(url.path).name)
                if hops is None:
                    return False
                done = int(parse_qs(url.query).get("hop", ["0"])[0])
                if hops >= 0 and done >= hops:
                    return False
                following = (done + 1) % 2 if hops < 0 else done + 1
                self.send_response(302)
                self.send_header("Location", f"{url.path}?hop={following}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True

            def _resolve(self) -> tuple[str, str, Path] | None:
                """(repository, commit, file) the request names, or None once a failure was answered."""
                cdn = re.fullmatch(
                    r"/cdn/(?P<repo>[^/]+/[^/]+)/(?P<rev>[0-9a-f]{40})/(?P<file>.+)", self.path
                )
                if cdn:
                    hub.cdn_auth_seen += "Authorization" in self.headers
                    return cdn["repo"], cdn["rev"], hub.tree(cdn["repo"], cdn["rev"]) / cdn["file"]
                path = urlsplit(self.path).path
                match = re.fullmatch(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", path)
                if not match or match["repo"] not in hub.repos:
                    self._fail(404, "RepoNotFound" if match else "EntryNotFound")
                    return None
                repo = match["repo"]
                tree = hub.tree(repo, match["rev"])
                if tree is None:
                    self._fail(404, "RevisionNotFound")
                    return None
                commit = hub.head(repo) if match["rev"] == "main" else match["rev"]
                sent = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                if hub.gated(repo) and (hub.token is None or sent != hub.token):
                    if sent in hub.no_access:
                        self._fail(403, "GatedRepo")
                    else:
                        self._fail(401, None if sent else "GatedRepo")
                    return None
                path = tree / match["file"]
                if not path.is_file():
                    self._fail(404, "EntryNotFound", commit)
                    return None
                if hub.cdn_url and path.suffix in (".safetensors", ".gguf", ".bin"):
                    self.send_response(302)  # the metadata a HEAD needs rides on the redirect, as on the Hub
                    self.send_header("Location", f"{hub.cdn_url}/cdn/{repo}/{commit}/{match['file']}")
                    self.send_header("X-Repo-Commit", hub.commit_for(commit))
                    self.send_header("X-Linked-Etag", f'"{hub.etag(path)}"')
                    self.send_header("X-Linked-Size", str(path.stat().st_size))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return repo, commit, path

            def _fail(self, status: int, code: str | None, commit: str | None = None) -> None:
                self.send_response(status)
                if code:
                    self.send_header("X-Error-Code", code)
                if code == "EntryNotFound":  # as on the Hub: the client caches that the file does not exist
                    self.send_header("X-Repo-Commit", hub.commit_for(commit or hub.commit))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _list_models(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                page, following = hub.listing(query)
                body = json.dumps(page).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if following is not None:
                    rest = [(k, v) for k, values in query.items() if k != "cursor" for v in values]
                    link = f"{hub.url}/api/models?{urlencode([*rest, ('cursor', following)])}"
                    self.send_header("Link", f'<{link}>; rel="next"')
                self.end_headers()
                self.wfile.write(body)

            def _fault(self, path: Path) -> str | None:
                with hub._lock:
                    queue = hub.faults.get(path.name)
                    return queue.popleft() if queue else None

            def _serve(self, with_body: bool) -> None:
                hub.requests.append((self.command, self.path))
                time.sleep(hub.latency)
                if self.command == "GET" and urlsplit(self.path).path == "/api/models":
                    self._list_models()
                    return
                if self.command == "GET" and self._hop():
                    return
                answer = hub.answers.get(Path(urlsplit(self.path).path).name)
                if answer is not None:
                    body = json.dumps({"error": answer[1]}).encode()
                    self.send_response(answer[0])
                    self.send_header("X-Error-Message", answer[1])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command == "GET":
                        self.wfile.write(body)
                    return
                resolved = self._resolve()
                if resolved is None:
                    return
                repo, commit, path = resolved
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
                    if start >= size:  # as S3 and the Hub's CDN: nothing of the range exists
                        self._fail(416, None)
                        return
                    if fault == "truncate":
                        end = start + (end - start) // 2
                self.send_response(206 if ranged else 200)
                self.send_header("X-Repo-Commit", hub.commit_for(commit))
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
                stop = start + 1 if fault == "drip" else stop
                block_size = 1 if path.name in hub.trickle else CHUNK
                with open(path, "rb") as handle:
                    handle.seek(start)
                    position = start
                    while position < stop:
                        if block_size == 1:
                            time.sleep(hub.trickle_s)
                        block = handle.read(min(block_size, stop - position))
                        self.wfile.write(block)
                        self.wfile.flush()
                        hub._count(path.name, len(block), repo)
                        position += len(block)
                if fault in ("drop", "drip"):
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

            def do_HEAD(self) -> None:
                self._serve(with_body=False)

            def do_GET(self) -> None:
                self._serve(with_body=True)

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

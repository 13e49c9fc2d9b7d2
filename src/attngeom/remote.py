"""Hub weights read by HTTP range: each file's header, then only the bytes of the tensors asked for.

A safetensors file starts with an 8-byte length and a JSON header giving every tensor's byte range; a
GGUF file starts with its metadata and tensor-info table. Both are read with a few ranged GETs, then the
requested tensors' bytes go into a local cache (``$ATTNGEOM_CACHE``, default ``$HF_HOME/attngeom``)
keyed by repository, commit, file and tensor, so a re-run transfers nothing.

The architecture map asks for tensors one at a time. The first layer's tensors are fetched as asked;
when the map comes back for the same tensor of another layer (``layers.1.q_proj`` after
``layers.0.q_proj``), every layer's instance of every tensor it has asked for so far is queued at once,
adjacent byte ranges merged into one request, at most ``WORKERS`` requests in flight.

URLs, endpoint (``HF_ENDPOINT``), tokens and offline mode are huggingface_hub's; transient failures
(dropped connections, 5xx, short bodies) are retried with back-off, resuming where the bytes stopped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import tempfile
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import httpx2
import numpy as np
import torch
from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
from transformers import PretrainedConfig

from . import __version__
from .errors import InputError
from .sources import WeightSource, from_gguf, index_parameter_count, read_index

logger = logging.getLogger(__name__)

WORKERS = 8
"""Ranged requests in flight at once (besides the one the caller waits for)."""
TRIES = 5
"""Attempts of one request before giving up; an attempt that delivers bytes resets the count."""
RETRY_WAIT_S = 0.5
"""First back-off; doubled after each failed attempt, at most 8 s."""
MAX_REQUEST = 64 << 20
"""Adjacent tensors are merged into one request up to this many bytes."""
GGUF_PROBE = 64 << 10
"""First read of a GGUF header; doubled until the metadata and tensor table fit."""
CHUNK = 1 << 20
TIMEOUT = httpx2.Timeout(60.0, connect=20.0)
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}

T = TypeVar("T")


class MissingFile(InputError):
    """The file is not in the repository at that revision."""


class _Transient(Exception):
    """A failure worth retrying: 5xx, 429, or a body that ended early."""


class _NeedMore(Exception):
    """A header parser needs at least ``size`` bytes of the file."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


@dataclass(frozen=True)
class Entry:
    """A tensor's bytes [start, end) in its file; dtype and shape as the safetensors header gives them."""

    start: int
    end: int
    dtype: str = ""
    shape: tuple[int, ...] = ()


def cache_root() -> Path:
    return Path(os.environ.get("ATTNGEOM_CACHE") or Path(constants.HF_HOME) / "attngeom")


def _repo_dir(repo_id: str) -> Path:
    return cache_root() / ("models--" + repo_id.replace("/", "--"))


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def hub_error(repo_id: str, filename: str, revision: str | None, err: Exception) -> InputError:
    """One line saying what went wrong with a Hub request and what to do about it."""
    if isinstance(err, GatedRepoError):
        return InputError(
            f"{repo_id}: gated repository; accept its licence on the Hub and authenticate "
            "(hf auth login, or set HF_TOKEN)"
        )
    if isinstance(err, RepositoryNotFoundError):
        return InputError(f"{repo_id}: no such repository on the Hub (or it is private: set HF_TOKEN)")
    if isinstance(err, RevisionNotFoundError):
        return InputError(f"{repo_id}: no revision {revision!r}")
    if isinstance(err, (OfflineModeIsEnabled, LocalEntryNotFoundError)):
        return InputError(
            f"{repo_id}: {filename} is not in the local cache and the Hub cannot be reached "
            "(offline, or HF_HUB_OFFLINE set?); run once online or pass a local path"
        )
    if isinstance(err, EntryNotFoundError):
        return MissingFile(f"{repo_id}: no file {filename} at revision {revision or 'main'}")
    status = getattr(getattr(err, "response", None), "status_code", None)
    if status in (401, 403):
        return InputError(
            f"{repo_id}: access to {filename} denied (HTTP {status}); authenticate with a token that can "
            "read it (hf auth login, or set HF_TOKEN) and accept the licence if the model is gated"
        )
    first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return InputError(f"{repo_id}: request for {filename} failed: {first_line}")


class RemoteFile:
    """One file of a Hub repository at a commit, read by byte range, its tensors cached on disk."""

    def __init__(self, repo_id: str, filename: str, commit: str, token: str | None) -> None:
        self.repo_id = repo_id
        self.filename = filename
        self.commit = commit
        self.url = hf_hub_url(repo_id, filename, revision=commit)
        auth = build_hf_headers(token=token, library_name="attngeom", library_version=__version__)
        self.headers = {**auth, "Accept-Encoding": "identity"}
        self.directory = _repo_dir(repo_id) / commit / quote(filename, safe="")
        self.table: dict[str, Entry] = {}
        self.table_ready = False
        self._table_lock = threading.Lock()

    @property
    def header_path(self) -> Path:
        return self.directory.with_name(self.directory.name + ".header")

    def __repr__(self) -> str:
        return f"{self.repo_id}/{self.filename}@{self.commit[:8]}"

    # --- transfers ---------------------------------------------------------------------------------

    def read(self, start: int, end: int, sink: Callable[[bytes], None]) -> int:
        """Bytes [start, end) of the file passed to ``sink`` in order; returns the file's size.

        Transient failures are retried with back-off, each retry asking only for the bytes still missing.
        """
        position, failures = start, 0
        while True:
            before = position
            try:
                headers = {**self.headers, "Range": f"bytes={position}-{end - 1}"}
                with get_session().stream("GET", self.url, headers=headers, timeout=TIMEOUT) as response:
                    size = self._check(response, position, end)
                    end = min(end, size)
                    if position >= end:
                        return size
                    for chunk in response.iter_raw(CHUNK):
                        chunk = chunk[: end - position]
                        sink(chunk)
                        position += len(chunk)
                        if position == end:
                            return size
                raise _Transient(f"the response ended at byte {position} of {end}")
            except (_Transient, httpx2.TransportError) as err:
                failures = 1 if position > before else failures + 1
                if failures >= TRIES:
                    raise InputError(
                        f"{self}: download failed after {TRIES} tries ({err}); check the connection and retry"
                    ) from err
                time.sleep(min(RETRY_WAIT_S * 2 ** (failures - 1), 8.0))
            except (HfHubHTTPError, OfflineModeIsEnabled) as err:
                raise hub_error(self.repo_id, self.filename, self.commit, err) from err

    def _check(self, response: httpx2.Response, position: int, end: int) -> int:
        """The file size from a ranged response that starts at ``position``; anything else raises."""
        status = response.status_code
        if status == 206:
            match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", ""))
            if not match or int(match[1]) != position:
                raise InputError(
                    f"{self}: asked for bytes from {position}, the server sent "
                    f"{response.headers.get('Content-Range')!r}; use --full-download"
                )
            return int(match[3])
        if status == 200:
            length = int(response.headers.get("Content-Length", -1))
            if position == 0 and 0 <= length <= end:  # the whole file was no more than we asked for
                return length
            raise InputError(
                f"{self}: the server ignores HTTP Range requests (it sent the whole file); "
                "rerun with --full-download (full_download=True)"
            )
        if status in TRANSIENT_STATUS:
            raise _Transient(f"HTTP {status}")
        if status == 416:
            raise InputError(
                f"{self}: bytes {position}-{end - 1} lie past the end of the file; it is corrupted"
            )
        response.read()
        hf_raise_for_status(response)
        raise InputError(f"{self}: unexpected HTTP {status} to a range request")

    def read_bytes(self, start: int, end: int) -> tuple[bytes, int]:
        """Bytes [start, end) in memory (headers), and the file size."""
        parts: list[bytes] = []
        size = self.read(start, end, parts.append)
        return b"".join(parts), size

    # --- header ------------------------------------------------------------------------------------

    def header(self, parse: Callable[[bytes, int], T], probe: int) -> T:
        """``parse(prefix, file_size)`` of the file's first bytes, as many as ``parse`` asks for (``_NeedMore``).

        The prefix is cached as ``<file>.header``: the file size (8 bytes, little-endian) then the bytes.
        """
        cached = self.header_path
        if cached.is_file():
            blob = cached.read_bytes()
            try:
                return parse(blob[8:], int.from_bytes(blob[:8], "little"))
            except (_NeedMore, InputError):
                cached.unlink(missing_ok=True)  # corrupt or incomplete: fetch it again
        prefix, size = self.read_bytes(0, probe)
        while True:
            try:
                result = parse(prefix, size)
            except _NeedMore as more:
                if len(prefix) >= size:
                    raise InputError(
                        f"{self}: the header runs past the end of the file; it is truncated"
                    ) from None
                more_bytes, _ = self.read_bytes(len(prefix), min(more.size, size))
                prefix += more_bytes
                continue
            _write_atomic(cached, size.to_bytes(8, "little") + prefix)
            return result

    def set_table(self, make: Callable[[], dict[str, Entry]]) -> dict[str, Entry]:
        """The tensor table, made once (thread-safe)."""
        with self._table_lock:
            if not self.table_ready:
                self.table = make()
                self.table_ready = True
        return self.table

    # --- tensor cache ------------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        return self.directory / quote(name, safe="")

    def cached(self, name: str) -> bool:
        entry = self.table[name]
        path = self.path(name)
        if entry.end == entry.start and not path.exists():
            _write_atomic(path, b"")
        return path.is_file() and path.stat().st_size == entry.end - entry.start

    def fetch(self, names: list[str]) -> None:
        """Download tensors that lie back to back in the file with one request, each into its cache file."""
        writer = _Writer([(self.path(n), self.table[n].end - self.table[n].start) for n in names])
        try:
            self.read(self.table[names[0]].start, self.table[names[-1]].end, writer.write)
        finally:
            writer.close()


class _Writer:
    """Splits a byte stream into files of the given lengths; each is renamed into place only when complete."""

    def __init__(self, files: list[tuple[Path, int]]) -> None:
        self._files = deque(files)
        self._handle = None
        self._temporary: Path | None = None
        self._written = 0

    def write(self, data: bytes) -> None:
        while data:
            path, length = self._files[0]
            if self._handle is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
                self._handle = open(self._temporary, "wb")  # closed when full, or by close()
                self._written = 0
            part = data[: length - self._written]
            self._handle.write(part)
            self._written += len(part)
            data = data[len(part) :]
            if self._written == length:
                self._handle.close()
                self._handle = None
                os.replace(self._temporary, path)
                self._files.popleft()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
            self._temporary.unlink(missing_ok=True)


class Fetcher:
    """Background downloads of queued tensors, adjacent ones merged, at most ``WORKERS`` requests at once."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._workers = workers
        self._threads = 0
        self._lock = threading.Lock()
        self._queue: deque[tuple[RemoteFile, str]] = deque()
        self._by_start: dict[tuple[RemoteFile, int], str] = {}
        self._by_end: dict[tuple[RemoteFile, int], str] = {}
        self._futures: dict[tuple[RemoteFile, str], Future] = {}

    def schedule(self, file: RemoteFile, names: Iterable[str]) -> None:
        """Queue tensors of ``file`` (in this order) that are neither cached nor already queued."""
        with self._lock:
            for name in names:
                entry = file.table[name]
                if (file, name) in self._futures or file.cached(name):
                    continue
                self._futures[(file, name)] = Future()
                self._by_start[(file, entry.start)] = name
                self._by_end[(file, entry.end)] = name
                self._queue.append((file, name))
            while self._threads < min(self._workers, len(self._queue)):
                self._threads += 1
                threading.Thread(target=self._work, daemon=True).start()

    def wait(self, file: RemoteFile, name: str) -> Path:
        """The cache file of one tensor, downloading it now if no worker has started on it."""
        if file.cached(name):
            return file.path(name)
        self.schedule(file, [name])
        with self._lock:
            batch = self._take(file, name)
        if batch:
            self._download(file, batch)
        future = self._futures.get((file, name))
        if future is not None:  # None: it was cached between the two checks
            future.result()
        return file.path(name)

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._threads -= 1
                    return
                file, name = self._queue.popleft()
                batch = self._take(file, name)
            if batch:
                self._download(file, batch)

    def _take(self, file: RemoteFile, name: str) -> list[str]:
        """``name`` and the queued tensors adjacent to it, unqueued (call with the lock held)."""
        entry = file.table[name]
        if self._by_start.get((file, entry.start)) != name:
            return []  # taken already, alone or merged into another request
        batch, start, end = deque([name]), entry.start, entry.end
        del self._by_start[(file, start)], self._by_end[(file, end)]
        while end - start < MAX_REQUEST:
            after = self._by_start.pop((file, end), None)
            before = None if after else self._by_end.pop((file, start), None)
            if after:
                batch.append(after)
                end = file.table[after].end
                del self._by_end[(file, end)]
            elif before:
                batch.appendleft(before)
                start = file.table[before].start
                del self._by_start[(file, start)]
            else:
                break
        return list(batch)

    def _download(self, file: RemoteFile, batch: list[str]) -> None:
        try:
            file.fetch(batch)
            error = None
        except Exception as err:  # handed to whoever waits for these tensors
            error = err
        for name in batch:
            future = self._futures[(file, name)]
            if error is None or file.cached(name):
                future.set_result(None)
            else:
                future.set_exception(error)


def _pattern(name: str) -> str:
    return re.sub(r"\d+", "#", name)


def _numbers(name: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", name)]


class Prefetcher:
    """Tensor name → its remote file; fetches what is asked for and, once layers repeat, all of their kind.

    ``file_of(name)`` gives the file; ``tables(files)`` makes sure those files' tensor tables are read.
    """

    def __init__(
        self,
        file_of: dict[str, RemoteFile],
        tables: Callable[[Iterable[RemoteFile]], None],
        fetcher: Fetcher | None = None,
    ) -> None:
        self._file_of = file_of
        self._tables = tables
        self._fetcher = fetcher or Fetcher()
        self._instances: dict[str, list[str]] = defaultdict(list)
        for name in sorted(file_of, key=_numbers):
            self._instances[_pattern(name)].append(name)
        self._seen: set[str] = set()
        self._unplanned: list[str] = []

    def path(self, name: str) -> tuple[RemoteFile, Path]:
        """The file a tensor is in and the cache file holding its bytes (downloaded if need be)."""
        pattern = _pattern(name)
        if pattern in self._seen:
            self._plan()
        else:
            self._seen.add(pattern)
            self._unplanned.append(pattern)
        file = self._file_of[name]
        self._tables([file])
        if name not in file.table:
            raise InputError(
                f"{file}: the index lists {name} but the file's header does not; corrupted upload?"
            )
        return file, self._fetcher.wait(file, name)

    def _plan(self) -> None:
        """Queue every layer's instance of the tensors asked for since the last plan."""
        if not self._unplanned:
            return
        names = [n for pattern in self._unplanned for n in self._instances[pattern]]
        self._unplanned.clear()
        names.sort(key=_numbers)  # layer order, so the map's next request is first in line
        self._tables({self._file_of[n] for n in names})
        by_file: dict[RemoteFile, list[str]] = defaultdict(list)
        for name in names:
            if name in self._file_of[name].table:
                by_file[self._file_of[name]].append(name)
        for file, file_names in by_file.items():
            self._fetcher.schedule(file, file_names)


# --- safetensors -----------------------------------------------------------------------------------


def _safetensors_table(prefix: bytes, size: int, where: RemoteFile) -> dict[str, Entry]:
    if len(prefix) < 8:
        raise _NeedMore(8)
    length = int.from_bytes(prefix[:8], "little")
    if length > 100_000_000 or 8 + length > size:
        raise InputError(f"{where}: not a safetensors file (header length {length} of a {size}-byte file)")
    if len(prefix) < 8 + length:
        raise _NeedMore(8 + length)
    try:
        header = json.loads(prefix[8 : 8 + length])
        table = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = (8 + length + int(offset) for offset in info["data_offsets"])
            table[name] = Entry(begin, end, str(info["dtype"]), tuple(int(s) for s in info["shape"]))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise InputError(f"{where}: corrupted safetensors header ({err}); use --full-download") from err
    if any(not 8 + length <= e.start <= e.end <= size for e in table.values()):
        raise InputError(f"{where}: safetensors header points past the end of the file; corrupted upload?")
    return table


def _tensor(path: Path, entry: Entry, where: RemoteFile) -> torch.Tensor:
    dtype = SAFETENSORS_DTYPES.get(entry.dtype)
    if dtype is None:
        raise InputError(f"{where}: tensor dtype {entry.dtype} is not supported; use --full-download")
    numel = int(np.prod(entry.shape, dtype=np.int64))
    if numel * dtype.itemsize != entry.end - entry.start:
        raise InputError(f"{where}: header gives {entry.shape} {entry.dtype} a wrong byte count; corrupted?")
    if numel == 0:
        return torch.empty(entry.shape, dtype=dtype)
    return torch.from_file(str(path), shared=False, size=numel, dtype=dtype).view(entry.shape)


def safetensors_source(
    repo_id: str, config: PretrainedConfig, commit: str | None, token: str | None, index: Path | None
) -> WeightSource | None:
    """A hub safetensors checkpoint read by ranges; None when the repository has no safetensors weights.

    ``index`` is the downloaded ``model.safetensors.index.json`` if the checkpoint is sharded.
    """
    if not commit:
        return None  # no commit to key the cache by: whole files through huggingface_hub's cache
    n_params = None
    if index is not None:
        weight_map = read_index(index, repo_id)
        n_params = index_parameter_count(index)
        files = {
            shard: RemoteFile(repo_id, shard, commit, token) for shard in sorted(set(weight_map.values()))
        }
        if constants.is_offline_mode() and not any(f.header_path.is_file() for f in files.values()):
            return None  # never read by ranges: let the full-download path look in HF's cache
    else:
        single = RemoteFile(repo_id, "model.safetensors", commit, token)
        try:
            _read_tables([single])
        except MissingFile:
            return None
        except InputError:
            if constants.is_offline_mode():
                return None  # not cached by a ranged run: let the full-download path look in HF's cache
            raise
        weight_map = dict.fromkeys(single.table, single.filename)
        n_params = sum(int(np.prod(e.shape, dtype=np.int64)) for e in single.table.values())
        files = {single.filename: single}
    prefetch = Prefetcher({name: files[shard] for name, shard in weight_map.items()}, _read_tables)

    def load(name: str) -> torch.Tensor:
        file, path = prefetch.path(name)
        return _tensor(path, file.table[name], file)

    return WeightSource(
        model_id=repo_id,
        description=repo_id,
        config=config,
        names=weight_map,
        load=load,
        revision=commit,
        n_params=n_params,
    )


def _read_tables(files: Iterable[RemoteFile]) -> None:
    """Read the safetensors headers of ``files`` not read yet, several at once."""

    def read(file: RemoteFile) -> None:
        file.set_table(lambda: file.header(lambda p, s: _safetensors_table(p, s, file), 8))

    todo = [f for f in files if not f.table_ready]
    if len(todo) == 1:
        read(todo[0])
    elif todo:
        with ThreadPoolExecutor(min(WORKERS, len(todo))) as pool:
            list(pool.map(read, todo))


# --- GGUF ------------------------------------------------------------------------------------------


HUB_GGUF = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)/(?P<file>[^/].*\.gguf)")
"""``org/name/path/in/repo.gguf``: a GGUF file in a Hub repository."""


def _resolve_commit(repo_id: str, filename: str, revision: str | None, token: str | None) -> str:
    """The commit ``revision`` points at, remembered under the cache so an offline re-run needs no request."""
    if revision and re.fullmatch(r"[0-9a-f]{40}", revision):
        return revision
    ref = _repo_dir(repo_id) / "refs" / quote(revision or "main", safe="")
    if constants.is_offline_mode() and ref.is_file():
        return ref.read_text().strip()
    try:
        commit = get_hf_file_metadata(
            hf_hub_url(repo_id, filename, revision=revision), token=token, retry_on_errors=True
        ).commit_hash
    except (HfHubHTTPError, OfflineModeIsEnabled) as err:
        raise hub_error(repo_id, filename, revision, err) from err
    except httpx2.TransportError as err:
        raise InputError(f"{repo_id}: cannot reach the Hub ({err})") from err
    if not commit:
        raise InputError(f"{repo_id}: the Hub did not say which commit {revision or 'main'} is")
    _write_atomic(ref, commit.encode())
    return commit


_GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _gguf_table(prefix: bytes, size: int, where: RemoteFile) -> dict[str, Entry]:
    """Tensor byte ranges from a GGUF header (little-endian v2/v3), walking metadata and the tensor table.

    Only lengths are read here, so a short prefix costs nothing to reject (``_NeedMore``); the gguf package
    parses the complete header afterwards (``from_gguf``).
    """
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    position = 0

    def take(fmt: str) -> tuple:
        nonlocal position
        end = position + struct.calcsize(fmt)
        if end > len(prefix):
            raise _NeedMore(max(end, 2 * len(prefix)))
        values = struct.unpack_from(fmt, prefix, position)
        position = end
        return values

    def skip(length: int) -> bytes:
        nonlocal position
        if position + length > len(prefix):
            raise _NeedMore(max(position + length, 2 * len(prefix)))
        position += length
        return prefix[position - length : position]

    def string() -> bytes:
        return skip(take("<Q")[0])

    magic, version, n_tensors, n_kv = take("<4sIQQ")
    if magic != b"GGUF" or version not in (2, 3):
        raise InputError(f"{where}: not a little-endian GGUF v2/v3 file; use --full-download")
    alignment = 32
    for _ in range(n_kv):
        key, (kind,) = string(), take("<I")
        if kind == _GGUF_ARRAY:
            kind, count = take("<IQ")
            if kind == _GGUF_STRING:
                for _ in range(count):
                    string()
            elif kind in _GGUF_SCALAR_SIZES:
                skip(count * _GGUF_SCALAR_SIZES[kind])
            else:
                raise InputError(f"{where}: GGUF metadata {key.decode(errors='replace')} has nested arrays")
        elif kind == _GGUF_STRING:
            string()
        elif key == b"general.alignment" and kind == 4:
            (alignment,) = take("<I")
        elif kind in _GGUF_SCALAR_SIZES:
            skip(_GGUF_SCALAR_SIZES[kind])
        else:
            raise InputError(f"{where}: unknown GGUF metadata type {kind}; corrupted?")
    infos = []
    for _ in range(n_tensors):
        name = string().decode()
        (n_dims,) = take("<I")
        dims = take(f"<{n_dims}Q")
        infos.append((name, dims, *take("<IQ")))
    data_start = -(-position // alignment) * alignment
    table = {}
    try:
        for name, dims, kind, offset in infos:
            block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            start = data_start + offset
            table[name] = Entry(start, start + int(np.prod(dims, dtype=np.int64)) * block_bytes // block)
    except (ValueError, KeyError) as err:
        raise InputError(f"{where}: unknown GGUF tensor type ({err}); use --full-download") from err
    if any(entry.end > size for entry in table.values()):
        raise InputError(f"{where}: GGUF tensor table points past the end of the file; corrupted upload?")
    return table


def gguf_source(spec: str, *, revision: str | None, token: str | None, full_download: bool) -> WeightSource:
    """``org/name/file.gguf`` on the Hub: its header and q/k tensors by range, or the whole file."""
    match = HUB_GGUF.fullmatch(spec)
    if match is None:
        raise InputError(f"{spec}: not a local file, nor a Hub GGUF file written as org/name/file.gguf")
    repo_id, filename = match["repo"], match["file"]
    if full_download:
        try:
            path = Path(hf_hub_download(repo_id, filename, revision=revision, token=token))
        except (HfHubHTTPError, OfflineModeIsEnabled, EntryNotFoundError) as err:
            raise hub_error(repo_id, filename, revision, err) from err
        source = from_gguf(path, description=spec)
        commit = path.parent.name if path.parent.parent.name == "snapshots" else revision
    else:
        commit = _resolve_commit(repo_id, filename, revision, token)
        file = RemoteFile(repo_id, filename, commit, token)
        prefix, size, table = file.header(lambda p, n: (p, n, _gguf_table(p, n, file)), GGUF_PROBE)
        file.set_table(lambda: table)
        with tempfile.TemporaryDirectory() as scratch:
            hollow = Path(scratch) / Path(filename).name  # the header in a sparse file of the remote size
            with open(hollow, "wb") as handle:
                handle.write(prefix)
                handle.truncate(size)
            prefetch = Prefetcher(dict.fromkeys(file.table, file), lambda files: None)

            def read(tensor) -> np.ndarray:
                _, path = prefetch.path(tensor.name)
                return np.fromfile(path, dtype=tensor.data.dtype).reshape(tensor.data.shape)

            source = from_gguf(hollow, read=read, description=spec)
    source.model_id = spec
    source.revision = commit
    return source


def warn_full_download(repo_id: str) -> None:
    logger.warning(
        "%s: no safetensors weights; a PyTorch .bin checkpoint cannot be read in parts, downloading whole files",
        repo_id,
    )

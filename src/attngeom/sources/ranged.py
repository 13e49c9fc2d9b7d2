"""One file read by HTTP range: its header, then the bytes of single tensors, each cached on disk.

A safetensors file starts with an 8-byte length and a JSON header giving every tensor's byte range
(parsed by huggingface_hub); a GGUF file with its metadata and tensor table (parsed by
``gguf.parse_header``). huggingface_hub's ``get_safetensors_metadata`` reads the same tensors (tested) but
cannot serve here: its offsets count from the end of a header whose length it does not return, it asks
for 100,000 bytes of every file (the whole of a small one: 991 kB for a 13-shard tiny checkpoint whose
headers are 3 kB), and it keeps nothing for an offline re-run. Each is read with a few ranged GETs, then only the requested tensors' bytes. Each
tensor is cached as a one-tensor safetensors file, so safetensors itself decodes it (its dtype table, its
size checks) and a re-run transfers nothing. Every cache entry (tensor or header) is written with its
size and SHA-256 beside it (``<entry>.sha256``) and checked on every read: a damaged entry is fetched
again, not trusted and not blamed on the upload.

Connections are huggingface_hub's httpx pool (its endpoint, proxies, offline mode, timeouts); each read
is one bounded transfer (``attngeom.network``: a minimum rate, a deadline, one retry policy), transient
failures (dropped connections, 5xx, short bodies) asked again from where the bytes stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import httpx2
import torch
from huggingface_hub import constants, parse_local_safetensors_file_metadata
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, SafetensorsParsingError
from huggingface_hub.utils import get_session, hf_raise_for_status
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors

from .. import files, network
from ..errors import InputError
from . import gguf
from .base import one_line

CHUNK = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """A tensor's bytes [start, end) in its file, with the safetensors dtype and shape they decode to."""

    start: int
    end: int
    dtype: str
    shape: tuple[int, ...]


class RemoteFile:
    """One file at a fixed URL, read by byte range, its header and tensors cached under ``folder``.

    ``explain`` turns an HTTP or offline error into the one-line error the user sees.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        folder: Path,
        label: str,
        explain: Callable[[Exception], InputError],
        tries: int = network.TRIES,
    ) -> None:
        self.url = url
        self.headers = {**headers, "Accept-Encoding": "identity"}
        self.folder = folder
        self.label = label
        self.explain = explain
        self.tries = tries
        self.table: dict[str, Entry] = {}
        self.table_ready = False

    def __repr__(self) -> str:
        return self.label

    @property
    def header_path(self) -> Path:
        return self.folder.with_name(self.folder.name + ".header")

    # --- transfers ---------------------------------------------------------------------------------

    def read(self, start: int, end: int, sink: Callable[[bytes], None]) -> int:
        """Bytes [start, end) of the file passed to ``sink`` in order; returns the file's size.

        One transfer (``attngeom.network``): failures are asked again with back-off, each retry asking
        only for the bytes still missing, all of it within the transfer's rate and deadline.
        """
        position = start

        def attempt() -> int:
            nonlocal position, end
            headers = {**self.headers, "Range": f"bytes={position}-{end - 1}"}
            with get_session().stream("GET", self.url, headers=headers, timeout=opened.timeout()) as response:
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
            raise network.Transient(f"the response ended at byte {position} of {end}")

        with network.transfer(self.label) as opened:
            try:
                return network.with_retries(opened, attempt, self.tries)
            except (HfHubHTTPError, OfflineModeIsEnabled) as err:
                raise self.explain(err) from err

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
        network.transient_status(status)
        if status == 416:
            raise InputError(
                f"{self}: bytes {position}-{end - 1} lie past the end of the file; it is corrupted"
            )
        response.read()
        hf_raise_for_status(response)
        raise InputError(f"{self}: unexpected HTTP {status} to a range request")

    def header(self, parse: Callable[[bytes, int], T], probe: int) -> T:
        """``parse(prefix, file_size)`` of the file's first bytes, as many as ``parse`` asks for
        (``gguf.NeedMore``); the prefix is cached (as it is in the file) beside the tensors."""
        cached = self.header_path
        size_file = cached.with_name(cached.name + ".size")
        known = verified(cached)
        if known is not None and size_file.is_file():
            with contextlib.suppress(gguf.NeedMore, InputError, ValueError):
                return parse(known, int(size_file.read_text()))
        parts: list[bytes] = []
        size = self.read(0, probe, parts.append)
        prefix = b"".join(parts)
        while True:
            try:
                result = parse(prefix, size)
                break
            except gguf.NeedMore as more:
                if len(prefix) >= size or more.size > gguf.MAX_HEADER:
                    raise InputError(
                        f"{self}: the header runs past the end of the file; it is truncated"
                    ) from None
                parts = [prefix]
                self.read(len(prefix), min(more.size, size), parts.append)
                prefix = b"".join(parts)
        files.write_text(size_file, str(size))
        write_verified(cached, prefix)
        return result

    # --- tensor cache ------------------------------------------------------------------------------

    def entry_path(self, name: str) -> Path:
        return self.folder / (quote(name, safe="") + ".safetensors")

    def cached(self, name: str) -> bool:
        path = self.entry_path(name)
        return path.is_file() and digest_path(path).is_file()

    def fetch(self, names: list[str]) -> None:
        """Tensors that lie back to back in the file: one request, each into its own cache entry.

        Entries appear complete or not at all (each is written beside its place and renamed into it),
        then their size and hash.
        """
        digests = {}
        with contextlib.ExitStack() as stack:
            outputs: deque[list] = deque()
            for name in names:
                entry = self.table[name]
                temporary = stack.enter_context(files.atomic_path(self.entry_path(name)))
                handle = stack.enter_context(open(temporary, "wb"))
                header = _entry_header(name, entry)
                digests[name] = digest = hashlib.sha256(header)
                handle.write(header)
                outputs.append([handle, entry.end - entry.start, digest])

            def sink(data: bytes) -> None:
                while data:
                    while not outputs[0][1]:
                        outputs.popleft()
                    part = data[: outputs[0][1]]
                    outputs[0][0].write(part)
                    outputs[0][2].update(part)
                    outputs[0][1] -= len(part)
                    data = data[len(part) :]

            start, end = self.table[names[0]].start, self.table[names[-1]].end
            if end > start:
                self.read(start, end, sink)
        for name, digest in digests.items():
            entry = self.table[name]
            size = len(_entry_header(name, entry)) + entry.end - entry.start
            files.write_text(digest_path(self.entry_path(name)), f"{size} {digest.hexdigest()}")

    def tensor(self, name: str) -> torch.Tensor:
        """A cached tensor, decoded by safetensors; a damaged entry (size or hash not as written) is fetched
        again, one that still does not decode is removed and named."""
        path = self.entry_path(name)
        data = verified(path)
        if data is None:
            self.fetch([name])
            data = verified(path)
        try:
            if data is None:
                raise OSError("the cache entry changed while it was read")
            return load_safetensors(data)[name]
        except (SafetensorError, OSError, KeyError) as err:
            path.unlink(missing_ok=True)
            raise InputError(
                f"{self}: tensor {name} does not decode as its header says ({one_line(err)}); "
                "corrupted upload? use --full-download"
            ) from err


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def write_verified(path: Path, data: bytes) -> None:
    """``data`` cached at ``path``, then its size and SHA-256 beside it."""
    files.write_bytes(path, data)
    files.write_text(digest_path(path), f"{len(data)} {hashlib.sha256(data).hexdigest()}")


def verified(path: Path) -> bytes | None:
    """The bytes cached at ``path`` if their size and hash are those written with them; None otherwise
    (missing, damaged, or written before hashes were kept)."""
    try:
        size, digest = digest_path(path).read_text().split()
        data = path.read_bytes()
    except (OSError, ValueError):
        return None
    if str(len(data)) != size or hashlib.sha256(data).hexdigest() != digest:
        return None
    return data


def _entry_header(name: str, entry: Entry) -> bytes:
    """The header of a one-tensor safetensors file holding ``entry``'s bytes (padded to 8 bytes)."""
    info = {"dtype": entry.dtype, "shape": list(entry.shape), "data_offsets": [0, entry.end - entry.start]}
    text = json.dumps({name: info}).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


# --- safetensors -----------------------------------------------------------------------------------


def read_safetensors_table(file: RemoteFile) -> None:
    """The tensor table of a remote safetensors file, from its header (read by range, parsed by
    huggingface_hub)."""

    def header_length(prefix: bytes, size: int) -> int:
        if len(prefix) < 8:
            raise gguf.NeedMore(8)
        length = int.from_bytes(prefix[:8], "little")
        if length > constants.SAFETENSORS_MAX_HEADER_LENGTH or 8 + length > size:
            raise InputError(f"{file}: not a safetensors file (header length {length} of a {size}-byte file)")
        if len(prefix) < 8 + length:
            raise gguf.NeedMore(8 + length)
        return length

    def make() -> dict[str, Entry]:
        length = file.header(header_length, 8)
        try:
            metadata = parse_local_safetensors_file_metadata(file.header_path)
        except SafetensorsParsingError as err:
            raise InputError(
                f"{file}: corrupted safetensors header ({one_line(err)}); use --full-download"
            ) from err
        table = {}
        for name, info in metadata.tensors.items():
            begin, end = (8 + length + int(offset) for offset in info.data_offsets)
            table[name] = Entry(begin, end, info.dtype, tuple(info.shape))
        if any(not 8 + length <= e.start <= e.end for e in table.values()):
            raise InputError(f"{file}: safetensors header gives impossible byte ranges; corrupted upload?")
        return table

    if not file.table_ready:
        file.table, file.table_ready = make(), True


# --- GGUF ------------------------------------------------------------------------------------------


def read_gguf_table(file: RemoteFile) -> gguf.Header:
    """The header of a remote GGUF file (parsed once); its tensors' raw bytes become the file's table."""

    def parse(prefix: bytes, size: int) -> gguf.Header:
        header = gguf.parse_header(prefix, str(file))
        if any(info.end > size for info in header.tensors.values()):
            raise InputError(f"{file}: GGUF tensor table points past the end of the file; corrupted upload?")
        return header

    header = file.header(parse, gguf.PROBE)
    file.table = {
        name: Entry(info.start, info.end, "U8", (info.end - info.start,))
        for name, info in header.tensors.items()
    }
    file.table_ready = True
    return header

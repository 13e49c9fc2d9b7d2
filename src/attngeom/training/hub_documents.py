"""A Hub dataset's documents, read from its data files by HTTP range, every wait bounded.

``datasets`` only says which files make the train split (the dataset's configs, its ``data_dir``, the
Parquet export branch; no loading script runs and no data passes through it). The revision is resolved to
a commit first (checked as 40 hex), then each file is read here by ranged GETs of ``BLOCK`` bytes (Parquet
seeks to its footer, JSON lines and text stream through, decompressed as they come), so every error is
ours, one line naming the dataset and the file:
- each block is one bounded transfer (``attngeom.network``): a request that sends nothing for
  ``HF_HUB_DOWNLOAD_TIMEOUT`` seconds, ends early or answers 5xx/429 is asked again from where its bytes
  stopped, silently, then is one error; a block read under the minimum rate (however many requests it
  takes) or past the deadline is one error; a line every ``PROGRESS_S`` seconds says how far a file has got;
- a redirect loop or chain, a server that ignores ranges, a missing file, a refused token: one error each;
- listing the files (``datasets``' own requests, which wait without bounds) is given
  ``network.LISTING_S`` seconds, with the same progress lines.
"""

from __future__ import annotations

import io
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx2
from huggingface_hub import constants, hf_hub_url
from huggingface_hub.utils import build_hf_headers, get_session

from .. import network
from ..cache import human
from ..version import __version__
from .config import ConfigError
from .document_files import read_documents

BLOCK = 1 << 20
CONNECT_TIMEOUT_S = 10.0
PROGRESS_S = 30.0
COMMIT = re.compile(r"[0-9a-f]{40}")
BUILDER_KINDS = {"parquet": "parquet", "json": "json", "text": "text"}

T = TypeVar("T")


def hub_documents(
    where: str, repo: str, name: str | None, revision: str | None, column: str, data_dir: str | None
) -> Iterator[str]:
    """The documents of the train split of ``repo`` (a Hub dataset, or a local folder ``datasets`` reads),
    its files resolved now (a wrong name or an unreachable Hub is an error before anything is read)."""
    local = Path(repo).is_dir()
    if not local and constants.HF_HUB_OFFLINE:
        raise ConfigError(
            f"{where} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: unset "
            "HF_HUB_OFFLINE to stream it, or use a local copy (dataset=<file or folder>)"
        )
    commit = (
        revision
        if local
        else _bounded(where, "to resolve the revision", lambda: _commit(where, repo, revision))
    )
    files, kind = _bounded(
        where, "to list the data files", lambda: _data_files(where, repo, name, commit, data_dir)
    )
    prefix = f"hf://datasets/{repo}@{commit}/"
    if not local and (outside := [f for f in files if not f.startswith(prefix)]):
        raise ConfigError(
            f"{where}: data file {outside[0][:120]!r} lies outside {repo}@{commit}; check HF_ENDPOINT"
        )
    return _read(where, repo, commit, files, kind, column, local)


def _read(
    where: str, repo: str, commit: str | None, files: list[str], kind: str | None, column: str, local: bool
) -> Iterator[str]:
    prefix = f"hf://datasets/{repo}@{commit}/"
    for file in files:
        path = file if local else file.removeprefix(prefix)
        label = f"{where} {path}"
        if local:
            with open(file, "rb") as opened:
                yield from read_documents(label, path, opened, column, kind)
        else:
            url = hf_hub_url(repo, path, repo_type="dataset", revision=commit)
            with HttpFile(url, label) as opened:
                yield from read_documents(label, path, opened, column, kind)


def _commit(where: str, repo: str, revision: str | None) -> str:
    """The commit ``revision`` (default: main) of the dataset, as the Hub names it (40 hex, checked)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        info = HfApi().dataset_info(repo, revision=revision, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except RevisionNotFoundError:
        raise ConfigError(f"{where}: no revision {revision!r} in the dataset") from None
    except RepositoryNotFoundError:
        raise ConfigError(
            f"{where}: no such dataset on the Hub (if it is private or gated, set HF_TOKEN)"
        ) from None
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else "?"
        raise ConfigError(
            f"{where}: the Hub answered HTTP {status}; retry later (or check HF_ENDPOINT)"
        ) from None
    except (httpx2.HTTPError, OSError) as err:
        raise ConfigError(
            f"{where}: the Hub cannot be reached ({_one_line(err)[:120]}); check the network, or set "
            "HF_HUB_OFFLINE=1 to use a cached copy"
        ) from None
    if not isinstance(info.sha, str) or not COMMIT.fullmatch(info.sha):
        raise ConfigError(
            f"{where}: the server at {constants.ENDPOINT} names commit {str(info.sha)[:60]!r} for "
            f"{revision or 'main'}, not a 40-hex commit hash; check HF_ENDPOINT"
        )
    return info.sha


def _data_files(
    where: str, repo: str, name: str | None, commit: str | None, data_dir: str | None
) -> tuple[list[str], str | None]:
    """The train split's data files (``hf://`` paths, or local ones) and their format, as ``datasets``
    resolves them; whatever it raises is one line."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(repo, name, data_dir=data_dir, revision=commit)
    except Exception as err:  # datasets raises many kinds (FileNotFoundError, ValueError, its own, HTTP)
        raise ConfigError(f"{where}: {_one_line(err)[:300]}") from None
    splits = builder.config.data_files or {}
    if "train" not in splits:
        raise ConfigError(f"{where}: no train split among its data files (splits: {sorted(splits)})")
    if not splits["train"]:
        raise ConfigError(f"{where}: its train split names no data file; check the dataset's data_dir")
    return [str(file) for file in splits["train"]], BUILDER_KINDS.get(builder.name)


def _bounded(where: str, what: str, call: Callable[[], T]) -> T:
    """``call()``, given ``network.LISTING_S`` seconds (a line every ``PROGRESS_S`` while it waits)."""
    return network.within(where, what, call, say, PROGRESS_S)


def say(line: str) -> None:
    print(f"attngeom: {line}", file=sys.stderr, flush=True)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


class HttpFile(io.RawIOBase):
    """A file at ``url`` read by HTTP range, seekable, one block (at least ``BLOCK`` bytes) held at a time."""

    def __init__(self, url: str, label: str) -> None:
        super().__init__()
        self.url, self.label = url, label
        self.headers = {
            **build_hf_headers(library_name="attngeom", library_version=__version__),
            "Accept-Encoding": "identity",
        }
        self.position, self.size = 0, None
        self.buffer, self.buffer_start = b"", 0
        self.received, self.started = 0, time.monotonic()
        self.said = self.started

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            if self.size is None:
                self._fill(0, 1)  # one byte: the answer says the size
            offset += self.size or 0
        elif whence == io.SEEK_CUR:
            offset += self.position
        self.position = max(0, offset)
        return self.position

    def readinto(self, target) -> int:  # type: ignore[no-untyped-def]
        wanted = len(target)
        if not wanted or (self.size is not None and self.position >= self.size):
            return 0
        offset = self.position - self.buffer_start
        end = self.position + wanted if self.size is None else min(self.position + wanted, self.size)
        if offset < 0 or self.buffer_start + len(self.buffer) < end:
            self._fill(self.position, max(wanted, BLOCK))
            offset = 0
        chunk = self.buffer[offset : offset + wanted]
        target[: len(chunk)] = chunk
        self.position += len(chunk)
        return len(chunk)

    def _fill(self, start: int, length: int) -> None:
        """Bytes [start, start + length) (less at the end of the file) into the buffer: one transfer,
        asking again from where a failed request stopped."""
        parts: list[bytes] = []

        def attempt() -> None:
            while True:
                position = start + sum(map(len, parts))
                end = start + length if self.size is None else min(start + length, self.size)
                if position >= end or not self._get(position, end, parts, opened):
                    return

        with network.transfer(self.label) as opened:
            network.with_retries(opened, attempt)
        self.buffer, self.buffer_start = b"".join(parts), start

    def _get(self, position: int, end: int, parts: list[bytes], opened: network.Transfer) -> bool:
        """One ranged GET of [position, end), its bytes appended to ``parts`` as they come; False when the
        file ends before ``position``."""
        headers = {**self.headers, "Range": f"bytes={position}-{end - 1}"}
        timeout = opened.timeout(connect=CONNECT_TIMEOUT_S)
        got = 0
        with get_session().stream("GET", self.url, headers=headers, timeout=timeout) as response:
            if not self._check(response, position):
                return False
            end = min(end, self.size or end)
            for chunk in response.iter_raw():  # as the bytes come (a chunk size would wait for it)
                chunk = chunk[: end - position - got]
                parts.append(chunk)
                got += len(chunk)
                self._progress(len(chunk))
                if position + got >= end:
                    return True
        raise network.Transient(f"the response ended at byte {position + got} of {end}")

    def _check(self, response: httpx2.Response, position: int) -> bool:
        """Whether ``response`` holds the bytes from ``position`` (False: the file ends before it); the
        file's size learnt from it. Anything else raises."""
        status = response.status_code
        if status == 206:
            match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", ""))
            if not match or int(match[1]) != position:
                raise ConfigError(
                    f"{self.label}: asked for bytes from {position}, the server sent "
                    f"{response.headers.get('Content-Range')!r}; check HF_ENDPOINT"
                )
            self.size = int(match[3])
            return True
        if status == 416:  # past the end: the size is in "bytes */<size>"
            match = re.fullmatch(r"bytes \*/(\d+)", response.headers.get("Content-Range", ""))
            if match:
                self.size = int(match[1])
                return False
        network.transient_status(status)
        if status == 200 and response.headers.get("Content-Length") == "0":  # an empty file, ranges aside
            self.size = 0
            return False
        if status == 200:
            raise ConfigError(f"{self.label}: the server ignores HTTP Range requests; check HF_ENDPOINT")
        if status in (401, 403):
            raise ConfigError(
                f"{self.label}: HTTP {status}; set HF_TOKEN to a token with access to the dataset"
            )
        if status == 404:
            raise ConfigError(f"{self.label}: no such file at the dataset's commit (HTTP 404)")
        raise ConfigError(f"{self.label}: unexpected HTTP {status}")

    def _progress(self, size: int) -> None:
        """A line every ``PROGRESS_S`` seconds saying how far the file has got."""
        now = time.monotonic()
        self.received += size
        if now - self.said >= PROGRESS_S:
            self.said = now
            rate = self.received / max(now - self.started, 1e-9)
            say(
                f"{self.label}: {human(self.received)} read in {now - self.started:.0f} s ({human(int(rate))}/s)"
            )

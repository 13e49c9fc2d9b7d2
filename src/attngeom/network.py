"""Every network read bounded, and asked again by one policy: what a hostile or failing server may cost.

A *transfer* is one read: a byte range of a file with all its retries, one whole-file download, one
quick question to the Hub. Three bounds hold for each, set by environment variables:

- ``ATTNGEOM_NET_MIN_RATE`` (bytes a second, default 1024) over ``ATTNGEOM_NET_WINDOW_S`` (seconds, default
  60): once a transfer has run that long, fewer bytes than rate × window in the last window (however many
  requests they came in, back-off waits included) end it;
- ``ATTNGEOM_NET_DEADLINE_S`` (seconds, default 3600): a transfer not done by then ends;
- a server silent for ``HF_HUB_DOWNLOAD_TIMEOUT`` seconds (huggingface_hub's setting, default 10) is a
  failed request, asked again like a dropped connection.

Either end is one ``Stalled`` error naming the file and the rate seen. Failures worth asking again (a
dropped connection, a time-out, HTTP 408/429/5xx, a body that ends early) are retried after a back-off
(``FIRST_WAIT_S``, doubled each time, at most ``MAX_WAIT_S``), ``TRIES`` times in a row without a byte
received, then one ``GaveUp`` error. Redirects are followed as huggingface_hub follows them (at most 20);
more is one error, which says whether the chain was a loop.

The bounds reach huggingface_hub's own downloads too: ``install`` hooks its HTTP client so that every
response body it reads, ours or the library's, counts against the transfer open on that thread (or one of
its own), and so that every read from its connections checks the bounds of the transfer open on that
thread first: a server that sends its response headers a byte at a time ends like one that sends its body
so. (Response headers read outside any transfer are bounded only by the silence time-out and the HTTP
library's 100 KiB cap on headers.) Downloads through ``hf_xet`` (not httpx) are outside these bounds.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import httpcore2
import httpx2

from .errors import InputError

MIN_RATE_VARIABLE = "ATTNGEOM_NET_MIN_RATE"
WINDOW_VARIABLE = "ATTNGEOM_NET_WINDOW_S"
DEADLINE_VARIABLE = "ATTNGEOM_NET_DEADLINE_S"
DEFAULTS = {MIN_RATE_VARIABLE: 1024.0, WINDOW_VARIABLE: 60.0, DEADLINE_VARIABLE: 3600.0}

TRIES = 5
"""Attempts in a row that receive nothing before a transfer gives up; one that receives bytes resets it."""
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 8.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
LISTING_S = 300.0
"""What listing a dataset's files (``datasets``' own requests) may take in all, at most the deadline."""
HOPS = "attngeom_hops"
"""The request extension in which the hook records every URL of a redirect chain."""

T = TypeVar("T")


class NetworkError(InputError):
    """A transfer that did not complete: the server or the link, not the input, is at fault."""


class Stalled(NetworkError):
    """A transfer under its minimum rate, or past its deadline."""


class GaveUp(NetworkError):
    """``TRIES`` failed attempts in a row; ``reason`` is the last one's."""

    reason = ""


class Transient(Exception):
    """A failure worth asking again: HTTP 408, 429 or 5xx, or a body that ended early."""


@dataclass(frozen=True)
class Bounds:
    min_rate: float
    """Bytes a second, averaged over ``window_s``."""
    window_s: float
    deadline_s: float

    @classmethod
    def from_environment(cls) -> Bounds:
        """The bounds the environment sets (read at every transfer, so a test or a job can change them)."""
        values = []
        for name, default in DEFAULTS.items():
            text = os.environ.get(name, "").strip()
            try:
                value = float(text) if text else default
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"{name}={text!r}: give a number > 0 (default {default:g}), or unset it")
            values.append(value)
        return cls(*values)


def human(size: float) -> str:
    """``size`` bytes in the largest unit that keeps it ≥ 1 (1024-based)."""
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


class Transfer:
    """One read's clock and the bytes it has received, checked against its bounds as they arrive."""

    def __init__(self, label: str, bounds: Bounds | None = None) -> None:
        self.label = label
        self.bounds = bounds or Bounds.from_environment()
        self.started = time.monotonic()
        self.total = 0
        self.recent: deque[tuple[float, int]] = deque()

    def received(self, size: int) -> None:
        now = time.monotonic()
        self.total += size
        self.recent.append((now, size))
        self.check(now)

    def check(self, now: float | None = None) -> None:
        """A ``Stalled`` error if the transfer is past its deadline or, after a window, under its rate."""
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        bounds = self.bounds
        while self.recent and self.recent[0][0] < now - bounds.window_s:
            self.recent.popleft()
        if elapsed > bounds.deadline_s:
            raise Stalled(
                f"{self.label}: not done after {elapsed:.0f} s ({human(self.total)} at "
                f"{human(self.total / elapsed)}/s), past {DEADLINE_VARIABLE}={bounds.deadline_s:g}; check the "
                f"connection (or HF_ENDPOINT), or raise {DEADLINE_VARIABLE} for a slow link"
            )
        got = sum(size for _, size in self.recent)
        if elapsed >= bounds.window_s and got < bounds.min_rate * bounds.window_s:
            raise Stalled(
                f"{self.label}: {human(got)} in the last {bounds.window_s:g} s ({human(got / bounds.window_s)}/s), "
                f"under {MIN_RATE_VARIABLE}={bounds.min_rate:g} bytes a second; check the connection "
                f"(or HF_ENDPOINT) and retry"
            )

    def left_s(self) -> float:
        return self.bounds.deadline_s - (time.monotonic() - self.started)

    def timeout(self, silence: float | None = None, connect: float | None = None) -> httpx2.Timeout:
        """A request's time-outs: ``silence`` seconds without a byte (default ``HF_HUB_DOWNLOAD_TIMEOUT``)
        and ``connect`` to connect, neither past the deadline."""
        from huggingface_hub import constants

        limit = max(0.01, self.left_s())
        silence = min(float(constants.HF_HUB_DOWNLOAD_TIMEOUT if silence is None else silence), limit)
        return httpx2.Timeout(silence, connect=silence if connect is None else min(connect, silence))

    def wait(self, seconds: float) -> None:
        """A back-off: sleeps, never past the deadline, then checks the bounds."""
        time.sleep(max(0.0, min(seconds, self.left_s())))
        self.check()


_local = threading.local()


def current() -> Transfer | None:
    """The transfer open on this thread, if any."""
    return getattr(_local, "transfer", None)


@contextlib.contextmanager
def transfer(label: str) -> Iterator[Transfer]:
    """A transfer named ``label`` (the file, as the user knows it), open on this thread for the block:
    every response huggingface_hub's client reads here counts against it, and a library's transport error
    or redirect chain escaping the block is one ``NetworkError`` naming ``label``."""
    install()
    opened, previous = Transfer(label), current()
    _local.transfer = opened
    try:
        yield opened
    except httpx2.TooManyRedirects as err:  # from a library's requests (ours are named in with_retries)
        raise NetworkError(redirect_message(label, err)) from None
    except httpx2.TransportError as err:  # a library's requests gave up on a dropped or silent link
        raise NetworkError(
            f"{label}: {one_line(err)}; check the connection (or HF_ENDPOINT) and retry"
        ) from None
    finally:
        _local.transfer = previous


def with_retries(opened: Transfer, attempt: Callable[[], T], tries: int = TRIES) -> T:
    """``attempt()`` until it returns: a ``Transient`` failure or a transport error (dropped, refused, timed
    out) is asked again after a back-off, ``tries`` attempts in a row without a byte received, then a
    ``GaveUp``; too many redirects is one ``NetworkError`` at once."""
    failures = 0
    while True:
        before = opened.total
        try:
            return attempt()
        except httpx2.TooManyRedirects as err:
            raise NetworkError(redirect_message(opened.label, err)) from None
        except (Transient, httpx2.TransportError) as err:
            reason = one_line(err)
            failures = 1 if opened.total > before else failures + 1
            if failures >= tries:
                gave_up = GaveUp(
                    f"{opened.label}: download failed after {failures} tries ({reason}); check the "
                    "connection (or HF_ENDPOINT) and retry"
                )
                gave_up.reason = reason
                raise gave_up from None
            opened.wait(min(FIRST_WAIT_S * 2 ** (failures - 1), MAX_WAIT_S))


def transient_status(status: int) -> None:
    """A ``Transient`` for an HTTP status worth asking again."""
    if status in TRANSIENT_STATUS:
        raise Transient(f"HTTP {status}")


def redirect_message(label: str, err: httpx2.TooManyRedirects) -> str:
    """One line for a redirect chain longer than the client follows: a loop, or just too long."""
    hops = [str(url) for url in err.request.extensions.get(HOPS, [])]
    repeated = next((url for index, url in enumerate(hops) if url in hops[:index]), None)
    if repeated is not None:
        return f"{label}: the server redirects in a loop (back to {repeated[:120]}); check HF_ENDPOINT"
    return (
        f"{label}: the server redirects more than {max(len(hops) - 1, 1)} times (too many redirects, "
        "not a loop); check HF_ENDPOINT"
    )


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:200] or type(err).__name__


# ---------------------------------------------------------------- huggingface_hub's client, bounded


class _Bounded(httpx2.SyncByteStream):
    """A response body whose every chunk counts against a transfer."""

    def __init__(self, stream: httpx2.SyncByteStream, opened: Transfer) -> None:
        self.stream, self.opened = stream, opened

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            self.opened.received(len(chunk))
            yield chunk

    def close(self) -> None:
        self.stream.close()


def _on_request(request: httpx2.Request) -> None:
    request.extensions.setdefault(HOPS, []).append(request.url)


def _on_response(response: httpx2.Response) -> None:
    opened = current() or Transfer(str(response.request.url)[:200])
    opened.check()
    if isinstance(response.stream, httpx2.SyncByteStream) and not isinstance(response.stream, _Bounded):
        response.stream = _Bounded(response.stream, opened)


class _CheckedStream(httpcore2.NetworkStream):
    """A connection whose every read first checks the transfer open on this thread, if any: the bytes
    before a response's body (its status line and headers) come under the transfer's bounds too."""

    def __init__(self, stream: httpcore2.NetworkStream) -> None:
        self.stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        opened = current()
        if opened is not None:
            opened.check()
        return self.stream.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, timeout)

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, *args, **kwargs) -> httpcore2.NetworkStream:
        return _CheckedStream(self.stream.start_tls(*args, **kwargs))

    def get_extra_info(self, info: str) -> object:
        return self.stream.get_extra_info(info)


class _CheckedBackend(httpcore2.NetworkBackend):
    """A connection pool's network backend whose connections are ``_CheckedStream``s."""

    def __init__(self, backend: httpcore2.NetworkBackend) -> None:
        self.backend = backend

    def connect_tcp(self, *args, **kwargs) -> httpcore2.NetworkStream:
        return _CheckedStream(self.backend.connect_tcp(*args, **kwargs))

    def connect_unix_socket(self, *args, **kwargs) -> httpcore2.NetworkStream:
        return _CheckedStream(self.backend.connect_unix_socket(*args, **kwargs))

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def _check_connections(client: httpx2.Client) -> None:
    """Every connection pool of ``client`` (its transport and any proxy's) with a ``_CheckedBackend``.
    httpx2 has no public way to give a client's pool its network backend, so this sets the pool's; an
    httpx2 without one leaves the headers bounded as the module's docstring says of reads outside a
    transfer."""
    transports = [client._transport, *getattr(client, "_mounts", {}).values()]
    for pool in (getattr(transport, "_pool", None) for transport in transports):
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _CheckedBackend):
            pool._network_backend = _CheckedBackend(backend)


def install() -> None:
    """huggingface_hub's HTTP client (the one it and attngeom share) with the bounds on every response and
    on every read from its connections."""
    from huggingface_hub.utils import get_session

    client = get_session()
    hooks = client.event_hooks
    if _on_response not in hooks["response"]:
        hooks["request"] = [*hooks["request"], _on_request]
        hooks["response"] = [*hooks["response"], _on_response]
        client.event_hooks = hooks
        _check_connections(client)  # once a client, as its hooks: its pools are made with it


def within(label: str, what: str, call: Callable[[], T], say: Callable[[str], None], every_s: float) -> T:
    """``call()`` (a library's own requests, which wait without bounds) given ``LISTING_S`` seconds (at
    most the deadline) on a thread of its own, a line to ``say`` every ``every_s`` seconds while it waits;
    a ``Stalled`` error after that (the thread is left to the process's end)."""
    limit = min(LISTING_S, Bounds.from_environment().deadline_s)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as err:  # handed to the caller's thread as it is
            outcome["error"] = err

    install()
    worker = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    worker.start()
    while worker.is_alive():
        waited = time.monotonic() - started
        if waited >= limit:
            raise Stalled(f"{label}: the Hub did not answer within {limit:.0f} s {what}; retry later")
        worker.join(min(every_s, limit - waited))
        if worker.is_alive():
            say(f"{label}: waited {time.monotonic() - started:.0f} s for the Hub {what}")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]

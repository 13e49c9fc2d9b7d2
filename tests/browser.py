"""Headless Chromium for the tests, driven over the DevTools protocol on a pipe: no web driver, no pip
package, nothing listening on a port. ``Page`` opens one file and evaluates JavaScript in it or in one of
its frames (an isolated world, so a frame of another origin, such as the ``data:`` frame in which
Snakemake's report shows an HTML result, can be read too)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM = next(
    (path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))), None
)
"""The browser, or None (tests that need it skip; CI installs Debian's chromium: .ci/run)."""
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]


class Page:
    """A page of a headless Chromium of its own (profile in ``profile``), at ``url``."""

    def __init__(self, url: str, profile: Path, timeout: float = 60):
        self.timeout = timeout
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()
        # Chromium reads commands from fd 3 and writes replies to fd 4: the child's ends are moved above
        # 9 first, so that they never are 3 or 4 themselves, then put there by bash
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
        os.close(to_browser)
        os.close(from_browser)
        redirect = f'exec "$@" 3<&{ends[0]} 4>&{ends[1]} {ends[0]}<&- {ends[1]}>&-'
        command = [
            "bash",
            "-c",
            redirect,
            "bash",
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        self.process = subprocess.Popen(
            command, pass_fds=ends, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for fd in ends:
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        (target,) = [t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        self.session = self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)[
            "sessionId"
        ]
        self.send("Page.enable", session=True)
        self.send("Page.navigate", session=True, url=url)
        self.wait_for_event("Page.loadEventFired")

    def send(self, method: str, session: bool = False, **params) -> dict:
        """One command; its result (a protocol error raises)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for_event(self, method: str) -> dict:
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._read())

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply from chromium in {self.timeout}s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def evaluate(self, expression: str, frame: str | None = None):
        """The value of ``expression`` (awaited when a promise) in the page, or in the frame of id
        ``frame``."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        if frame is not None:
            world = self.send("Page.createIsolatedWorld", session=True, frameId=frame, worldName="test")
            params["contextId"] = world["executionContextId"]
        result = self.send("Runtime.evaluate", session=True, **params)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def frames(self) -> list[dict]:
        """The page's child frames (id, url), in document order."""
        tree = self.send("Page.getFrameTree", session=True)["frameTree"]
        return [child["frame"] for child in tree.get("childFrames", [])]

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

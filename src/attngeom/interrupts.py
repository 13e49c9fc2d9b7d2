"""Ctrl-C and ``kill`` end a command in one line, with the shell's exit code, and leave no half-written file.

Python turns SIGINT into a ``KeyboardInterrupt`` that any ``except BaseException`` (or a ``__del__``, a
thread, a library's clean-up) can swallow or turn into a traceback, and SIGTERM, how Snakemake and SLURM
cancel a job, kills the process before any ``finally`` runs. So the command installs handlers that remove
the temporaries ``attngeom.files`` has open, print one line and leave at once with 128 + the signal.
A finished result is already in place (renamed atomically) and stays; nothing else is written.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM)

_open: set[Path] = set()
"""Temporary files and folders being written (``attngeom.files``), removed if a signal ends the process."""

_quiet = False
"""True in a forked child: the parent prints the one line for the whole command."""

_installed = False


@contextlib.contextmanager
def held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends (for creating a temporary and tracking it as one)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


_leaving = False
"""Set once a signal is ending the process: a temporary another thread creates after the clean-up (the
handler gives up the GIL while it removes files) is removed by that thread, which then waits for the end."""


def track(path: Path) -> None:
    _open.add(path)
    if _leaving:
        _remove_open()
        threading.Event().wait()


def untrack(path: Path) -> None:
    _open.discard(path)


def _remove_open() -> None:
    import shutil

    for path in list(_open):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _leave(signum: int, frame: FrameType | None) -> None:
    global _leaving
    _leaving = True
    _remove_open()
    if not _quiet:
        name = signal.Signals(signum).name
        os.write(
            sys.stderr.fileno(), f"attngeom: interrupted by {name}; no partial output was left\n".encode()
        )
    os._exit(128 + signum)


def _in_child() -> None:
    global _quiet
    _quiet = True
    _open.clear()  # the parent's temporaries are the parent's to remove


def install() -> None:
    """Handle SIGINT and SIGTERM for the rest of this process (and, quietly, for children it forks)."""
    global _installed
    for signum in HANDLED:
        signal.signal(signum, _leave)
    if not _installed:
        os.register_at_fork(after_in_child=_in_child)
        _installed = True

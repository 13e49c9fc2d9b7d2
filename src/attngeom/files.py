"""Where the package keeps files, and how it writes them: beside the target, then renamed into place.

Every file or folder the package writes goes through ``atomic_path`` or ``atomic_dir``: a reader never
sees half a result, a failed write leaves nothing behind, and the result gets the permissions a plain
``open()`` or ``mkdir()`` would give it under the user's umask (``mkstemp``'s private 0600 would hide
results from colleagues on a shared filesystem).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """A fresh temporary path beside ``target`` (same suffix, so writers that infer the format from it
    work); renamed onto ``target`` when the block ends without an error, removed otherwise."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(
        prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}", dir=target.parent
    )
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _as_if_created_plainly(folder: Path) -> None:
    """``folder`` and everything in it get the modes ``mkdir()`` and ``open()`` give under the umask
    (some writers, such as safetensors' ``save_file``, create their files private, 0600)."""
    mask = _umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, folders, names in os.walk(folder):
        for name in folders:
            os.chmod(Path(root, name), 0o777 & ~mask)
        for name in names:
            path = Path(root, name)
            if path.is_file() and not path.is_symlink():
                os.chmod(path, (0o666 | (path.stat().st_mode & 0o111)) & ~mask)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """A fresh temporary folder beside ``target``; when the block succeeds it replaces ``target`` (an
    existing ``target`` is removed only then), otherwise it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield temporary
        _as_if_created_plainly(temporary)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(temporary, target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """``text`` written atomically to ``path`` (UTF-8)."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """``data`` written atomically to ``path``."""
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)
    return Path(path)


def cache_dir(kind: str) -> Path:
    """The cache folder for ``kind`` (``hub`` byte ranges, ``training`` token streams):
    ``$ATTNGEOM_CACHE/<kind>``, else ``$XDG_CACHE_HOME/attngeom/<kind>`` (``~/.cache`` by default)."""
    root = os.environ.get("ATTNGEOM_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attngeom"
    return Path(root).expanduser() / kind

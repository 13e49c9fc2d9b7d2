"""Where the package keeps files, and how it writes them: beside the target, then renamed into place.

Every file or folder the package writes goes through ``atomic_path`` or ``atomic_dir``: a reader never
sees half a result, a failed write leaves nothing behind, and the result gets the permissions a plain
``open()`` or ``mkdir()`` would give it under the user's umask (``mkstemp``'s private 0600 would hide
results from colleagues on a shared filesystem).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import string
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote

from . import interrupts
from .errors import InputError

SLUG_SAFE = frozenset(string.ascii_letters + string.digits + "._-")
SLUG_MAX_BYTES = 120
"""The longest slug: with the pipeline's suffixes and temporary prefixes (``.<slug>.<random>.tmp.status.json``)
a file name stays far below the 255 bytes most filesystems allow."""
SLUG_HASH_MARK = "---"
SLUG_HASH_DIGITS = 16


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
    with interrupts.held():
        handle, name = tempfile.mkstemp(
            prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}", dir=target.parent
        )
        os.close(handle)
        temporary = Path(name)
        interrupts.track(temporary)
    try:
        yield temporary
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
        interrupts.untrack(temporary)


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
    with interrupts.held():
        temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        interrupts.track(temporary)
    try:
        yield temporary
        _as_if_created_plainly(temporary)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(temporary, target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        interrupts.untrack(temporary)


def check_output(path: str | os.PathLike, protect: Iterable[str | os.PathLike] = ()) -> Path:
    """``path`` if a result may be written there, checked before any work; else an ``InputError``.

    Refused: a folder or anything but a regular file (``/dev/full``, a fifo); a file of a model in
    ``protect`` (the model file under any name, or any file, new or existing, in the model's folder); and a place
    whose folder cannot be written to (``check_folder``).
    """
    target = Path(path)
    try:
        found = target.stat()
    except FileNotFoundError:
        found = None
    except OSError as err:
        raise InputError(f"output {target}: {err.strerror}; choose another output path") from err
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise InputError(f"output {target} is a folder; give a file path such as {target / 'scores.parquet'}")
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise InputError(f"output {target} is not a regular file; choose a file path")
    for model in map(Path, protect):
        if _belongs_to(target, found, model):
            raise InputError(
                f"output {target} is a file of the model being read ({model}); choose another path"
            )
    check_folder(target.absolute().parent)
    return target


def check_folder(path: str | os.PathLike) -> Path:
    """``path`` if results may be written in it (it may not exist yet), checked before any work.

    Writability is probed with a temporary file in the nearest existing folder, removed at once:
    permission bits alone do not say what root, or a read-only mount, may do.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"output folder {folder} is a file; choose a folder")
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    try:
        handle, probe = tempfile.mkstemp(prefix=".attngeom.", suffix=".probe", dir=existing)
    except OSError as err:
        raise InputError(
            f"output {folder}: cannot write in {existing} ({err.strerror}); choose a writable folder"
        ) from err
    os.close(handle)
    os.unlink(probe)
    return folder


def _belongs_to(target: Path, found: os.stat_result | None, model: Path) -> bool:
    """Whether writing ``target`` would put a file in the model's folder (a new one too: the folder is
    the model's), or replace the model file or a file in its folder (``found``: ``target``'s stat)."""
    if not model.exists():
        return False
    if model.is_dir():
        folder, place = model.resolve(), target.absolute().parent.resolve()
        if place == folder or folder in place.parents:
            return True
        return found is not None and any(_same_file(found, file) for file in model.iterdir())
    return found is not None and _same_file(found, model)


def _same_file(found: os.stat_result, file: Path) -> bool:
    try:
        other = file.stat()
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (other.st_dev, other.st_ino)


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


def file_state(path: Path) -> list[tuple[str, int, int]]:
    """(resolved name, size, modification time) of a file, or of every file in a folder: what a cache
    keyed by it sees change when the file is edited."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def cache_dir(kind: str) -> Path:
    """The cache folder for ``kind`` (``hub`` byte ranges, ``training`` token streams):
    ``$ATTNGEOM_CACHE/<kind>``, else ``$XDG_CACHE_HOME/attngeom/<kind>`` (``~/.cache`` by default)."""
    root = os.environ.get("ATTNGEOM_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attngeom"
    return Path(root).expanduser() / kind


def slug(model_id: str) -> str:
    """Filesystem-safe file name of a model id: '/' becomes '--', other unsafe characters are %-escaped
    (``meta-llama/Llama-3.1-8B`` → ``meta-llama--Llama-3.1-8B``); reversible up to ``SLUG_MAX_BYTES``.

    No component contains '--' or starts/ends with '-', so ``unslug`` splits unambiguously. A longer slug
    (31 CJK characters escape to 279 bytes, past the 255-byte file name limit) keeps its beginning and
    ends in ``---`` and 16 hex digits of the id's SHA-256: three dashes never occur in a full slug, so
    a shortened slug never equals another id's full one.
    """
    parts = model_id.split("/")
    if "" in parts:
        raise InputError(f"model id {model_id!r}: an empty path component (leading, trailing or double '/')")
    full = "--".join(_slug_part(part) for part in parts)
    if len(full) <= SLUG_MAX_BYTES:
        return full
    digest = hashlib.sha256(model_id.encode()).hexdigest()[:SLUG_HASH_DIGITS]
    head = full[: SLUG_MAX_BYTES - len(SLUG_HASH_MARK) - SLUG_HASH_DIGITS]
    head = re.sub(r"%[0-9A-F]?$", "", head).rstrip("-")  # never cut inside an escape
    return head + SLUG_HASH_MARK + digest


def unslug(text: str) -> str:
    """Inverse of ``slug`` for a slug that was not shortened (one without ``---``)."""
    if SLUG_HASH_MARK in text:
        raise ValueError(f"{text!r} is a shortened slug; its model id is in the pipeline's registry")
    return "/".join(unquote(part) for part in text.split("--"))


def _slug_part(part: str) -> str:
    if SLUG_SAFE.issuperset(part) and part[0] not in ".-" and part[-1] != "-" and "--" not in part:
        return part  # nothing to escape (most ids): the loop below would give it back unchanged
    out = []
    for i, ch in enumerate(part):
        dash_ok = ch != "-" or (0 < i < len(part) - 1 and part[i - 1] != "-")
        dot_ok = ch != "." or i > 0
        if ch in SLUG_SAFE and dash_ok and dot_ok:
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode()))
    return "".join(out)

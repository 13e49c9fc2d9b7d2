"""Which files in attngeom's cache attngeom wrote: its layout, and the marker in each folder it makes.

Under ``$ATTNGEOM_CACHE`` (default ``~/.cache/attngeom``), attngeom makes these folders, each with a
marker file ``.attngeom-entry`` written when it makes the folder:
- ``hub/models--ORG--NAME/``: one repository. ``refs/<revision>`` holds the 40-hex commit a branch or tag
  named; ``<commit>/`` holds each read file's header (``<file>.header``, ``<file>.header.size``) and its
  tensors (``<file>/<tensor>.safetensors``), each beside a ``.sha256`` giving its size and hash.
- ``training/<16 hex>/``: one token stream (``tokens.bin``, ``tokenizer.json``, ``meta.json``), with its
  lock file ``<16 hex>.lock`` beside it.
Inside a marked folder a file is attngeom's when it fits that layout: a cached file only where its
``.sha256`` gives its size, a ref only where it holds a commit, and the temporaries a killed write left.
Only regular files are read, never a link, FIFO or device.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from urllib.parse import unquote

from . import files

MARKER = ".attngeom-entry"
MARKER_TEXT = "made by attngeom: `attngeom cache clear` removes the files attngeom wrote in this folder\n"
REPO_FOLDER = re.compile(r"models--[A-Za-z0-9._-]+")
COMMIT = re.compile(r"[0-9a-f]{40}")
STREAM = re.compile(r"[0-9a-f]{16}")
REF_NAME = re.compile(r"[A-Za-z0-9._~%-]+")
"""A ref file's name: ``quote(revision, safe="")`` writes nothing else."""
DIGEST = re.compile(rb"(\d{1,20}) [0-9a-f]{64}")
TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp(\.[A-Za-z0-9]+)?")
"""``files.atomic_path``/``atomic_dir``'s temporary names (``mkstemp``'s 8 random characters)."""
STREAM_FILES = frozenset({"tokens.bin", "tokenizer.json", "meta.json"})


def mark(folder: Path) -> None:
    """``folder`` (made if missing) marked as one attngeom made, so ``clear`` may remove its files."""
    if not (folder / MARKER).is_file():
        files.write_text(folder / MARKER, MARKER_TEXT)


def lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:
        return None


def is_file(path: Path) -> bool:
    """A regular file, not a link, FIFO or device (nothing else is ever opened here)."""
    found = lstat(path)
    return found is not None and stat.S_ISREG(found.st_mode)


def is_dir(path: Path) -> bool:
    found = lstat(path)
    return found is not None and stat.S_ISDIR(found.st_mode)


def children(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def head(path: Path, limit: int) -> bytes | None:
    """The first ``limit`` + 1 bytes of a regular file (None when unreadable or not a regular file)."""
    if not is_file(path):
        return None
    try:
        with path.open("rb") as handle:
            return handle.read(limit + 1)
    except OSError:
        return None


def total_size(paths: tuple[Path, ...] | list[Path]) -> int:
    return sum(found.st_size for path in paths if (found := lstat(path)) is not None)


def every_file(folder: Path) -> tuple[Path, ...]:
    """Every regular file under ``folder`` (links not followed)."""
    found = []
    for root, _, names in os.walk(folder):
        found += [Path(root, name) for name in names if is_file(Path(root, name))]
    return tuple(sorted(found))


def is_marked(folder: Path) -> bool:
    return is_dir(folder) and is_file(folder / MARKER)


def recorded_size(path: Path) -> int | None:
    """The size a ``.sha256`` beside ``path`` records, if it is one attngeom wrote."""
    text = head(path.with_name(path.name + ".sha256"), 90)
    match = DIGEST.fullmatch(text) if text is not None else None
    return int(match[1]) if match else None


def is_cached_file(path: Path, suffix: str) -> bool:
    """Whether ``path`` is a cached file (``suffix``), its digest, its ``.size`` or a leftover temporary."""
    name = path.name
    if not is_file(path):
        return False
    if TEMPORARY.fullmatch(name):
        return True
    if name.endswith(suffix + ".sha256"):
        return DIGEST.fullmatch(head(path, 90) or b"") is not None
    if suffix == ".header" and name.endswith(".header.size"):
        return re.fullmatch(rb"\d{1,20}", head(path, 20) or b"") is not None
    return name.endswith(suffix) and recorded_size(path) == path.lstat().st_size


def commit_files(folder: Path) -> list[Path]:
    """attngeom's files in a commit folder: headers beside it, tensors one folder down."""
    found = [path for path in children(folder) if is_cached_file(path, ".header")]
    for inner in filter(is_dir, children(folder)):
        found += [path for path in children(inner) if is_cached_file(path, ".safetensors")]
    return found


def refs_of(repo_folder: Path) -> dict[str, tuple[str, Path]]:
    """Revision name → (commit, ref file), for the ref files attngeom wrote (bytes of a commit, no more)."""
    refs = {}
    for ref in children(repo_folder / "refs"):
        text = head(ref, 40)
        if REF_NAME.fullmatch(ref.name) and text is not None and COMMIT.fullmatch(text.decode("latin-1")):
            refs[unquote(ref.name)] = (text.decode(), ref)
    return refs


def repo_folders(root: Path) -> list[Path]:
    return [path for path in children(root) if REPO_FOLDER.fullmatch(path.name) and is_dir(path)]


def stream_folders(root: Path) -> list[Path]:
    """Token stream folders and the temporaries a killed tokenisation left."""
    return [
        path
        for path in children(root)
        if (STREAM.fullmatch(path.name) or TEMPORARY.fullmatch(path.name)) and is_dir(path)
    ]


def stream_files(folder: Path) -> list[Path]:
    return [path for path in children(folder) if path.name in STREAM_FILES and is_file(path)]


def lock_files(root: Path) -> list[Path]:
    """Lock files of token streams: empty, named after a stream."""
    return [
        path
        for path in children(root)
        if path.suffix == ".lock"
        and STREAM.fullmatch(path.stem)
        and is_file(path)
        and not path.stat().st_size
    ]


def stream_key(folder: Path) -> str:
    """The cache key of a token stream folder, or of the temporary it is written in (``.KEY.xxx.tmp``)."""
    return folder.name.lstrip(".").split(".")[0]

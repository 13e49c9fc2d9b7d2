"""List or clear attngeom's own caches (hub byte ranges, training token streams), touching only what
attngeom wrote (``cache_layout`` says how it is recognised).

``clear`` removes, inside folders attngeom marked, the files of its layout, then the folders left empty.
Nothing else is touched: a file someone put there, a link, the ``hub`` and ``training`` folders
themselves, a folder without the marker. A folder of the layout without the marker (written by an attngeom
older than the marker, or by something else) is listed by ``ls`` and ``clear`` with the ``rm -r`` that
removes it, and left. A token stream being written (its lock held) is left too.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import files
from .cache_layout import (
    COMMIT,
    MARKER,
    TEMPORARY,
    children,
    commit_files,
    every_file,
    is_dir,
    is_file,
    is_marked,
    lock_files,
    refs_of,
    repo_folders,
    stream_files,
    stream_folders,
    stream_key,
    total_size,
)
from .errors import InputError


@dataclass(frozen=True)
class Entry:
    """One cached revision of one repository (``refs``: the branch or tag names that point at it).
    ``files``: attngeom's files in it (for an unmarked folder: every file, which ``rm -r`` would remove)."""

    repo_id: str
    commit: str
    refs: tuple[str, ...]
    files: tuple[Path, ...]
    path: Path
    marked: bool

    @property
    def size(self) -> int:
        return total_size(self.files)


@dataclass
class Cleared:
    """What ``clear`` removed (bytes) and the folders it left, each with how to remove it."""

    freed: int = 0
    left: list[str] = field(default_factory=list)


def hub_entries(root: Path | None = None) -> list[Entry]:
    """Every cached repository revision, sorted by repository then commit."""
    root = root or files.cache_dir("hub")
    entries = []
    for repo_folder in repo_folders(root):
        repo_id = repo_folder.name.removeprefix("models--").replace("--", "/")
        marked, refs = is_marked(repo_folder), refs_of(repo_folder)
        for folder in children(repo_folder):
            if not (COMMIT.fullmatch(folder.name) and is_dir(folder)):
                continue
            names = tuple(name for name, (commit, _) in refs.items() if commit == folder.name)
            owned = tuple(commit_files(folder)) if marked else every_file(folder)
            entries.append(Entry(repo_id, folder.name, names, owned, folder, marked))
    return entries


def human(size: int) -> str:
    """``size`` bytes in the largest unit that keeps it ≥ 1 (1024-based, like ``du -h``)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _unmarked_line(folder: Path) -> str:
    owned = every_file(folder)
    return (
        f"left {folder} ({len(owned)} files, {human(total_size(owned))}): it has no {MARKER} (an attngeom "
        f"older than the marker, or something else, made it); check it, then `rm -r '{folder}'`"
    )


def _unmarked_repos(folders: list[Path]) -> list[str]:
    """A line for each repository folder of the layout (with refs or a commit) but no marker."""
    return [
        _unmarked_line(folder)
        for folder in folders
        if not is_marked(folder)
        and any(
            is_dir(path) and (path.name == "refs" or COMMIT.fullmatch(path.name)) for path in children(folder)
        )
    ]


def _unmarked_streams(root: Path) -> list[str]:
    return [
        _unmarked_line(folder)
        for folder in stream_folders(root)
        if not is_marked(folder) and is_file(folder / "meta.json")
    ]


def listing() -> str:
    """The table ``attngeom cache ls`` prints."""
    marked = [e for e in hub_entries() if e.marked]
    rows = [("REPO", "REVISION", "REFS", "FILES", "SIZE")]
    rows += [(e.repo_id, e.commit, ",".join(e.refs) or "-", str(len(e.files)), human(e.size)) for e in marked]
    hub, training = files.cache_dir("hub"), files.cache_dir("training")
    streams = [
        path for folder in stream_folders(training) if is_marked(folder) for path in stream_files(folder)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.append(f"hub: {len(marked)} revisions, {human(sum(e.size for e in marked))} in {hub}")
    lines.append(f"training token streams: {len(streams)} files, {human(total_size(streams))} in {training}")
    return "\n".join(lines + _unmarked_repos(repo_folders(hub)) + _unmarked_streams(training))


def _unlink(paths: list[Path] | tuple[Path, ...]) -> int:
    """``paths`` removed (each checked to lie inside the cache root); the bytes freed."""
    root = files.cache_dir("").resolve()
    freed = 0
    for path in paths:
        if not path.resolve().is_relative_to(root):
            raise InputError(f"{path} is outside the cache {root}; nothing more removed")
        size = total_size([path])
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            freed += size
    return freed


def _prune(folder: Path) -> None:
    """Empty folders under ``folder`` removed, then ``folder`` itself if it holds nothing but its marker."""
    for root, names, _ in os.walk(folder, topdown=False):
        for name in names:
            with contextlib.suppress(OSError):  # not empty, or a link: left
                Path(root, name).rmdir()
    if [path.name for path in children(folder)] == [MARKER] and is_file(folder / MARKER):
        (folder / MARKER).unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


def _clear_repo(folder: Path, entries: list[Entry], whole: bool) -> Cleared:
    """The files of ``entries`` (revisions of the repository in ``folder``) and the refs naming them;
    with ``whole``, every ref and leftover temporary of the repository too."""
    if not is_marked(folder):
        return Cleared(left=_unmarked_repos([folder]))
    names = {name for entry in entries for name in entry.refs}
    stale = [ref for name, (_, ref) in refs_of(folder).items() if whole or name in names]
    if whole:
        stale += [
            path for path in children(folder / "refs") if TEMPORARY.fullmatch(path.name) and is_file(path)
        ]
    freed = _unlink(stale)
    for entry in entries:
        freed += _unlink(entry.files)
        _prune(entry.path)
    with contextlib.suppress(OSError):
        (folder / "refs").rmdir()
    _prune(folder)
    return Cleared(freed)


def _clear_training() -> Cleared:
    """Every marked token stream not being written now, and every lock not held (but an unmarked
    stream's)."""
    root, done = files.cache_dir("training"), Cleared()
    for folder in stream_folders(root):
        if not is_marked(folder):
            continue
        with _unless_busy(root / (stream_key(folder) + ".lock")) as free:
            if not free:
                done.left.append(f"left {folder}: a tokenisation is writing it; clear again when it ends")
                continue
            done.freed += _unlink(stream_files(folder))
            _prune(folder)
    unmarked = {folder.name for folder in stream_folders(root) if not is_marked(folder)}
    for lock in lock_files(root):
        with _unless_busy(lock) as free:
            if free and lock.stem not in unmarked:
                _unlink([lock])
    done.left += _unmarked_streams(root)
    return done


@contextlib.contextmanager
def _unless_busy(lock: Path) -> Iterator[bool]:
    """Whether no process holds the token stream's lock ``lock`` (then held for the block); a lock that
    is not a regular file is never opened."""
    if not is_file(lock):
        yield True
        return
    handle = os.open(lock, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        yield False
        return
    try:
        yield True
    finally:
        os.close(handle)


def clear(repo_id: str | None = None, revision: str | None = None) -> Cleared:
    """Remove attngeom's files from the whole cache, one repository, or one revision (a commit or a ref
    name) of it. Only folders that ``hub_entries`` found are touched, so a name never reaches outside."""
    if repo_id is None:
        if revision is not None:
            raise InputError("--revision needs a REPO; `attngeom cache clear REPO --revision REV`")
        entries = hub_entries()
        done = Cleared()
        for folder in repo_folders(files.cache_dir("hub")):
            part = _clear_repo(folder, [e for e in entries if e.path.parent == folder], whole=True)
            done.freed += part.freed
            done.left += part.left
        training = _clear_training()
        return Cleared(done.freed + training.freed, done.left + training.left)
    matches = [e for e in hub_entries() if e.repo_id == repo_id]
    if not matches:
        raise InputError(f"{repo_id} is not in the cache; `attngeom cache ls` lists what is")
    if revision is not None:
        matches = [e for e in matches if revision in (e.commit, *e.refs)]
        if not matches:
            raise InputError(f"{repo_id}: no cached revision {revision!r}; `attngeom cache ls` lists them")
    return _clear_repo(matches[0].path.parent, matches, whole=revision is None)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("ls", help="size of the cache per repository and revision")
    wipe = actions.add_parser("clear", help="remove the whole cache, one repository or one revision")
    wipe.add_argument("repo", nargs="?", metavar="REPO", help="Hub model id (default: everything)")
    wipe.add_argument("--revision", help="only this commit, branch or tag of REPO")


def run(args: argparse.Namespace) -> int:
    if args.action == "ls":
        print(listing())
        return 0
    done = clear(args.repo, args.revision)
    print(f"freed {human(done.freed)}")
    for line in done.left:
        print(line)
    return 0

"""List or clear attngeom's own caches (hub byte ranges, training token streams).

The hub cache under ``$ATTNGEOM_CACHE/hub`` holds one-tensor files per repository and commit
(``models--org--name/<commit>/...``) and ``refs/<revision>`` files naming commits; the Hub's own cache
tools do not know it. ``attngeom cache ls`` shows its size per repository and revision, ``attngeom cache
clear`` removes all of it, one repository, or one revision of one repository.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from .errors import InputError
from .files import cache_dir

REPO_PREFIX = "models--"


@dataclass(frozen=True)
class Entry:
    """One cached revision of one repository (``refs``: the branch or tag names that point at it)."""

    repo_id: str
    commit: str
    refs: tuple[str, ...]
    files: int
    size: int
    path: Path


def _size(folder: Path) -> tuple[int, int]:
    """Files and bytes under ``folder`` (links are not followed)."""
    files = size = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            files += 1
            size += path.stat().st_size
    return files, size


def _refs(repo_folder: Path) -> dict[str, str]:
    """Revision name → commit, as remembered under ``refs/``."""
    folder = repo_folder / "refs"
    if not folder.is_dir():
        return {}
    return {unquote(ref.name): ref.read_text().strip() for ref in sorted(folder.iterdir()) if ref.is_file()}


def hub_entries(root: Path | None = None) -> list[Entry]:
    """Every cached repository revision, sorted by repository then commit."""
    root = root or cache_dir("hub")
    entries = []
    for repo_folder in sorted(root.glob(REPO_PREFIX + "*")):
        if not repo_folder.is_dir():
            continue
        repo_id = repo_folder.name[len(REPO_PREFIX) :].replace("--", "/")
        refs = _refs(repo_folder)
        for commit_folder in sorted(p for p in repo_folder.iterdir() if p.is_dir() and p.name != "refs"):
            names = tuple(name for name, commit in refs.items() if commit == commit_folder.name)
            files, size = _size(commit_folder)
            entries.append(Entry(repo_id, commit_folder.name, names, files, size, commit_folder))
    return entries


def human(size: int) -> str:
    """``size`` bytes in the largest unit that keeps it ≥ 1 (1024-based, like ``du -h``)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def listing() -> str:
    """The table ``attngeom cache ls`` prints."""
    entries = hub_entries()
    rows = [("REPO", "REVISION", "REFS", "FILES", "SIZE")]
    rows += [(e.repo_id, e.commit, ",".join(e.refs) or "-", str(e.files), human(e.size)) for e in entries]
    training = cache_dir("training")
    train_files, train_size = _size(training) if training.is_dir() else (0, 0)
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    total = sum(e.size for e in entries)
    lines.append(f"hub: {len(entries)} revisions, {human(total)} in {cache_dir('hub')}")
    lines.append(f"training token streams: {train_files} files, {human(train_size)} in {training}")
    return "\n".join(lines)


def _remove(path: Path) -> None:
    """``path`` removed, if it lies inside the cache root (a last check against a hostile name)."""
    root = cache_dir("").resolve()
    if not path.resolve().is_relative_to(root):
        raise InputError(f"{path} is outside the cache {root}; nothing removed")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def clear(repo_id: str | None = None, revision: str | None = None) -> int:
    """Remove the whole cache, one repository, or one revision (a commit or a ref name) of it; the bytes
    freed. Only folders that ``hub_entries`` found are removed, so a name never reaches outside the cache."""
    if repo_id is None:
        if revision is not None:
            raise InputError("--revision needs a REPO; `attngeom cache clear REPO --revision REV`")
        freed = sum(_size(cache_dir(kind))[1] for kind in ("hub", "training") if cache_dir(kind).is_dir())
        for kind in ("hub", "training"):
            _remove(cache_dir(kind))
        return freed
    matches = [e for e in hub_entries() if e.repo_id == repo_id]
    if not matches:
        raise InputError(f"{repo_id} is not in the cache; `attngeom cache ls` lists what is")
    if revision is not None:
        matches = [e for e in matches if revision in (e.commit, *e.refs)]
        if not matches:
            raise InputError(f"{repo_id}: no cached revision {revision!r}; `attngeom cache ls` lists them")
    freed = sum(e.size for e in matches)
    repo_folder = matches[0].path.parent
    if revision is None:
        _remove(repo_folder)
        return freed
    for entry in matches:
        _remove(entry.path)
        for name in entry.refs:
            _remove(repo_folder / "refs" / quote(name, safe=""))
    return freed


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
    freed = clear(args.repo, args.revision)
    print(f"freed {human(freed)}")
    return 0

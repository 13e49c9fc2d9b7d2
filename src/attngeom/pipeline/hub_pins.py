"""The commit each Hub model is scored at: a lock for models (``pins:`` in the config, ``config/pins.yaml``).

A Hub model listed without a ``revision:`` is scored at the commit its ``main`` pointed to when the
workflow first resolved it; that commit is written to the pin file, and later runs read it from there, so
two runs a month apart score the same weights under one id. A moved ``main`` changes nothing until asked
(``--config update_pins=True``: every such model is resolved again, and a new commit reruns its jobs). A
``revision:`` in the config is the user's own pin and is used as written. Resolving asks the Hub for the
``X-Repo-Commit`` of one file (a HEAD request), in the main Snakemake process when the DAG is built (never
offline: ``HF_HUB_OFFLINE``); the file is written when the run starts (the workflow's ``onstart``), so a dry
run shows the commits and writes nothing. A model that could not be resolved keeps reading ``main``, and
its records still carry the commit they were computed from (``revision``).

Resolving is done once: the first request goes alone, and a Hub that gives it no answer (no network, a
proxy refusing) leaves every model unresolved in one line instead of one wait per model (151 for the
paper's config); the commits a run resolved and did not record yet (a dry run) are kept in a cache beside
Snakemake's own state (``.snakemake/attngeom/resolved_pins.yaml``), so the next dry run or the real run asks
the Hub for none of them again.

Light on purpose (no torch, pandas or pyarrow), as the DAG's modules must be; the pin file is checked entry
by entry before it is used, like a zoo's pinned list.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from ..errors import InputError
from ..files import write_text
from .pinned import REPO_ID, SHA
from .registry import Model

HEADER = (
    "# The commit each Hub model of this folder's configs is scored at, written by attngeom's workflow the first\n"
    "# time it resolved the model's main branch; later runs read it (a lock for models). Resolve them again:\n"
    "# snakemake ... --config update_pins=True. A model's own `revision:` in a config overrides its pin.\n"
)
CACHE_HEADER = (
    "# Commits of Hub models' main branches that attngeom's workflow resolved and had not yet recorded in a pin\n"
    "# file (a dry run writes no pin file): read instead of asking the Hub again. Safe to delete.\n"
)
RESOLVERS = 8
"""Hub requests in flight at once while resolving."""


def read_pins(path: Path) -> dict[str, str]:
    """Hub id → commit of the pin file (empty if there is none), every entry checked; anything but a regular
    file in its place (a FIFO would block the DAG's build for ever, a folder or a device) is refused."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise InputError(f"config: pins: {path} cannot be read ({err.strerror}); fix or remove it") from None
    if not stat.S_ISREG(mode):
        raise InputError(
            f"config: pins: {path} is not a regular file (a FIFO, folder or device); remove it, or point "
            "pins: at a file"
        )
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError(f"config: pins: {path} cannot be read as YAML ({first}); fix or remove it") from None
    if document is None:
        return {}
    pins = document.get("models") if isinstance(document, dict) else None
    if not isinstance(pins, dict):
        raise InputError(
            f"config: pins: {path} holds no `models:` mapping of Hub id to commit; fix or remove it"
        )
    for repo, commit in pins.items():
        if not (isinstance(repo, str) and REPO_ID.fullmatch(repo)):
            raise InputError(f"config: pins: {path}: {str(repo)[:80]!r} is not a Hub id such as owner/name")
        if not (isinstance(commit, str) and SHA.fullmatch(commit)):
            raise InputError(
                f"config: pins: {path}: {repo}: {str(commit)[:80]!r} is not a 40-digit commit sha"
            )
    return dict(pins)


def record_pins(path: Path, pinned: dict[str, str]) -> None:
    """``pinned`` added to the pin file (read again first, so a pin written meanwhile is kept), sorted by
    id, written whole or not at all."""
    pins = {**read_pins(path), **pinned}
    write_text(path, HEADER + yaml.safe_dump({"models": dict(sorted(pins.items()))}, sort_keys=False))


def hub_commit(repo_id: str) -> str:
    """The commit ``main`` of ``repo_id`` points at, from the Hub's answer to a HEAD of its config.json (a
    repository without one answers 404 with the commit all the same); a server naming anything other than
    a commit sha is refused."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError

    try:
        commit = get_hf_file_metadata(hf_hub_url(repo_id, "config.json", revision="main")).commit_hash
    except EntryNotFoundError as err:
        commit = err.response.headers.get("X-Repo-Commit") if err.response is not None else None
    if not (isinstance(commit, str) and SHA.fullmatch(commit)):
        raise InputError(f"{repo_id}: the Hub named no commit sha for main ({str(commit)[:60]!r})")
    return commit


def _answered(err: Exception) -> bool:
    """Whether ``err`` is the Hub's answer about one repository (an HTTP status, a commit that is not a
    sha), rather than no answer at all (no network, a timeout, offline mode)."""
    from huggingface_hub.errors import HfHubHTTPError

    return isinstance(err, (HfHubHTTPError, InputError))


def _resolve_all(
    repos: Iterable[str], resolve: Callable[[str], str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(resolved id → commit, failed id → why): the first alone, then ``RESOLVERS`` at a time, unless the
    first got no answer from the Hub, which the others would not get either."""
    repos = sorted(set(repos))

    def attempt(repo: str) -> tuple[str, str | None, str | None]:
        try:
            return repo, resolve(repo), None
        except Exception as err:  # any failure leaves the model unpinned, named in one line
            why = (str(err).strip().splitlines() or [type(err).__name__])[0]
            if repo == repos[0] and not _answered(err):
                raise _Unreachable(why) from err
            return repo, None, why

    try:
        outcomes = [attempt(repos[0])] if repos else []
    except _Unreachable as err:
        return {}, dict.fromkeys(repos, f"the Hub did not answer ({err})")
    with ThreadPoolExecutor(max(1, min(RESOLVERS, len(repos) - 1))) as pool:
        outcomes += pool.map(attempt, repos[1:])
    return {r: c for r, c, _ in outcomes if c}, {r: why for r, c, why in outcomes if why}


class _Unreachable(Exception):
    """The first request got no answer from the Hub."""


@dataclasses.dataclass(frozen=True)
class Pinning:
    """What ``pin_models`` did: the models with their commits, what it pinned anew, what it could not."""

    models: dict[str, Model]
    pinned: dict[str, str]
    """Hub id → commit, new to the pin file (or changed by an update): to be recorded."""
    unresolved: dict[str, str]
    """Hub id → why it reads main unpinned this run."""
    resolved: dict[str, str]
    """Hub id → commit, asked of the Hub by this call: for the cache (``remember_resolved``)."""


def pin_models(
    models: dict[str, Model],
    path: Path,
    *,
    resolve_now: bool,
    update: bool = False,
    resolve: Callable[[str], str] = hub_commit,
    cache: Path | None = None,
) -> Pinning:
    """``models`` with each unpinned Hub model's ``revision`` set to its commit: the pin file's, else the
    cache's (resolved by an earlier run that did not record it), or, where ``resolve_now`` (the main
    process, online), the Hub's for those neither holds (for all of them with ``update``). Nothing is
    written here: ``record_pins(path, pinning.pinned)`` when the run starts."""
    pins = read_pins(path)
    cached = {} if update else _read_cache(cache)
    unpinned = {m.location for m in models.values() if m.kind == "hub" and not m.revision}
    wanted = unpinned if update else unpinned - set(pins) - set(cached)
    if resolve_now and wanted:
        resolved, failed = _resolve_all(wanted, resolve)
    else:
        resolved, failed = {}, dict.fromkeys(wanted - set(pins), "not resolved offline")
    found = {repo: commit for repo, commit in cached.items() if repo in unpinned and repo not in pins}
    changed = {repo: commit for repo, commit in {**found, **resolved}.items() if pins.get(repo) != commit}
    commits = {**pins, **changed}
    with_commits = {
        slug: dataclasses.replace(m, revision=commits[m.location])
        if m.kind == "hub" and not m.revision and m.location in commits
        else m
        for slug, m in models.items()
    }
    unresolved = {r: why for r, why in failed.items() if r not in commits}
    return Pinning(with_commits, changed, unresolved, resolved)


def _read_cache(cache: Path | None) -> dict[str, str]:
    """The cache's commits; a damaged cache is only a cache: resolved again."""
    try:
        return read_pins(cache) if cache else {}
    except InputError:
        return {}


def remember_resolved(cache: Path, resolved: dict[str, str]) -> None:
    """``resolved`` added to the cache of commits resolved and not recorded yet (written whole or not at
    all), so that the next run of the DAG asks the Hub for none of them again."""
    write_text(
        cache,
        CACHE_HEADER + yaml.safe_dump({"models": dict(sorted({**_read_cache(cache), **resolved}.items()))}),
    )


def offline() -> bool:
    """Whether huggingface_hub is told not to reach the Hub (``HF_HUB_OFFLINE``)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}

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


def _resolve_all(
    repos: Iterable[str], resolve: Callable[[str], str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(resolved id → commit, failed id → why), asking ``RESOLVERS`` at a time."""
    repos = sorted(set(repos))

    def attempt(repo: str) -> tuple[str, str | None, str | None]:
        try:
            return repo, resolve(repo), None
        except Exception as err:  # any failure leaves the model unpinned, named in one line
            return repo, None, (str(err).strip().splitlines() or [type(err).__name__])[0]

    with ThreadPoolExecutor(max(1, min(RESOLVERS, len(repos)))) as pool:
        outcomes = list(pool.map(attempt, repos))
    return {r: c for r, c, _ in outcomes if c}, {r: why for r, c, why in outcomes if why}


@dataclasses.dataclass(frozen=True)
class Pinning:
    """What ``pin_models`` did: the models with their commits, what it pinned anew, what it could not."""

    models: dict[str, Model]
    pinned: dict[str, str]
    """Hub id → commit, new to the pin file (or changed by an update): to be recorded."""
    unresolved: dict[str, str]
    """Hub id → why it reads main unpinned this run."""


def pin_models(
    models: dict[str, Model],
    path: Path,
    *,
    resolve_now: bool,
    update: bool = False,
    resolve: Callable[[str], str] = hub_commit,
) -> Pinning:
    """``models`` with each unpinned Hub model's ``revision`` set to its commit: the pin file's, or, where
    ``resolve_now`` (the main process, online), the Hub's for those the file lacks (for all of them with
    ``update``). Nothing is written here: ``record_pins(path, pinning.pinned)`` when the run starts."""
    pins = read_pins(path)
    unpinned = {m.location for m in models.values() if m.kind == "hub" and not m.revision}
    wanted = unpinned if update else unpinned - set(pins)
    if resolve_now and wanted:
        resolved, failed = _resolve_all(wanted, resolve)
    else:
        resolved, failed = {}, dict.fromkeys(wanted - set(pins), "not resolved offline")
    changed = {repo: commit for repo, commit in resolved.items() if pins.get(repo) != commit}
    commits = {**pins, **changed}
    with_commits = {
        slug: dataclasses.replace(m, revision=commits[m.location])
        if m.kind == "hub" and not m.revision and m.location in commits
        else m
        for slug, m in models.items()
    }
    return Pinning(with_commits, changed, {r: why for r, why in failed.items() if r not in commits})


def offline() -> bool:
    """Whether huggingface_hub is told not to reach the Hub (``HF_HUB_OFFLINE``)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}

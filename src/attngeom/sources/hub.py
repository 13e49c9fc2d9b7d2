"""Hugging Face Hub ids: resolve the revision, then read only the q/k bytes (by range) or whole shards.

``huggingface_hub`` does the Hub's part: URLs, endpoint (``HF_ENDPOINT``), tokens, offline mode
(``HF_HUB_OFFLINE``), its cache (``HF_HOME``) for config, index and whole-file downloads. The revision is
resolved first with a few quick tries (``CONNECT_TRIES`` × ``CONNECT_TIMEOUT_S``), so an unreachable Hub
is reported in seconds, or the cached copy used; byte ranges are cached under
``attngeom.files.cache_dir("hub")``. Every failure is one line saying what to do: 401 (no or a refused
token) and 403 (a token without access) differ, as do a missing repository, revision and file.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx2
from huggingface_hub import (
    constants,
    get_hf_file_metadata,
    get_token,
    hf_hub_download,
    hf_hub_url,
    try_to_load_from_cache,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, validate_repo_id

from .. import files, network
from ..cache_layout import mark
from ..errors import InputError
from ..version import __version__
from . import prefetch, ranged
from .base import (
    BIN_INDEX,
    BIN_SINGLE,
    SAFETENSORS_INDEX,
    SAFETENSORS_SINGLE,
    ModelConfig,
    WeightSource,
    index_parameter_count,
    one_line,
    read_index,
)
from .config import load_config
from .gguf import from_gguf
from .local import bin_source, load_bin, safetensors_names, safetensors_source

logger = logging.getLogger(__name__)

CONNECT_TRIES = 2
"""Attempts to reach the Hub when resolving a revision, before the cache is used or the failure named
(``attngeom.network``'s retry policy, with this count)."""
CONNECT_TIMEOUT_S = 2.0

COMMIT = re.compile(r"[0-9a-f]{40}")
"""A commit as the Hub names it. Every commit a server sends, or a cache remembers, is checked against it
before it names a file or folder: a hostile endpoint's ``../../x`` would otherwise be a path."""

HUB_GGUF = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)/(?P<file>[^/].*\.gguf)")
"""``org/name/path/in/repo.gguf``: a GGUF file in a Hub repository."""


class MissingFile(InputError):
    """The file is not in the repository at that revision."""


class Unreachable(Exception):
    """The Hub did not answer (connection refused or timed out, or 5xx) within the quick tries."""


def hub_error(
    repo_id: str, filename: str, revision: str | None, err: Exception, token: str | None
) -> InputError:
    """One line saying what went wrong with a Hub request and what to do about it."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    token_set = bool(token) or get_token() is not None
    page = f"{constants.ENDPOINT}/{repo_id}"
    if isinstance(err, (OfflineModeIsEnabled, LocalEntryNotFoundError)):
        return InputError(
            f"{repo_id}: {filename} is not in the local cache and the Hub cannot be reached "
            "(offline, or HF_HUB_OFFLINE set?); run once online or pass a local path"
        )
    if isinstance(err, RevisionNotFoundError):
        return InputError(f"{repo_id}: no revision {revision!r}; check --revision against {page}")
    if isinstance(err, (RemoteEntryNotFoundError, EntryNotFoundError)):
        return MissingFile(f"{repo_id}: no file {filename} at revision {revision or 'main'}")
    gated = isinstance(err, GatedRepoError)
    if status == 403:
        return InputError(
            f"{repo_id}: the token has no access to {filename} (HTTP 403{', gated repository' if gated else ''}); "
            f"request access on {page} or use a token of an account that has it"
        )
    if isinstance(err, RepositoryNotFoundError) and not gated:
        hint = "or the token cannot see it" if token_set else "if it is private, set HF_TOKEN"
        return InputError(f"{repo_id}: no such repository on the Hub ({hint})")
    if status == 401 and token_set:
        return InputError(
            f"{repo_id}: the Hub refused the token (HTTP 401): it is invalid or expired; "
            "set HF_TOKEN (or run `hf auth login`) with a valid one"
        )
    if gated or status == 401:
        what = "gated repository" if gated else f"{filename} needs a token"
        return InputError(
            f"{repo_id}: {what} (HTTP 401); set HF_TOKEN (or run `hf auth login`) with a token of an "
            f"account that has accepted its terms on {page}"
        )
    if status is not None:  # the server's own words stay out: a hostile one could say anything
        return InputError(
            f"{repo_id}: the Hub answered HTTP {status} for {filename}; retry later (or check HF_ENDPOINT)"
        )
    return InputError(f"{repo_id}: request for {filename} failed: {one_line(err)}")


def _repo_folder(repo_id: str) -> Path:
    return files.cache_dir("hub") / ("models--" + repo_id.replace("/", "--"))


def _remembered(ref: Path) -> str | None:
    """The commit a ref file remembers; None for anything this module did not write (a link, a FIFO,
    bytes that are not a commit: ignored, and overwritten when the Hub answers)."""
    if not ref.is_file() or ref.is_symlink():
        return None
    try:
        with ref.open("rb") as handle:
            text = handle.read(41).decode("latin-1").strip()
    except OSError:
        return None
    return text if COMMIT.fullmatch(text) else None


@dataclass
class Repo:
    """A Hub repository at one commit (``None`` when unknown offline); ``unreachable`` says why the Hub
    is not asked (offline, or it did not answer), so only cached files are used."""

    repo_id: str
    revision: str | None
    token: str | None
    commit: str | None
    unreachable: str | None = None

    @classmethod
    def resolve(cls, repo_id: str, filename: str, revision: str | None, token: str | None) -> Repo:
        """The commit ``revision`` points at, asked of the Hub by a HEAD of ``filename``, remembered under
        the cache so an offline re-run knows it."""
        try:
            validate_repo_id(repo_id)
        except HFValidationError as err:
            raise InputError(f"{repo_id}: neither an existing path nor a valid Hub model id") from err
        if revision is not None and (not revision.strip() or revision.strip(".") == ""):
            raise InputError(f"{repo_id}: revision {revision!r} is not a branch, tag or commit")
        ref = _repo_folder(repo_id) / "refs" / quote(revision or "main", safe="")
        remembered = _remembered(ref)
        if revision and COMMIT.fullmatch(revision):
            remembered = revision
        if constants.is_offline_mode():
            return cls(repo_id, revision, token, remembered, "HF_HUB_OFFLINE is set")
        try:
            commit = _head_commit(repo_id, filename, revision, token)
        except Unreachable as err:
            return cls(repo_id, revision, token, remembered, str(err))
        except (HfHubHTTPError, OfflineModeIsEnabled) as err:
            raise hub_error(repo_id, filename, revision, err, token) from err
        if commit != remembered or not ref.is_file():
            mark(_repo_folder(repo_id))
            files.write_text(ref, commit)
        return cls(repo_id, revision, token, commit)

    def download(self, filename: str) -> Path:
        """One file of the repository (huggingface_hub's cache); only from the cache when unreachable."""
        if self.unreachable and self.commit:
            known = try_to_load_from_cache(self.repo_id, filename, revision=self.commit)
            if known is not None and not isinstance(known, str):  # cached as not in the repository
                raise MissingFile(f"{self.repo_id}: no file {filename} at revision {self.commit}")
        _check_every_commit_header()
        try:
            with network.transfer(f"{self.repo_id}/{filename}"):
                return Path(
                    hf_hub_download(
                        self.repo_id,
                        filename,
                        revision=self.commit or self.revision,
                        token=self.token,
                        local_files_only=self.unreachable is not None,
                    )
                )
        except LocalEntryNotFoundError as err:
            if self.unreachable and not constants.is_offline_mode():
                raise InputError(
                    f"{self.repo_id}: cannot reach the Hub at {constants.ENDPOINT} ({self.unreachable}) and "
                    f"{filename} is not in the local cache; check the network (or HF_ENDPOINT) and retry"
                ) from err
            raise hub_error(self.repo_id, filename, self.revision, err, self.token) from err
        except (HfHubHTTPError, EntryNotFoundError, OfflineModeIsEnabled) as err:
            raise hub_error(self.repo_id, filename, self.commit or self.revision, err, self.token) from err

    def optional(self, filename: str) -> Path | None:
        try:
            return self.download(filename)
        except MissingFile:
            return None

    def remote(self, filename: str) -> ranged.RemoteFile:
        """``filename`` at this commit, to be read by range."""
        assert self.commit is not None
        mark(_repo_folder(self.repo_id))
        return ranged.RemoteFile(
            hf_hub_url(self.repo_id, filename, revision=self.commit),
            build_hf_headers(token=self.token, library_name="attngeom", library_version=__version__),
            _repo_folder(self.repo_id) / self.commit / quote(filename, safe=""),
            f"{self.repo_id}/{filename}@{self.commit[:8]}",
            lambda err: hub_error(self.repo_id, filename, self.commit, err, self.token),
            tries=1 if self.unreachable else network.TRIES,
        )

    def cached_header(self, filename: str) -> bool:
        return self.commit is not None and self.remote(filename).header_path.is_file()


def _refuse_hostile_commit(response: httpx2.Response) -> None:
    """An answer whose ``X-Repo-Commit`` is not a commit hash (huggingface_hub would make it a path)."""
    commit = response.headers.get("X-Repo-Commit")
    if commit is not None and not COMMIT.fullmatch(commit):
        raise InputError(
            f"{response.request.url.path}: the server at {constants.ENDPOINT} names commit {commit[:60]!r}, "
            "not a 40-hex commit hash; check HF_ENDPOINT"
        )


def _check_every_commit_header() -> None:
    """huggingface_hub's client refuses every answer naming something other than a commit: a server that
    answered ``_head_commit`` honestly cannot then make ``hf_hub_download`` write outside its cache."""
    client = get_session()
    hooks = client.event_hooks
    if _refuse_hostile_commit not in hooks["response"]:
        hooks["response"] = [*hooks["response"], _refuse_hostile_commit]
        client.event_hooks = hooks


def _head_commit(repo_id: str, filename: str, revision: str | None, token: str | None) -> str:
    """The commit of ``revision``, from the Hub's answer to a HEAD of ``filename`` (quick bounded tries)."""
    url = hf_hub_url(repo_id, filename, revision=revision)

    def ask() -> str | None:
        timeout = opened.timeout(silence=constants.HF_HUB_ETAG_TIMEOUT, connect=CONNECT_TIMEOUT_S)
        try:
            return get_hf_file_metadata(url, token=token, timeout=timeout).commit_hash
        except HfHubHTTPError as err:
            if err.response is not None:
                network.transient_status(err.response.status_code)
            raise

    with network.transfer(f"{repo_id}/{filename}") as opened:
        try:
            commit = network.with_retries(opened, ask, CONNECT_TRIES)
        except network.GaveUp as err:
            raise Unreachable(err.reason) from None
    if not commit:
        raise InputError(f"{repo_id}: the Hub did not say which commit {revision or 'main'} is")
    if not COMMIT.fullmatch(commit):
        raise InputError(
            f"{repo_id}: the server at {constants.ENDPOINT} names commit {commit[:60]!r} for "
            f"{revision or 'main'}, not a 40-hex commit hash; check HF_ENDPOINT"
        )
    return commit


def from_hub(
    repo_id: str, *, revision: str | None = None, token: str | None = None, full_download: bool = False
) -> WeightSource:
    """A Hub model read by HTTP range, or with ``full_download`` by downloading whole shards lazily, only
    those holding a requested tensor (also the way for ``.bin`` checkpoints)."""
    repo = Repo.resolve(repo_id, "config.json", revision, token)
    config_file = repo.optional("config.json")
    if config_file is None:
        raise InputError(f"{repo_id}: the repository has no config.json")
    config = load_config(config_file, repo_id)
    if repo.commit is None:
        repo.commit = _commit_of(config_file)
    index = repo.optional(SAFETENSORS_INDEX)
    if not full_download and repo.commit:
        source = _by_range(repo, config, index)
        if source is not None:
            return source
    common = {"model_id": repo_id, "revision": repo.commit, "locate": repo.download}
    if index is not None:
        weight_map = read_index(index, repo_id)
        n_params = index_parameter_count(index)
        return safetensors_source(
            repo_id, config, weight_map, n_params=n_params, count_params=False, **common
        )
    single = repo.optional(SAFETENSORS_SINGLE)
    if single is not None:
        weight_map = dict.fromkeys(safetensors_names(single), SAFETENSORS_SINGLE)
        return safetensors_source(repo_id, config, weight_map, **common)
    if not full_download:
        logger.warning(
            "%s: no safetensors weights; a PyTorch .bin checkpoint cannot be read in parts, "
            "downloading whole files",
            repo_id,
        )
    index = repo.optional(BIN_INDEX)
    if index is not None:
        return bin_source(repo_id, config, read_index(index, repo_id), count_params=False, **common)
    single = repo.optional(BIN_SINGLE)
    if single is not None:
        return bin_source(repo_id, config, dict.fromkeys(load_bin(single), BIN_SINGLE), **common)
    raise InputError(
        f"{repo_id}: no model.safetensors or pytorch_model.bin (sharded or not) in the repository"
    )


def _commit_of(snapshot_file: Path) -> str | None:
    """The commit a cached file belongs to (huggingface_hub lays files out as snapshots/<commit>/...)."""
    parent = snapshot_file.parent
    return parent.name if parent.parent.name == "snapshots" and COMMIT.fullmatch(parent.name) else None


def _by_range(repo: Repo, config: ModelConfig, index: Path | None) -> WeightSource | None:
    """The checkpoint's safetensors read by range; None when there are none, or when the Hub cannot be
    reached and no range was ever cached (then huggingface_hub's cache may still hold whole files)."""
    common = {"model_id": repo.repo_id, "revision": repo.commit}
    if index is not None:
        weight_map = read_index(index, repo.repo_id)
        shards = sorted(set(weight_map.values()))
        if repo.unreachable and not any(repo.cached_header(shard) for shard in shards):
            return None
        files_of = {shard: repo.remote(shard) for shard in shards}
        return prefetch.safetensors_source(
            files_of, weight_map, config, n_params=index_parameter_count(index), **common
        )
    if repo.unreachable and not repo.cached_header(SAFETENSORS_SINGLE):
        return None
    single = repo.remote(SAFETENSORS_SINGLE)
    try:
        ranged.read_safetensors_table(single)
    except MissingFile:
        return None
    n_params = sum(math.prod(entry.shape) for entry in single.table.values())
    weight_map = dict.fromkeys(single.table, SAFETENSORS_SINGLE)
    return prefetch.safetensors_source(
        {SAFETENSORS_SINGLE: single}, weight_map, config, n_params=n_params, **common
    )


def gguf_from_hub(spec: str, *, revision: str | None, token: str | None, full_download: bool) -> WeightSource:
    """``org/name/file.gguf`` on the Hub: its header and q/k tensors by range, or the whole file."""
    match = HUB_GGUF.fullmatch(spec)
    if match is None:
        raise InputError(f"{spec}: not a local file, nor a Hub GGUF file written as org/name/file.gguf")
    filename = match["file"]
    repo = Repo.resolve(match["repo"], filename, revision, token)
    if full_download or repo.commit is None or (repo.unreachable and not repo.cached_header(filename)):
        path = repo.download(filename)
        source = from_gguf(path)
        source.description = spec
        source.revision = _commit_of(path) or revision
    else:
        source = prefetch.gguf_source(repo.remote(filename), model_id=spec, revision=repo.commit)
    source.model_id = spec
    return source

"""Hugging Face Hub ids: download config.json, the index, and only the shards that hold q/k tensors.

Uses ``huggingface_hub`` for everything (HF_HOME cache, HF_HUB_OFFLINE, HF_ENDPOINT, revisions, tokens).
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
)

from . import remote
from .errors import InputError
from .sources import (
    BIN_INDEX,
    BIN_SINGLE,
    SAFETENSORS_INDEX,
    SAFETENSORS_SINGLE,
    WeightSource,
    bin_source,
    bin_state_dict,
    index_parameter_count,
    load_config,
    read_index,
    safetensors_names,
    safetensors_source,
)


def _download(repo_id: str, filename: str, revision: str | None, token: str | None) -> Path:
    """One file of the repository, from the cache when it is there; hub errors become one-line InputErrors
    (``remote.MissingFile`` when the file is not in the repository)."""
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, token=token))
    except HFValidationError as err:
        raise InputError(f"{repo_id}: neither an existing path nor a valid Hub model id") from err
    except (HfHubHTTPError, EntryNotFoundError, OfflineModeIsEnabled) as err:
        raise remote.hub_error(repo_id, filename, revision, err) from err


def _optional(repo_id: str, filename: str, revision: str | None, token: str | None) -> Path | None:
    try:
        return _download(repo_id, filename, revision, token)
    except remote.MissingFile:
        return None


def _commit_of(snapshot_file: Path) -> str | None:
    """The commit hash a cached file belongs to (the cache lays files out as snapshots/<commit>/...)."""
    parent = snapshot_file.parent
    return parent.name if parent.parent.name == "snapshots" else None


def from_hub(
    repo_id: str, *, revision: str | None = None, token: str | None = None, full_download: bool = False
) -> WeightSource:
    """A hub model read by HTTP range (remote.py), or with ``full_download`` by downloading whole shards
    lazily, only those holding a requested tensor (also the fallback for ``.bin`` checkpoints)."""
    config_file = _optional(repo_id, "config.json", revision, token)
    if config_file is None:
        raise InputError(f"{repo_id}: the repository has no config.json")
    config = load_config(config_file, repo_id)
    commit = _commit_of(config_file) or revision

    def fetch(filename: str) -> Path:
        return _download(repo_id, filename, commit, token)

    index = _optional(repo_id, SAFETENSORS_INDEX, commit, token)
    if not full_download:
        source = remote.safetensors_source(repo_id, config, commit, token, index)
        if source is not None:
            return source
    if index is not None:
        weight_map = read_index(index, repo_id)
        return safetensors_source(
            repo_id,
            config,
            weight_map,
            fetch,
            model_id=repo_id,
            revision=commit,
            n_params=index_parameter_count(index),
            count_params=False,
        )
    single = _optional(repo_id, SAFETENSORS_SINGLE, commit, token)
    if single is not None:
        weight_map = dict.fromkeys(safetensors_names(single), SAFETENSORS_SINGLE)
        return safetensors_source(repo_id, config, weight_map, fetch, model_id=repo_id, revision=commit)
    if not full_download:
        remote.warn_full_download(repo_id)
    index = _optional(repo_id, BIN_INDEX, commit, token)
    if index is not None:
        weight_map = read_index(index, repo_id)
        return bin_source(
            repo_id, config, weight_map, fetch, model_id=repo_id, revision=commit, count_params=False
        )
    single = _optional(repo_id, BIN_SINGLE, commit, token)
    if single is not None:
        names = bin_state_dict(single).keys()
        return bin_source(
            repo_id, config, dict.fromkeys(names, BIN_SINGLE), fetch, model_id=repo_id, revision=commit
        )
    raise InputError(
        f"{repo_id}: no model.safetensors or pytorch_model.bin (sharded or not) in the repository"
    )

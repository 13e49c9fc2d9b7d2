"""Weights on this machine: a ``save_pretrained`` directory (safetensors or PyTorch ``.bin``) or a live module.

safetensors files are opened with ``safe_open`` for each tensor read (memory-mapped; the handle is closed
again at once). ``.bin`` files are read with ``torch.load(weights_only=True)``: nothing but tensors is
ever unpickled; zip-format files are memory-mapped, legacy (pre-1.6) files are read whole.
"""

from __future__ import annotations

import functools
import math
import os
import re
import stat
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import InputError, load_refusal
from .base import (
    BIN_INDEX,
    BIN_SINGLE,
    SAFETENSORS_INDEX,
    SAFETENSORS_SINGLE,
    ModelConfig,
    WeightSource,
    one_line,
    read_index,
)
from .config import load_config


def from_directory(path: Path) -> WeightSource:
    """A ``save_pretrained`` directory: safetensors (sharded or not) or PyTorch ``.bin`` weights, the files
    transformers would read: the index, else ``model.safetensors``, else the folder's other safetensors
    files (a tensor in two of them is an error), else the ``.bin`` index or ``pytorch_model.bin``."""
    description = str(path)
    model_id, revision = label_of(path)
    config_file = regular_file(path / "config.json", description)
    if config_file is None:
        raise InputError(f"{description}: no config.json; pass a directory written by save_pretrained")
    config = load_config(config_file, description)

    def locate(shard: str) -> Path:
        file = regular_file(path / shard, description)
        if file is None:
            raise InputError(f"{description}: no {shard}, which its index lists; re-download the model")
        return file

    common = {"model_id": model_id, "revision": revision, "locate": locate}
    if regular_file(path / SAFETENSORS_INDEX, description):
        weight_map = read_index(path / SAFETENSORS_INDEX, description)
        return safetensors_source(description, config, weight_map, **common)
    if regular_file(path / SAFETENSORS_SINGLE, description):
        names = safetensors_names(path / SAFETENSORS_SINGLE)
        return safetensors_source(description, config, dict.fromkeys(names, SAFETENSORS_SINGLE), **common)
    singles = [file for file in sorted(path.glob("*.safetensors")) if regular_file(file, description)]
    if singles:
        weight_map: dict[str, str] = {}
        for file in singles:
            for name in safetensors_names(file):
                if name in weight_map:
                    raise InputError(
                        f"{description}: tensor {name} is in both {weight_map[name]} and {file.name}; "
                        "remove the stale file (or write a model.safetensors.index.json)"
                    )
                weight_map[name] = file.name
        return safetensors_source(description, config, weight_map, **common)
    if regular_file(path / BIN_INDEX, description):
        weight_map = read_index(path / BIN_INDEX, description)
        return bin_source(description, config, weight_map, **common)
    if regular_file(path / BIN_SINGLE, description):
        names = load_bin(path / BIN_SINGLE).keys()
        return bin_source(description, config, dict.fromkeys(names, BIN_SINGLE), **common)
    raise InputError(f"{description}: no weights (*.safetensors or pytorch_model.bin) next to config.json")


def regular_file(file: Path, description: str) -> Path | None:
    """``file`` if it is a regular file (or a link to one), None if nothing is there; anything else (a
    FIFO, a device, a folder) is an error: reading it could block forever."""
    try:
        mode = file.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InputError(f"{description}: cannot read {file.name} ({err.strerror})") from err
    if not stat.S_ISREG(mode):
        raise InputError(f"{file}: not a regular file; model files must be plain files")
    return file


HUB_SNAPSHOT = re.compile(r"/models--(?P<repo>[^/]+)/snapshots/(?P<commit>[0-9a-f]{40})")
"""A folder of huggingface_hub's cache: ``.../models--org--name/snapshots/<commit>``."""


def label_of(path: Path) -> tuple[str, str | None]:
    """The name results carry for a local model, and its revision where known: a Hub cache snapshot is
    its repository and commit; anything else is the file or folder name as the user reached it (the
    name of a symlink, not of its target)."""
    absolute = Path(os.path.abspath(path))  # "." and ".." resolved by name, symlinks kept
    match = HUB_SNAPSHOT.search(absolute.as_posix())
    if match and absolute.as_posix().endswith(match[0]):
        return match["repo"].replace("--", "/"), match["commit"]
    return absolute.name, None


def _safetensors_error(file: Path, err: Exception) -> InputError:
    return InputError(f"{file}: corrupted or truncated safetensors file ({one_line(err)}); re-download it")


def safetensors_names(file: Path) -> list[str]:
    """The tensor names in a safetensors file (its header is checked against the file's size)."""
    try:
        with safe_open(file, framework="pt") as handle:
            return list(handle.keys())
    except (SafetensorError, OSError) as err:
        raise _safetensors_error(file, err) from err


def _parameter_count(file: Path) -> int:
    try:
        with safe_open(file, framework="pt") as handle:
            return sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    except (SafetensorError, OSError) as err:
        raise _safetensors_error(file, err) from err


def safetensors_source(
    description: str,
    config: ModelConfig,
    weight_map: dict[str, str],
    *,
    locate: Callable[[str], Path],
    model_id: str,
    revision: str | None = None,
    n_params: int | None = None,
    count_params: bool = True,
) -> WeightSource:
    """Tensors from safetensors shards; ``locate`` turns a shard name into a local file (downloading it
    if need be, once). With ``count_params`` (and no ``n_params``) every shard's header is read to count
    them."""
    locate = functools.cache(locate)

    def load(name: str) -> torch.Tensor:
        file = locate(weight_map[name])
        try:
            with safe_open(file, framework="pt") as handle:
                return handle.get_tensor(name)
        except (SafetensorError, OSError) as err:
            raise _safetensors_error(file, err) from err

    if n_params is None and count_params:
        n_params = sum(_parameter_count(locate(shard)) for shard in sorted(set(weight_map.values())))
    return WeightSource(
        model_id=model_id,
        description=description,
        config=config,
        names=weight_map,
        load=load,
        revision=revision,
        n_params=n_params,
    )


def load_bin(file: Path) -> dict[str, torch.Tensor]:
    """A ``.bin`` state dict, weights only; memory-mapped where the file is in torch's zip format."""
    try:
        with warnings.catch_warnings():  # torch's notes on a refused pickle come before our one line
            warnings.simplefilter("ignore")
            state = torch.load(file, weights_only=True, mmap=zipfile.is_zipfile(file), map_location="cpu")
    except Exception as err:  # torch raises many types for corrupt files and refused pickles
        raise InputError(
            f"{file}: cannot be read as a weights-only PyTorch checkpoint ({load_refusal(err)}); "
            "convert it to safetensors where it was made, or re-download it if it is damaged"
        ) from err
    if not isinstance(state, dict):
        raise InputError(f"{file}: holds a {type(state).__name__}, not a state dict; save model.state_dict()")
    return state


def bin_source(
    description: str,
    config: ModelConfig,
    weight_map: dict[str, str],
    *,
    locate: Callable[[str], Path],
    model_id: str,
    revision: str | None = None,
    count_params: bool = True,
) -> WeightSource:
    """Tensors from PyTorch ``.bin`` shards, each loaded once when a tensor in it is first asked for."""
    shards: dict[str, dict[str, torch.Tensor]] = {}

    def state_for(shard: str) -> dict[str, torch.Tensor]:
        if shard not in shards:
            shards[shard] = load_bin(locate(shard))
        return shards[shard]

    def load(name: str) -> torch.Tensor:
        state = state_for(weight_map[name])
        if name not in state:
            raise InputError(f"{description}: {weight_map[name]} lacks {name}, which its index lists")
        return state[name]

    n_params = None
    if count_params:  # needs every shard: local checkpoints only
        n_params = sum(
            t.numel() for shard in sorted(set(weight_map.values())) for t in state_for(shard).values()
        )
    return WeightSource(
        model_id=model_id,
        description=description,
        config=config,
        names=weight_map,
        load=load,
        revision=revision,
        n_params=n_params,
    )


def from_module(module: torch.nn.Module) -> WeightSource:
    """A live model (e.g. during training): its parameters and buffers by their in-memory names.

    A parameter shared by several modules (layers that share one attention module, a key weight tied to
    its query weight) is listed under every name it has, so each layer it serves is scored.
    """
    from transformers import PretrainedConfig

    kind = type(module).__name__
    config = getattr(module, "config", None)
    if not isinstance(config, PretrainedConfig):
        raise InputError(f"{kind}: an in-memory model must be a transformers model with .config")
    state = dict(module.named_parameters(remove_duplicate=False))
    state.update(module.named_buffers(remove_duplicate=False))
    if any(t.is_meta for t in state.values()):
        raise InputError(
            f"in-memory {kind}: its weights are on the meta device (never loaded); "
            "load the model with real weights before scoring it"
        )
    name_or_path = getattr(config, "_name_or_path", "") or ""
    local = os.path.isabs(name_or_path) or name_or_path.startswith((".", "~"))
    return WeightSource(
        model_id=(Path(name_or_path).name if local else name_or_path) or kind,
        description=f"in-memory {kind}",
        config=config,
        names=state,
        load=lambda name: state[name].detach(),
        n_params=sum(p.numel() for p in module.parameters()),
    )

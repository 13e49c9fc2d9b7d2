"""Weights on this machine: a ``save_pretrained`` directory (safetensors or PyTorch ``.bin``) or a live module.

safetensors files are opened with ``safe_open`` for each tensor read (memory-mapped; the handle is closed
again at once). ``.bin`` files are read with ``torch.load(weights_only=True)``: nothing but tensors is
ever unpickled; zip-format files are memory-mapped, legacy (pre-1.6) files are read whole.
"""

from __future__ import annotations

import functools
import math
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import InputError
from .base import (
    BIN_INDEX,
    BIN_SINGLE,
    SAFETENSORS_INDEX,
    ModelConfig,
    WeightSource,
    one_line,
    read_index,
)
from .config import load_config


def from_directory(path: Path) -> WeightSource:
    """A ``save_pretrained`` directory: safetensors (sharded or not) or PyTorch ``.bin`` weights."""
    description = str(path)
    model_id = path.resolve().name
    config_file = path / "config.json"
    if not config_file.is_file():
        raise InputError(f"{description}: no config.json; pass a directory written by save_pretrained")
    config = load_config(config_file, description)
    common = {"model_id": model_id, "locate": lambda shard: path / shard}
    if (path / SAFETENSORS_INDEX).is_file():
        weight_map = read_index(path / SAFETENSORS_INDEX, description)
        return safetensors_source(description, config, weight_map, **common)
    singles = sorted(path.glob("*.safetensors"))
    if singles:
        weight_map = {name: file.name for file in singles for name in safetensors_names(file)}
        return safetensors_source(description, config, weight_map, **common)
    if (path / BIN_INDEX).is_file():
        weight_map = read_index(path / BIN_INDEX, description)
        return bin_source(description, config, weight_map, **common)
    if (path / BIN_SINGLE).is_file():
        names = load_bin(path / BIN_SINGLE).keys()
        return bin_source(description, config, dict.fromkeys(names, BIN_SINGLE), **common)
    raise InputError(f"{description}: no weights (*.safetensors or pytorch_model.bin) next to config.json")


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
        state = torch.load(file, weights_only=True, mmap=zipfile.is_zipfile(file), map_location="cpu")
    except Exception as err:  # torch raises many types for corrupt files and refused pickles
        raise InputError(
            f"{file}: cannot be read as a weights-only PyTorch checkpoint ({one_line(err)[:160]}); "
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

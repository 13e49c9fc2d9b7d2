"""What every weights source is, and what all formats share: checkpoint file names and index readers.

A ``WeightSource`` is a model's config, its tensor names, and a loader that reads one tensor when the
architecture map asks for it; nothing else is read, dequantised or downloaded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import torch

from ..errors import InputError

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"

_NOT_IDENTITY = ("_name_or_path", "transformers_version")
"""Config entries that say where or by which version a model was saved, not what it is."""


class ModelConfig(Protocol):
    """A source's config: transformers' ``PretrainedConfig``, or a config.json read as written
    (``sources.config.FileConfig``). The architecture map reads its entries as attributes."""

    model_type: str

    def to_dict(self) -> dict[str, Any]: ...


class WeightSource:
    """A model's config, identity and lazily loaded tensors; implements the architecture ``TensorReader``.

    ``model_id`` is what results are labelled with (a Hub id, or a local file or folder name, never an
    absolute path); ``description`` is what errors name (the full path). ``file_hash`` is a SHA-256 over
    the config's ``to_dict()`` (less its path and transformers version; a config.json read as written
    gives its own entries, see ``sources.config``) and the raw bytes of every tensor read: it identifies
    what the scores were computed from, wherever and in whichever format the files lie.
    """

    def __init__(
        self,
        *,
        model_id: str,
        description: str,
        config: ModelConfig,
        names: Iterable[str],
        load: Callable[[str], torch.Tensor],
        revision: str | None = None,
        n_params: int | None = None,
    ) -> None:
        self.model_id = model_id
        self.description = description
        self.config = config
        self.names = list(names)
        self.revision = revision
        self.n_params = n_params
        self.loaded: list[str] = []
        self._load = load
        settings = {k: v for k, v in config.to_dict().items() if k not in _NOT_IDENTITY}
        settings["model_type"] = config.model_type  # a generic config's to_dict() leaves it empty
        self._hash = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
        self._names = set(self.names)

    def _resolve(self, name: str) -> str | None:
        if name in self._names:
            return name
        matches = [n for n in self.names if n.endswith("." + name)]
        if len(matches) > 1:
            raise InputError(f"{self.description}: tensor name {name!r} is ambiguous: {matches[:4]}")
        return matches[0] if matches else None

    def has(self, name: str) -> bool:
        return self._resolve(name) is not None

    def get(self, *names: str) -> torch.Tensor:
        for name in names:
            full = self._resolve(name)
            if full is not None:
                tensor = self._load(full)
                self.loaded.append(full)
                self._hash.update(full.encode())
                self._hash.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy())  # no copy
                return tensor
        raise InputError(
            f"{self.description}: no tensor named {' or '.join(repr(n) for n in names)}; "
            "is this a complete checkpoint of the model its config.json declares?"
        )

    @property
    def file_hash(self) -> str:
        return self._hash.hexdigest()


def one_line(err: BaseException) -> str:
    """An exception's message on one line (library errors often span several)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines)[:300] if lines else type(err).__name__


def read_index(index_file: Path, description: str) -> dict[str, str]:
    """``weight_map`` of a sharded checkpoint's index: tensor name → shard file name."""
    try:
        weight_map = json.loads(index_file.read_text())["weight_map"]
        return {str(name): str(shard) for name, shard in weight_map.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise InputError(
            f"{description}: unreadable index {index_file.name} ({one_line(err)}); re-download it"
        ) from err


def index_parameter_count(index_file: Path) -> int | None:
    """``metadata.total_parameters`` of a sharded checkpoint's index, where the writer recorded it."""
    metadata = json.loads(index_file.read_text()).get("metadata") or {}
    total = metadata.get("total_parameters") if isinstance(metadata, dict) else None
    return int(total) if isinstance(total, int) and total > 0 else None

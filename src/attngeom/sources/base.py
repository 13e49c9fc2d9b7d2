"""What every weights source is, and what all formats share: checkpoint file names and index readers.

A ``WeightSource`` is a model's config, its tensor names, and a loader that reads one tensor when the
architecture map asks for it; nothing else is read, dequantised or downloaded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import torch

from ..errors import InputError
from .dequant import dequantise, scheme_of

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""A terminal escape (torch bolds part of its refusal of a pickle): never in an error line."""
_NOT_IDENTITY = ("_name_or_path", "transformers_version")
"""Config entries that say where or by which version a model was saved, not what it is."""


class ModelConfig(Protocol):
    """A source's config: transformers' ``PretrainedConfig``, or a config.json read as written
    (``sources.config.FileConfig``). The architecture map reads its entries as attributes."""

    model_type: str

    def to_dict(self) -> dict[str, Any]: ...


class WeightSource:
    """A model's config, identity and lazily loaded tensors; implements the architecture ``TensorReader``.

    A context manager: leaving the ``with`` block (or ``close()``) releases what reading holds (a range
    reader's threads, a loaded state dict), and the source reads nothing after.

    ``model_id`` is what results are labelled with (a Hub id, or a local file or folder name, never an
    absolute path); ``description`` is what errors name (the full path). ``file_hash`` is a SHA-256 over
    the config's ``to_dict()`` (less its path and transformers version; a config.json read as written
    gives its own entries, see ``sources.config``) and the raw bytes of every tensor read: it identifies
    what the scores were computed from, wherever and in whichever format the files lie.

    Tensors come back as floats: quantised ones dequantised (``dequant``), unless ``stored_as`` names
    what a loader already decoded (GGUF's types); ``source_dtype`` lists what the tensors read were
    stored as.
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
        stored_as: Callable[[str], str] | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.model_id = model_id
        self.description = description
        self.config = config
        self.names = list(names)
        self.revision = revision
        self.n_params = n_params
        self.loaded: list[str] = []
        self._load = load
        self._stored_as = stored_as
        self._close = close
        self._scheme = scheme_of(config, description)
        self._dtypes: set[str] = set()
        settings = {k: v for k, v in config.to_dict().items() if k not in _NOT_IDENTITY}
        settings["model_type"] = config.model_type  # a generic config's to_dict() leaves it empty
        self._hash = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
        self._names = set(self.names)
        self._modules: dict[str, list[str]] = {}
        for name in self.names:
            self._modules.setdefault(name.rpartition(".")[0], []).append(name)

    def __enter__(self) -> WeightSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the loader and what it holds; a tensor asked for afterwards is an error."""
        if self._close is not None:
            self._close()
        self._close = None
        self._load = self._closed

    def _closed(self, name: str) -> torch.Tensor:
        raise ValueError(f"{self.description}: tensor {name} asked for after the source was closed")

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
                raw = self._read(full)
                if self._stored_as is not None:
                    tensor, stored = raw, self._stored_as(full)
                else:
                    beside = self._modules[full.rpartition(".")[0]]
                    tensor, stored = dequantise(
                        full, raw, self._scheme, self._companion, self.description, beside
                    )
                self._record(full, raw)
                self._dtypes.add(stored)
                return tensor
        raise InputError(
            f"{self.description}: no tensor named {' or '.join(repr(n) for n in names)}; "
            "is this a complete checkpoint of the model its config.json declares?"
        )

    def _read(self, full: str, scalar: bool = False) -> torch.Tensor:
        """A stored tensor, holding weights (with ``scalar``, a scale: one number will do)."""
        tensor = self._load(full)
        if (tensor.ndim == 0 and not scalar) or tensor.numel() == 0:
            raise InputError(
                f"{self.description}: tensor {full} has shape {tuple(tensor.shape)}, no weights; "
                "the checkpoint is damaged, re-download or re-save it"
            )
        return tensor

    def _companion(self, name: str) -> torch.Tensor | None:
        """A tensor stored beside one being read (its scales), hashed as read; None where there is none."""
        if name not in self._names:
            return None
        tensor = self._read(name, scalar=True)
        self._record(name, tensor)
        return tensor

    def _record(self, full: str, raw: torch.Tensor) -> None:
        """``full`` as read, and its bytes as the loader gave them, into the hash."""
        self.loaded.append(full)
        self._hash.update(full.encode())
        self._hash.update(raw.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())  # no copy

    @property
    def file_hash(self) -> str:
        return self._hash.hexdigest()

    @property
    def source_dtype(self) -> str | None:
        """What the tensors read so far were stored as (``bfloat16``, ``int8 (bitsandbytes)``, ``Q4_K``)."""
        return ",".join(sorted(self._dtypes)) or None


def one_line(err: BaseException) -> str:
    """An exception's message on one line (library errors often span several)."""
    lines = [line.strip() for line in ANSI.sub("", str(err)).splitlines() if line.strip()]
    return " ".join(lines)[:300] if lines else type(err).__name__


def read_index(index_file: Path, description: str) -> dict[str, str]:
    """``weight_map`` of a sharded checkpoint's index: tensor name → shard file name, each shard a
    relative path inside the model folder (never absolute, never through ``..``)."""
    try:
        weight_map = json.loads(index_file.read_text(), object_pairs_hook=_unique_keys)["weight_map"]
        weight_map = {str(name): str(shard) for name, shard in weight_map.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        raise InputError(
            f"{description}: unreadable index {index_file.name} ({one_line(err)}); re-download it"
        ) from err
    for shard in sorted(set(weight_map.values())):
        parts = PurePosixPath(shard).parts
        if not parts or shard.startswith(("/", "\\")) or ".." in parts or "\\" in shard or ":" in shard:
            raise InputError(
                f"{description}: index {index_file.name} names shard {shard!r}, outside the model folder; "
                "re-download the index"
            )
    return weight_map


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique (``json`` keeps the last of repeated keys without a word)."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        raise ValueError(f"{repeated[0]!r} is listed twice")
    return dict(pairs)


def index_parameter_count(index_file: Path) -> int | None:
    """``metadata.total_parameters`` of a sharded checkpoint's index, where the writer recorded it."""
    metadata = json.loads(index_file.read_text()).get("metadata") or {}
    total = metadata.get("total_parameters") if isinstance(metadata, dict) else None
    return int(total) if isinstance(total, int) and total > 0 else None

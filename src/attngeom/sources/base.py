"""What every weights source is, and what all formats share: checkpoint file names, index and config readers.

A ``WeightSource`` is a model's config, its tensor names, and a loader that reads one tensor when the
architecture map asks for it; nothing else is read, dequantised or downloaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from transformers import CONFIG_MAPPING, AutoConfig, PretrainedConfig

from ..errors import InputError

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"

_NOT_IDENTITY = ("_name_or_path", "transformers_version")
"""Config entries that say where or by which version a model was saved, not what it is."""

HEAD_COUNT = re.compile(r"(^|_)(heads|n_head)$")
"""Config fields that count attention heads (``num_attention_heads``, ``n_head``, ``num_key_value_heads`` ...)."""
REQUIRED_HEAD_COUNT = re.compile(r"(^|_)attention_heads$")
"""Head counts a config must state (besides ``num_attention_heads`` under its own name): transformers' defaults
for them (e.g. BERT's 12) would silently give wrong per-head scores."""


class WeightSource:
    """A model's config, identity and lazily loaded tensors; implements the architecture ``TensorReader``.

    ``model_id`` is what results are labelled with (a Hub id, or a local file or folder name, never an
    absolute path); ``description`` is what errors name (the full path). ``file_hash`` is a SHA-256 over
    the config (less its path and transformers version) and the raw bytes of every tensor read: it
    identifies what the scores were computed from, wherever and in whichever format the files lie.
    """

    def __init__(
        self,
        *,
        model_id: str,
        description: str,
        config: PretrainedConfig,
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
                self._hash.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
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


def load_config(config_file: Path, description: str) -> PretrainedConfig:
    """The transformers config of ``config_file``, its head counts checked (stated, positive integers).

    A ``model_type`` transformers does not know (a remote-code model, never run) is read as a generic
    config holding the file's entries; whether any model type can be scored is the engine's question.
    """
    where = f"{description}: {config_file.name}"
    try:
        raw = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"{where}: cannot read it ({one_line(err)}); re-download it") from err
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise InputError(f"{where} has no model_type; pass a directory written by save_pretrained")
    if model_type in CONFIG_MAPPING:
        try:
            config = AutoConfig.from_pretrained(config_file.parent, trust_remote_code=False)
        except Exception as err:  # transformers' validation raises TypeError, ValueError and its own errors
            raise InputError(f"{where}: invalid for {model_type!r}: {one_line(err)}; fix the value") from err
    else:
        config = PretrainedConfig.from_dict(raw)
    check_head_counts(config, raw, where)
    return config


def check_head_counts(config: PretrainedConfig, raw: dict, where: str, path: str = "") -> None:
    """Every head count of ``config`` (and of its sub-configs) is a positive integer, and those that
    transformers would otherwise fill in with a default are stated in ``raw`` (the file's JSON)."""
    cls = type(config)
    if cls is PretrainedConfig:  # a model type transformers does not know: only what the file states
        fields = set(raw)
    elif dataclasses.is_dataclass(cls):
        fields = {f.name for f in dataclasses.fields(cls)}
    else:
        fields = set(vars(config))
    aliases = getattr(config, "attribute_map", {}) or {}
    required = {f for f in fields if REQUIRED_HEAD_COUNT.search(f)}
    canonical = aliases.get("num_attention_heads", "num_attention_heads")
    if canonical in fields and cls is not PretrainedConfig:
        required.add(canonical)
    for name in sorted(f for f in fields if HEAD_COUNT.search(f)):
        spellings = [name] + [alias for alias, target in aliases.items() if target == name]
        stated = any(key in raw for key in spellings)
        if name in required and not stated:
            raise InputError(
                f"{where} has no {path}{name} (transformers would assume a default head count); "
                "add the model's head count to it"
            )
        value = getattr(config, name, None)
        if value is None and not stated:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise InputError(f"{where}: {path}{name} = {value!r} is not a positive integer; fix the value")
    for key in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, key, None)
        if isinstance(sub, PretrainedConfig):
            nested = raw.get(key)
            check_head_counts(sub, nested if isinstance(nested, dict) else {}, where, f"{path}{key}.")

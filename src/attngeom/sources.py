"""Where weights come from: named tensors, loaded one at a time and only when asked for.

Every source (local directory, hub id, GGUF file, in-memory module) becomes a ``WeightSource``: the
model's config, its tensor names, and a loader. The architecture map asks for the q/k tensors by name;
nothing else is read, dequantised or downloaded. A hub source downloads a shard only when a tensor
in it is asked for, so a byte-range loader can replace it without touching the rest.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, LlamaConfig, PretrainedConfig

from .architectures import supported_model_types
from .architectures.decoders import LLAMA_LAYOUT_REMOTE_CODE
from .errors import InputError

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"


_NOT_IDENTITY = ("_name_or_path", "transformers_version")
"""Config entries that say where or by which version a model was saved, not what it is."""


class WeightSource:
    """A model's config, identity and lazily loaded tensors; implements the architecture ``TensorReader``.

    ``file_hash`` is a SHA-256 over the config (less its path and transformers version) and the raw bytes
    of every tensor actually read: it identifies what the scores were computed from, wherever the files
    lie (two checkpoints with equal config and q/k hash equal).
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


def open_source(
    model: str | os.PathLike | torch.nn.Module,
    *,
    revision: str | None = None,
    token: str | None = None,
    full_download: bool = False,
) -> WeightSource:
    """The weights source for a hub id, a local directory, a ``.gguf`` file or an in-memory model.

    Hub files are read by HTTP range (only the q/k bytes); ``full_download`` downloads whole files instead.
    """
    if isinstance(model, torch.nn.Module):
        return from_module(model)
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.is_dir():
        return from_directory(path)
    if path.is_file():
        if path.suffix == ".gguf":
            return from_gguf(path)
        raise InputError(
            f"{text}: not a model directory or a .gguf file; pass the directory holding config.json"
        )
    if text.endswith(".gguf") and not text.startswith(("/", ".", "~")) and text.count("/") >= 2:
        from .remote import gguf_source  # org/name/file.gguf: a GGUF file on the Hub

        return gguf_source(text, revision=revision, token=token, full_download=full_download)
    if _looks_like_path(text):
        raise InputError(f"{text}: no such file or directory")
    from .hub import from_hub  # huggingface_hub is only needed for hub ids

    return from_hub(text, revision=revision, token=token, full_download=full_download)


def _looks_like_path(text: str) -> bool:
    return (
        text.startswith(("/", ".", "~"))
        or text.endswith((".gguf", ".safetensors", ".bin", ".json"))
        or text.count("/") > 1
        or (os.sep != "/" and os.sep in text)
    )


def load_config(config_file: Path, description: str) -> PretrainedConfig:
    """The transformers config of ``config_file``; an unknown ``model_type`` names the supported list."""
    try:
        raw = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(f"{description}: cannot read {config_file.name}: {err}") from err
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not model_type:
        raise InputError(f"{description}: {config_file.name} has no model_type")
    if model_type not in supported_model_types():
        raise InputError(
            f"{description}: unsupported model_type {model_type!r}; supported: {', '.join(supported_model_types())}"
        )
    try:
        return AutoConfig.from_pretrained(config_file.parent, trust_remote_code=False)
    except (ValueError, KeyError) as err:
        if model_type in LLAMA_LAYOUT_REMOTE_CODE:  # its remote code is never run; the layout is Llama's
            return LlamaConfig.from_dict(raw)
        raise InputError(f"{description}: invalid {config_file.name} for {model_type!r}: {err}") from err


def from_directory(path: Path) -> WeightSource:
    """A ``save_pretrained`` directory: safetensors (sharded or not) or PyTorch ``.bin`` weights."""
    description = str(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise InputError(f"{description}: no config.json; pass a directory written by save_pretrained")
    config = load_config(config_file, description)
    if (path / SAFETENSORS_INDEX).is_file():
        weight_map = read_index(path / SAFETENSORS_INDEX, description)
        return safetensors_source(description, config, weight_map, lambda shard: path / shard)
    singles = sorted(path.glob("*.safetensors"))
    if singles:
        weight_map = {}
        for file in singles:
            weight_map.update(dict.fromkeys(safetensors_names(file), file.name))
        return safetensors_source(description, config, weight_map, lambda shard: path / shard)
    if (path / BIN_INDEX).is_file():
        weight_map = read_index(path / BIN_INDEX, description)
        return bin_source(description, config, weight_map, lambda shard: path / shard)
    if (path / BIN_SINGLE).is_file():
        names = bin_state_dict(path / BIN_SINGLE).keys()
        return bin_source(description, config, dict.fromkeys(names, BIN_SINGLE), lambda shard: path / shard)
    raise InputError(f"{description}: no weights (*.safetensors or pytorch_model.bin) next to config.json")


def read_index(index_file: Path, description: str) -> dict[str, str]:
    """``weight_map`` of a sharded checkpoint's index: tensor name → shard file name."""
    try:
        weight_map = json.loads(index_file.read_text())["weight_map"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise InputError(f"{description}: unreadable index {index_file.name}: {err}") from err
    return dict(weight_map)


def index_parameter_count(index_file: Path) -> int | None:
    """``metadata.total_parameters`` of a sharded checkpoint's index, where the writer recorded it."""
    total = json.loads(index_file.read_text()).get("metadata", {}).get("total_parameters")
    return int(total) if total else None


def _open_safetensors(file: Path):
    try:
        return safe_open(file, framework="pt")
    except (SafetensorError, OSError) as err:
        raise InputError(f"{file}: corrupted or truncated safetensors file ({err}); re-download it") from err


def safetensors_names(file: Path) -> list[str]:
    with _open_safetensors(file) as handle:
        return list(handle.keys())


def safetensors_source(
    description: str,
    config: PretrainedConfig,
    weight_map: dict[str, str],
    locate: Callable[[str], Path],
    *,
    model_id: str | None = None,
    revision: str | None = None,
    n_params: int | None = None,
    count_params: bool = True,
) -> WeightSource:
    """Tensors from safetensors shards, memory-mapped; ``locate`` turns a shard name into a local file.

    With ``count_params`` (and no ``n_params``) every shard header is opened to count the parameters;
    no tensor data is read.
    """
    handles: dict[str, object] = {}

    def handle_for(shard: str):
        if shard not in handles:
            handles[shard] = _open_safetensors(locate(shard)).__enter__()
        return handles[shard]

    def load(name: str) -> torch.Tensor:
        handle = handle_for(weight_map[name])
        try:
            return handle.get_tensor(name)
        except SafetensorError as err:
            raise InputError(
                f"{description}: tensor {name} is unreadable ({err}); re-download the file"
            ) from err

    if n_params is None and count_params:
        n_params = 0
        for shard in sorted(set(weight_map.values())):
            handle = handle_for(shard)
            for name in handle.keys():
                n_params += math.prod(handle.get_slice(name).get_shape())
    return WeightSource(
        model_id=model_id or description,
        description=description,
        config=config,
        names=weight_map,
        load=load,
        revision=revision,
        n_params=n_params,
    )


def bin_state_dict(file: Path) -> dict[str, torch.Tensor]:
    """A ``.bin`` state dict, memory-mapped; never unpickles anything but tensors."""
    try:
        return torch.load(file, weights_only=True, mmap=True, map_location="cpu")
    except Exception as err:  # torch raises many types for corrupt or unsafe pickles
        raise InputError(f"{file}: cannot load as a weights-only PyTorch checkpoint ({err})") from err


def bin_source(
    description: str,
    config: PretrainedConfig,
    weight_map: dict[str, str],
    locate: Callable[[str], Path],
    *,
    model_id: str | None = None,
    revision: str | None = None,
    count_params: bool = True,
) -> WeightSource:
    """Tensors from PyTorch ``.bin`` shards (loaded memory-mapped, weights only)."""
    shards: dict[str, dict[str, torch.Tensor]] = {}

    def state_for(shard: str) -> dict[str, torch.Tensor]:
        if shard not in shards:
            shards[shard] = bin_state_dict(locate(shard))
        return shards[shard]

    def load(name: str) -> torch.Tensor:
        return state_for(weight_map[name])[name]

    n_params = None
    if count_params:  # needs every shard: local checkpoints only
        n_params = sum(
            t.numel() for shard in sorted(set(weight_map.values())) for t in state_for(shard).values()
        )
    return WeightSource(
        model_id=model_id or description,
        description=description,
        config=config,
        names=weight_map,
        load=load,
        revision=revision,
        n_params=n_params,
    )


def from_module(module: torch.nn.Module) -> WeightSource:
    """A live model (e.g. during training): its parameters by their in-memory names."""
    config = getattr(module, "config", None)
    if not isinstance(config, PretrainedConfig):
        raise InputError(
            f"{type(module).__name__}: an in-memory model must be a transformers model with .config"
        )
    state = dict(module.named_parameters())
    state.update(dict(module.named_buffers()))
    model_id = getattr(config, "_name_or_path", "") or type(module).__name__
    return WeightSource(
        model_id=model_id,
        description=f"in-memory {type(module).__name__}",
        config=config,
        names=state,
        load=lambda name: state[name].detach(),
        n_params=sum(p.numel() for p in module.parameters()),
    )


GGUF_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2"}
"""GGUF ``general.architecture`` → transformers ``model_type``, for layouts with separate attn_q/attn_k."""

_GGUF_TENSOR_NAMES = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
}


def from_gguf(path: Path, *, read: Callable | None = None, description: str | None = None) -> WeightSource:
    """A GGUF file: head counts from its metadata, q/k tensors dequantised one at a time.

    ``read(tensor)`` gives a tensor's raw data where the file at ``path`` holds only the header (remote.py).
    """
    import gguf
    from gguf.quants import dequantize

    description = description or str(path)
    try:
        reader = gguf.GGUFReader(path)
    except Exception as err:  # gguf raises ValueError/struct.error/IndexError on corrupt files
        raise InputError(f"{description}: not a readable GGUF file ({err})") from err

    def field(key: str, default=None):
        entry = reader.fields.get(key)
        return default if entry is None else entry.contents()

    arch = field("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise InputError(
            f"{description}: GGUF architecture {arch!r} is not supported; supported: {', '.join(GGUF_ARCHITECTURES)}"
        )
    heads = int(field(f"{arch}.attention.head_count"))
    config = AutoConfig.for_model(
        GGUF_ARCHITECTURES[arch],
        hidden_size=int(field(f"{arch}.embedding_length")),
        num_hidden_layers=int(field(f"{arch}.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(field(f"{arch}.attention.head_count_kv", heads)),
        head_dim=field(f"{arch}.attention.key_length"),
        intermediate_size=int(field(f"{arch}.feed_forward_length", 0)) or None,
        vocab_size=int(field(f"{arch}.vocab_size", 0)) or None,
        name_or_path=str(field("general.name", path.stem)),
    )
    tensors = {}
    for tensor in reader.tensors:
        block, _, rest = tensor.name.partition(".")
        index, _, kind = rest.partition(".")
        if block == "blk" and kind in _GGUF_TENSOR_NAMES:
            tensors[f"model.layers.{index}.{_GGUF_TENSOR_NAMES[kind]}"] = tensor

    def load(name: str) -> torch.Tensor:
        tensor = tensors[name]
        data = tensor.data if read is None else read(tensor)
        return torch.from_numpy(dequantize(data, tensor.tensor_type).copy())

    return WeightSource(
        model_id=path.name,
        description=description,
        config=config,
        names=tensors,
        load=load,
        n_params=sum(int(t.n_elements) for t in reader.tensors),
    )

"""GGUF files (llama.cpp): the header parsed once, head counts from its metadata, q/k dequantised one at a time.

Each GGUF architecture's metadata keys, tensor names and conversion steps are in ``gguf_archs``.

One parser serves local files and Hub files read by range: ``parse_header`` walks a prefix of the file
and raises ``NeedMore`` when the metadata or tensor table runs past it, so a remote reader fetches just
enough bytes. Values of metadata arrays (the tokenizer's vocabulary, often megabytes) are skipped; only
their lengths are kept. Dequantisation is the ``gguf`` package's.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize, quant_shape_to_byte_shape

from ..errors import InputError
from .base import WeightSource, one_line
from .config import check_head_counts
from .gguf_archs import Recipe, architecture, recipes

if TYPE_CHECKING:
    from transformers import PretrainedConfig

PROBE = 64 << 10
"""First read of a header; grown until the metadata and tensor table fit."""
MAX_HEADER = 1 << 30
"""A header that claims more bytes than this is corrupted."""
SMALL_ARRAY = 4096
"""Numeric arrays up to this length (one entry per layer) keep their values; longer ones only their length."""

_SCALARS = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


class NeedMore(Exception):
    """The header runs past the bytes given: at least ``size`` bytes of the file are needed."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: its quantisation, its dims in GGUF order (fastest first) and its bytes [start, end)."""

    name: str
    kind: GGMLQuantizationType
    dims: tuple[int, ...]
    start: int
    end: int


@dataclass
class Header:
    metadata: dict[str, object] = field(default_factory=dict)
    """Scalar and string values by key."""
    array_lengths: dict[str, int] = field(default_factory=dict)
    arrays: dict[str, tuple] = field(default_factory=dict)
    """Values of numeric arrays of at most ``SMALL_ARRAY`` entries (per-layer settings)."""
    tensors: dict[str, TensorInfo] = field(default_factory=dict)


class _Cursor:
    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.position = 0

    def take(self, fmt: str) -> tuple:
        end = self.position + struct.calcsize(fmt)
        if end > len(self.prefix):
            raise NeedMore(max(end, 2 * len(self.prefix)))
        values = struct.unpack_from(fmt, self.prefix, self.position)
        self.position = end
        return values

    def skip(self, length: int) -> bytes:
        end = self.position + length
        if end > len(self.prefix):
            raise NeedMore(max(end, 2 * len(self.prefix)))
        self.position, start = end, self.position
        return self.prefix[start:end]

    def string(self) -> str:
        return self.skip(self.take("<Q")[0]).decode(errors="replace")


REFUSED = " (llama.cpp refuses such a file: its tensors lie back to back, each once); re-convert the model"


def parse_header(prefix: bytes, where: str) -> Header:
    """The metadata and tensor table of a little-endian GGUF v2/v3 file from its first bytes; the tensors
    must lie as llama.cpp requires: each name once, each tensor at the running sum of the sizes before it
    (each padded to ``general.alignment``), so none overlaps another."""
    cursor = _Cursor(prefix)
    magic, version, n_tensors, n_kv = cursor.take("<4sIQQ")
    if magic != b"GGUF":
        raise InputError(f"{where}: not a GGUF file (it does not start with 'GGUF')")
    if version not in (2, 3):
        raise InputError(
            f"{where}: GGUF version {version} is not supported (v2/v3, little-endian); re-convert it"
        )
    header = Header()
    for _ in range(n_kv):
        key, kind = cursor.string(), cursor.take("<I")[0]
        if kind == GGUFValueType.ARRAY:
            item, count = cursor.take("<IQ")
            if item == GGUFValueType.STRING:
                for _ in range(count):
                    cursor.skip(cursor.take("<Q")[0])
            elif item in _SCALARS:
                raw = cursor.skip(count * struct.calcsize(_SCALARS[item]))
                if count <= SMALL_ARRAY:
                    header.arrays[key] = struct.unpack(f"<{count}{_SCALARS[item]}", raw)
            else:
                raise InputError(f"{where}: GGUF metadata {key!r} has an unsupported array type {item}")
            header.array_lengths[key] = count
        elif kind == GGUFValueType.STRING:
            header.metadata[key] = cursor.string()
        elif kind in _SCALARS:
            header.metadata[key] = cursor.take("<" + _SCALARS[kind])[0]
        else:
            raise InputError(f"{where}: GGUF metadata {key!r} has an unknown type {kind}; corrupted?")
    infos = []
    for _ in range(n_tensors):
        name = cursor.string()
        (n_dims,) = cursor.take("<I")
        if not 0 < n_dims <= 8:
            raise InputError(f"{where}: GGUF tensor {name!r} has {n_dims} dimensions; the file is corrupted")
        infos.append((name, cursor.take(f"<{n_dims}Q"), *cursor.take("<IQ")))
    alignment = header.metadata.get("general.alignment", 32)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
        raise InputError(
            f"{where}: GGUF general.alignment = {alignment!r} is not a positive integer; corrupted?"
        )
    data_start = -(-cursor.position // alignment) * alignment
    expected = 0
    for name, dims, kind, offset in infos:
        try:
            quant = GGMLQuantizationType(kind)
            block, block_bytes = GGML_QUANT_SIZES[quant]
        except (ValueError, KeyError) as err:
            raise InputError(f"{where}: tensor {name!r} has an unknown GGUF type {kind}") from err
        if dims[0] % block:
            raise InputError(
                f"{where}: GGUF tensor {name!r} has rows of {dims[0]}, not whole {quant.name} blocks"
            )
        if name in header.tensors:
            raise InputError(f"{where}: GGUF tensor {name!r} is listed twice{REFUSED}")
        if offset != expected:
            where_it_lies = "overlaps the tensors before it" if offset < expected else "leaves a gap"
            raise InputError(
                f"{where}: GGUF tensor {name!r} lies at data offset {offset}, expected {expected}: it "
                f"{where_it_lies}{REFUSED}"
            )
        size = math.prod(dims) * block_bytes // block
        expected += -(-size // alignment) * alignment
        start = data_start + offset
        header.tensors[name] = TensorInfo(name, quant, tuple(dims), start, start + size)
    return header


def read_local_header(path: Path) -> Header:
    """The header of a local GGUF file, reading only as much of it as the header takes."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(PROBE)
        while True:
            try:
                return parse_header(prefix, str(path))
            except NeedMore as more:
                if len(prefix) >= size or more.size > MAX_HEADER:
                    raise InputError(
                        f"{path}: the GGUF header runs past the end of the file; it is truncated"
                    ) from None
                prefix += handle.read(more.size - len(prefix))


def _count(header: Header, key: str, where: str, required: bool) -> int | None:
    value = header.metadata.get(key)
    per_layer = set(header.arrays.get(key, ()))
    if value is None and len(per_layer) == 1:
        value = per_layer.pop()  # one value per layer, all the same
    if value is None:
        if key in header.array_lengths:
            raise InputError(f"{where}: GGUF {key} differs per layer; such models are not supported")
        if required:
            raise InputError(
                f"{where}: GGUF metadata has no {key}; the file is incomplete, re-convert the model with llama.cpp"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: GGUF {key} = {value!r} is not a positive integer; the file is corrupted")
    return value


def config_of(header: Header, where: str, name: str) -> PretrainedConfig:
    """A transformers config from the GGUF metadata (only what the architecture map needs must be there)."""
    from transformers import AutoConfig

    arch = header.metadata.get("general.architecture")
    spec = architecture(arch, where)
    heads = _count(header, f"{arch}.attention.head_count", where, required=True)
    hidden = _count(header, f"{arch}.embedding_length", where, required=True)
    head_dim = _count(header, f"{arch}.attention.key_length", where, required=False)
    if head_dim is None and hidden % heads:
        raise InputError(
            f"{where}: GGUF {arch}.embedding_length {hidden} is not divisible by head_count {heads} "
            "(and no key_length says the head width); the file is corrupted, re-convert the model"
        )
    blocks = _count(header, f"{arch}.block_count", where, required=True)
    kv_heads = _count(header, f"{arch}.attention.head_count_kv", where, False) or heads
    # each head has at least one row of q or k, so no count exceeds the file's largest tensor dimension;
    # a larger one would only make the per-head recipes loop (StableLM's q/k norms) before any tensor is
    # read (a file of no tensors has no blocks to build recipes for: see block_count below)
    widest = max((max(t.dims) for t in header.tensors.values() if t.dims), default=0)
    for key, count in (("head_count", heads), ("head_count_kv", kv_heads)):
        if header.tensors and count > widest:
            raise InputError(
                f"{where}: GGUF {arch}.attention.{key} {count} exceeds every tensor dimension in the file "
                f"(at most {widest}); the file is corrupted, re-convert the model"
            )
    settings = {
        "hidden_size": hidden,
        "num_hidden_layers": blocks,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": _count(header, f"{arch}.feed_forward_length", where, required=False),
        "vocab_size": _count(header, f"{arch}.vocab_size", where, required=False) or _vocabulary(header),
    }
    settings = {key: value for key, value in settings.items() if value is not None}
    settings["pad_token_id"] = _padding_token(header, settings.get("vocab_size"))
    try:
        settings |= spec.settings(arch, header.metadata | header.arrays, header.tensors.keys())
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    if not spec.key_length_is_head_dim:
        settings.pop("head_dim", None)
    model_type = spec.model_type_of(header.metadata, header.tensors.keys())
    present = _blocks_present(header)
    if blocks > present:
        raise InputError(
            f"{where}: GGUF {arch}.block_count is {blocks}, but the file holds tensors of {present} blocks; "
            "the file is corrupted or truncated, re-convert the model"
        )
    try:
        config = AutoConfig.for_model(
            model_type, name_or_path=str(header.metadata.get("general.name", name)), **settings
        )
    except Exception as err:  # transformers' validation raises ValueError, TypeError and its own
        raise InputError(
            f"{where}: GGUF metadata invalid for {arch}: {one_line(err)}; re-convert the model"
        ) from err
    check_head_counts(config, settings, where)
    return config


def _blocks_present(header: Header) -> int:
    """One more than the highest ``blk.N`` among the tensors: how many layers the file can hold."""
    numbers = [name.split(".")[1] for name in header.tensors if name.startswith("blk.")]
    return max((int(n) + 1 for n in numbers if n.isdigit()), default=0)


def _padding_token(header: Header, vocab_size: int | None) -> int | None:
    """The file's own padding token where it names one inside the vocabulary, else None: never the config
    class's default (Phi-3's 32000), which a smaller vocabulary cannot embed, so transformers cannot build
    the model whose layout discovery reads."""
    token = header.metadata.get("tokenizer.ggml.padding_token_id")
    inside = isinstance(token, int) and not isinstance(token, bool) and vocab_size and 0 <= token < vocab_size
    return token if inside else None


def _vocabulary(header: Header) -> int | None:
    """The vocabulary size where the metadata leaves it out: the token embedding's rows, or the token list."""
    embedding = header.tensors.get("token_embd.weight")
    if embedding is not None and len(embedding.dims) == 2:
        return int(embedding.dims[1])
    return header.array_lengths.get("tokenizer.ggml.tokens")


def qk_tensors(header: Header, config: PretrainedConfig) -> dict[str, tuple[Recipe, list[TensorInfo]]]:
    """The tensors the architecture map may ask for, under transformers' names, each with its GGUF tensors."""
    spec = architecture(header.metadata.get("general.architecture"), "GGUF")
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    found = recipes(spec, header.tensors.keys(), config.num_hidden_layers, heads, kv_heads)
    return {
        name: (recipe, [header.tensors[source] for source in recipe.sources])
        for name, recipe in found.items()
    }


def decode(raw: np.ndarray, info: TensorInfo, where: str) -> torch.Tensor:
    """A tensor's raw bytes (uint8) dequantised to float32, in transformers' (rows, columns) order."""
    shape = tuple(reversed(info.dims))
    try:
        data = raw.reshape(quant_shape_to_byte_shape(shape, info.kind))
        return torch.from_numpy(np.array(dequantize(data, info.kind), dtype=np.float32))  # a writable copy
    except (ValueError, NotImplementedError) as err:
        raise InputError(f"{where}: cannot dequantise a {info.kind.name} tensor ({one_line(err)})") from err


def gguf_weights(
    header: Header,
    read: Callable[[TensorInfo], np.ndarray],
    *,
    model_id: str,
    description: str,
    revision: str | None = None,
    close: Callable[[], None] | None = None,
) -> WeightSource:
    """A source over a parsed header; ``read(info)`` gives a tensor's raw bytes (from disk or by range),
    ``close`` releases what reading holds."""
    config = config_of(header, description, model_id)
    tensors = qk_tensors(header, config)

    def load(name: str) -> torch.Tensor:
        recipe, infos = tensors[name]
        decoded = [decode(read(info), info, description) for info in infos]
        try:
            return recipe.build(decoded)
        except (RuntimeError, ValueError, IndexError) as err:
            shapes = ", ".join(f"{info.name} {tuple(reversed(info.dims))}" for info in infos)
            raise InputError(
                f"{description}: GGUF {shapes} cannot make {name} of a {config.model_type} model "
                f"({one_line(err)}); the file is corrupted"
            ) from err

    return WeightSource(
        model_id=model_id,
        description=description,
        config=config,
        names=tensors,
        load=load,
        revision=revision,
        n_params=sum(math.prod(info.dims) for info in header.tensors.values()),
        stored_as=lambda name: ",".join(sorted({info.kind.name for info in tensors[name][1]})),
        close=close,
    )


def from_gguf(path: Path) -> WeightSource:
    """A local GGUF file; each q/k tensor's bytes are read from the file when asked for."""
    header = read_local_header(path)
    size = path.stat().st_size
    if any(info.end > size for info in header.tensors.values()):
        raise InputError(f"{path}: GGUF tensor data runs past the end of the file; it is truncated")

    def read(info: TensorInfo) -> np.ndarray:
        with open(path, "rb") as handle:
            handle.seek(info.start)
            return np.frombuffer(handle.read(info.end - info.start), dtype=np.uint8)

    return gguf_weights(header, read, model_id=path.name, description=str(path))

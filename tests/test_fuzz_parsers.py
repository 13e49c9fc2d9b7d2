"""Property-based fuzzing of the parsers that read untrusted files: GGUF headers, safetensors headers and
config.json. Every generated input, however malformed, gives a result or one ``InputError`` (the CLI's one
line), never another exception, and memory stays bounded (counts far beyond the bytes present are refused
before anything is built from them).

The generators build mostly well-formed files around hostile values (lying counts and lengths, wrong value
types, huge or zero dimensions, offsets past the end, odd dtypes), then cut or flip bytes of some of them.
"""

from __future__ import annotations

import json
import resource
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attngeom.architectures import architecture_for
from attngeom.engine import score_source
from attngeom.errors import InputError
from attngeom.sources import gguf, open_source
from attngeom.sources.config import load_config


def fuzz(examples: int) -> settings:
    """``examples`` inputs, no per-example deadline (a loaded CI machine is slow, not wrong)."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


GROWTH_LIMIT_KB = 512 << 10
"""Peak resident memory a whole fuzz test may add: a bomb (10^12 layers) would take far more."""


def peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def outcome(path: Path) -> str:
    """Open and score ``path`` as the CLI would: ``ok``, or the InputError's message (anything else raises)."""
    try:
        source = open_source(path)
        score_source(source, progress=False)
    except InputError as err:
        message = str(err)
        assert message and "\n" not in message.strip()
        return message
    return "ok"


WEIGHTS = st.binary(min_size=512, max_size=512)
"""The bytes of two 8 × 8 float32 tensors (any bits: NaN and infinities included)."""


def mutated(data: bytes, draw) -> bytes:
    """``data`` whole (mostly), cut short, or with one byte changed."""
    kind = draw(st.sampled_from(["whole"] * 6 + ["cut", "flip"]))
    if kind == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    return data


# --- GGUF --------------------------------------------------------------------------------------------------------

SIZES = st.one_of(st.integers(0, 64), st.sampled_from([2**31, 2**32 - 1, 10**12, 2**63]))
KEYS = [
    "general.architecture",
    "general.alignment",
    "llama.block_count",
    "llama.embedding_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "llama.vocab_size",
    "tokenizer.ggml.tokens",
    "x",
]


def gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def good_value(good: int | bytes) -> bytes:
    """A well-formed metadata value: a string, or a uint32."""
    if isinstance(good, bytes):
        return struct.pack("<I", 8) + gguf_string(good)
    return struct.pack("<II", 4, good)


def tensor_info(name: bytes, dims: list[int], kind: int, offset: int) -> bytes:
    """A tensor's entry in the header: name, dimensions, GGUF type and data offset."""
    return (
        gguf_string(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", kind, offset)
    )


def fault(draw, *kinds: str) -> str | None:
    """Mostly none: one of ``kinds`` in about a third of the draws."""
    return draw(st.sampled_from([None, None, None, None, None, None, *kinds]))


@st.composite
def gguf_value(draw, good: int | bytes | None = None) -> bytes:
    """A metadata value: ``good`` (a uint32, or a string) unless a fault replaces its type or value."""
    broken = fault(draw, "type", "value", "string", "array", "huge-array")
    if good is not None and broken is None:
        return good_value(good)
    if broken in ("array", "huge-array"):
        count = 2**40 if broken == "huge-array" else draw(st.integers(0, 4))
        item = draw(st.sampled_from([4, 8, 99]))
        body = b"".join(
            gguf_string(b"t") if item == 8 else struct.pack("<I", 1) for _ in range(min(count, 4))
        )
        return struct.pack("<IIQ", 9, item, count) + body
    if broken == "string":
        return struct.pack("<I", 8) + gguf_string(draw(st.sampled_from([b"llama", b"32", b"", b"gpt9"])))
    if broken == "type":
        return struct.pack("<I", draw(st.sampled_from([13, 99, 2**32 - 1])))
    kind, fmt = draw(st.sampled_from([(4, "<I"), (5, "<i"), (6, "<f"), (7, "<?"), (10, "<Q"), (12, "<d")]))
    value = draw(SIZES)
    value = {4: value % 2**32, 5: value % 2**31 - 1, 6: float(value), 7: bool(value)}.get(kind, value)
    return struct.pack("<I", kind) + struct.pack(fmt, value)


GOOD_KV = {
    "general.architecture": b"llama",
    "llama.block_count": 1,
    "llama.embedding_length": 8,
    "llama.attention.head_count": 2,
}


@st.composite
def gguf_file(draw) -> bytes:
    entries = [
        (key, draw(gguf_value(good))) for key, good in GOOD_KV.items() if fault(draw, "missing") is None
    ]
    entries += draw(st.lists(st.tuples(st.sampled_from(KEYS), gguf_value()), max_size=3))
    tensors = []
    for name in (b"blk.0.attn_q.weight", b"blk.0.attn_k.weight"):
        dims, kind, offset = [8, 8], 0, 256 * len(tensors)
        broken = fault(draw, "dims", "kind", "offset", "missing", "name")
        if broken == "missing":
            continue
        if broken == "dims":
            dims = draw(st.sampled_from([[], [64], [8, 8, 1], [0, 8], [2**40, 8], [9] * 9, [2**63, 2]]))
        elif broken == "kind":
            kind = draw(st.sampled_from([1, 8, 30, 1000]))
        elif broken == "offset":
            offset = draw(st.sampled_from([1, 2**62, 4096]))
        elif broken == "name":
            name = draw(st.sampled_from([b"blk.x.attn_q.weight", b"blk.99.attn_k.weight", b"", b"\xff"]))
        tensors.append((name, dims, kind, offset))
    magic = b"GGUF" if fault(draw, "magic") is None else draw(st.binary(min_size=4, max_size=4))
    header = magic + struct.pack(
        "<I", 3 if fault(draw, "version") is None else draw(st.sampled_from([1, 2, 4]))
    )
    lie = 0 if fault(draw, "count") is None else draw(st.sampled_from([1, 10**12]))
    header += struct.pack("<QQ", len(tensors) + lie, len(entries))
    for key, value in entries:
        header += gguf_string(key.encode()) + value
    for name, dims, kind, offset in tensors:
        header += tensor_info(name, dims, kind, offset)
    header += b"\0" * (-len(header) % 32)
    return mutated(header + draw(WEIGHTS), draw)


@fuzz(1000)
@given(data=gguf_file())
def test_fuzzed_gguf_headers_parse_or_give_one_error(data):
    """The header parser alone, as a reader by range calls it (``NeedMore``: fetch more bytes)."""
    try:
        header = gguf.parse_header(data, "fuzz")
        gguf.qk_tensors(header, gguf.config_of(header, "fuzz", "fuzz"))
    except gguf.NeedMore as more:
        assert more.size > len(data)
    except InputError as err:
        assert str(err).strip() and "\n" not in str(err).strip()


@fuzz(300)
@given(data=gguf_file())
def test_fuzzed_gguf_files_score_or_give_one_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("gguf") / "m.gguf"
    path.write_bytes(data)
    outcome(path)


def two_tensor_gguf(path: Path, metadata: dict[str, int | bytes]) -> str:
    """``outcome`` of a GGUF of ``metadata`` (a value of 2^32 or more as a uint64, else as ``good_value``
    writes it) and block 0's q and k, 8 × 8 zeros."""
    header = b"GGUF" + struct.pack("<IQQ", 3, 2, len(metadata))
    for key, value in metadata.items():
        wide = isinstance(value, int) and value >= 2**32
        header += gguf_string(key.encode()) + (struct.pack("<IQ", 10, value) if wide else good_value(value))
    for index, name in enumerate((b"blk.0.attn_q.weight", b"blk.0.attn_k.weight")):
        header += tensor_info(name, [8, 8], 0, 256 * index)
    header += b"\0" * (-len(header) % 32)
    path.write_bytes(header + bytes(512))
    return outcome(path)


@pytest.mark.parametrize("kv_heads", [2**63, 3, 16])
def test_a_gguf_kv_head_count_that_does_not_split_the_rows_gives_one_error(tmp_path, kv_heads):
    """Found by the fuzz test above: head_count_kv = 2^63 (a uint64) made the q/k unpermutation overflow
    torch's reshape with a TypeError instead of the source's one-line error."""
    message = two_tensor_gguf(tmp_path / "m.gguf", {**GOOD_KV, "llama.attention.head_count_kv": kv_heads})
    assert message != "ok" and "m.gguf" in message


@pytest.mark.parametrize("key", ["llama.attention.head_count", "llama.attention.head_count_kv"])
def test_a_gguf_head_count_beyond_every_tensor_gives_one_error_before_any_tensor_is_read(tmp_path, key):
    """A head count larger than any tensor dimension, with key_length set (so no divisibility check
    stops it): refused from the header, before per-head recipes (StableLM's q/k norms) loop over it."""
    metadata = {**GOOD_KV, "llama.attention.key_length": 4, key: 2**40}
    message = two_tensor_gguf(tmp_path / "m.gguf", metadata)
    assert "m.gguf" in message and f"{key} {2**40} exceeds every tensor dimension" in message


# --- safetensors ---------------------------------------------------------------------------------------------------

CONFIG = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1}
NAMES = [
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "__metadata__",
    "x",
]
DTYPES = ["F32", "F16", "BF16", "F64", "I8", "U8", "BOOL", "F8_E4M3", "C64", "F4", "?", 7]


@st.composite
def safetensors_file(draw) -> bytes:
    header: dict = {"__metadata__": {"format": "pt"}}
    position = 0
    for name in NAMES[:2]:
        entry = {"dtype": "F32", "shape": [8, 8], "data_offsets": [position, position + 256]}
        broken = fault(draw, "dtype", "shape", "offsets", "missing", "extra")
        if broken == "missing":
            continue
        if broken == "dtype":
            entry["dtype"] = draw(st.sampled_from(DTYPES))
        elif broken == "shape":
            entry["shape"] = draw(
                st.sampled_from([[0, 8], [], [64], [8, 8, 1], [-1, 8], "8", [2**40, 8], [4, 8]])
            )
        elif broken == "offsets":
            entry["data_offsets"] = draw(st.sampled_from([[0, 0], [1, 257], [-8, 0], [0, 2**50], [0], "x"]))
        elif broken == "extra":
            header[draw(st.sampled_from(NAMES[2:]))] = draw(
                st.sampled_from([{"format": 3}, [], {"dtype": "F32"}])
            )
        header[name] = entry
        position += 256
    text = json.dumps(header).encode()
    if fault(draw, "text") is not None:
        text = draw(st.binary(max_size=64))
    length = len(text) + (0 if fault(draw, "length") is None else draw(st.sampled_from([1, -1, 2**40])))
    return mutated(struct.pack("<Q", max(length, 0)) + text + draw(WEIGHTS), draw)


@fuzz(700)
@given(data=safetensors_file())
def test_fuzzed_safetensors_files_score_or_give_one_error(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("st")
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors").write_bytes(data)
    outcome(folder)


# --- config.json --------------------------------------------------------------------------------------------------

JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 16),
    st.sampled_from([2**31, 10**9, 10**12]),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["", "full_attention", "banana", "8"]),
    st.lists(st.sampled_from(["full_attention", "sliding_attention", 1, 0, "x"]), max_size=3),
    st.dictionaries(
        st.sampled_from(["num_attention_heads", "hidden_size", "x"]), st.integers(-1, 8), max_size=2
    ),
)
CONFIG_KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "sliding_window",
    "layer_types",
    "no_rope_layers",
    "quantization_config",
    "intermediate_size",
    "n_head",
    "n_layer",
    "text_config",
]


@st.composite
def config_file(draw) -> bytes:
    raw = {
        "model_type": draw(st.sampled_from(["llama", "mistral", "gemma", "qwen2", "bert", "gpt2", "nope", 3]))
    }
    if draw(st.booleans()):
        raw.update(CONFIG)
    raw.update(draw(st.dictionaries(st.sampled_from(CONFIG_KEYS), JSON_VALUES, max_size=5)))
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(max_size=32))
    return mutated(json.dumps(raw).encode(), draw)


@fuzz(1000)
@given(data=config_file())
def test_fuzzed_config_files_load_or_give_one_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("config") / "config.json"
    path.write_bytes(data)
    try:
        config = load_config(path, "fuzz")
        architecture_for(config).n_layers(config)
    except InputError as err:
        assert str(err).strip() and "\n" not in str(err).strip()


@pytest.fixture(autouse=True, scope="module")
def memory_stays_bounded():
    """Every fuzz test of this module together adds at most ``GROWTH_LIMIT_KB`` to the peak memory."""
    import transformers  # noqa: F401  (its import is not the parsers' memory)

    before = peak_kb()
    yield
    assert peak_kb() - before < GROWTH_LIMIT_KB

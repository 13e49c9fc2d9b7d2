"""A model's config.json: read as transformers reads it, or as it is written where that is the same thing.

transformers' config classes cost ≈ 2 CPU seconds to import (they pull in ``torch.distributed`` and
sympy), as much as the arithmetic of a 1B model. For the model types in ``READ_AS_WRITTEN`` the class
only holds the file's entries, fills in defaults for those it leaves out, and sets ``head_dim`` and
``num_key_value_heads`` from the other entries when unset, as the architecture maps do themselves.
Where such a file states every entry whose default a map would read, its entries are used as they are
(``FileConfig``), and transformers is not imported. Anything else goes through ``AutoConfig``, which
also says what is wrong with a malformed file. ``tests/test_config_files.py`` checks that both ways
give the same records.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .base import one_line

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_LAYOUT = ("hidden_size", "num_hidden_layers", "num_attention_heads")
READ_AS_WRITTEN: dict[str, tuple[str, ...]] = {
    "llama": _LAYOUT,
    "mixtral": _LAYOUT,
    "mistral": (*_LAYOUT, "sliding_window"),  # transformers' default: a 4096-token window
    "gemma": (*_LAYOUT, "head_dim", "num_key_value_heads"),  # defaults 256 and 16, not derived
}
"""model_type → the entries its config.json must state to be read as written (those whose class default
an architecture map would otherwise read)."""

_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim")
"""Entries a map reads as sizes: where stated, positive integers (``head_dim`` and the kv heads may be null)."""

MAX_LAYERS = 100_000
"""More layers than any model has (the largest have a few hundred): a count beyond it is refused before
transformers or an architecture map builds a list per layer (10⁹ layers would fill the memory)."""
MAX_NESTING = 64
"""Deepest a config's lists and objects nest (a real one: about 4); deeper is a damaged or hostile file."""
LAYER_COUNT = re.compile(r"(^|_)(layers|n_layer)$")

HEAD_COUNT = re.compile(r"(^|_)(heads|n_head)$")
"""Config fields that count attention heads (``num_attention_heads``, ``n_head``, ``num_key_value_heads`` ...)."""
REQUIRED_HEAD_COUNT = re.compile(r"(^|_)attention_heads$")
"""Head counts a config must state (besides ``num_attention_heads`` under its own name): transformers' defaults
for them (e.g. BERT's 12) would silently give wrong per-head scores."""


class FileConfig:
    """A config.json's entries as attributes, the way an architecture map reads a transformers config.

    Used for the model types of ``READ_AS_WRITTEN`` and for those transformers does not know (remote-code
    models: their code never runs). ``to_dict()`` is the entries as written.
    """

    def __init__(self, entries: dict[str, Any]) -> None:
        self._entries = dict(entries)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_entries":  # copy and pickle probe these before __init__
            raise AttributeError(name)
        try:
            return self._entries[name]
        except KeyError:
            raise AttributeError(f"config has no entry {name!r}") from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self._entries)


def load_config(config_file: Path, description: str) -> PretrainedConfig | FileConfig:
    """The config of ``config_file``, its head counts checked (stated, positive integers).

    A ``model_type`` transformers does not know (a remote-code model, never run) is read as written;
    whether any model type can be scored is the engine's question.
    """
    where = f"{description}: {config_file.name}"
    try:
        raw = json.loads(config_file.read_text())
    except RecursionError:
        raise InputError(f"{where}: nested deeper than any config; re-download it") from None
    except (OSError, ValueError) as err:
        raise InputError(f"{where}: cannot read it ({one_line(err)}); re-download it") from err
    if nesting(raw) > MAX_NESTING:
        raise InputError(
            f"{where}: nested more than {MAX_NESTING} deep, deeper than any config; re-download it"
        )
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise InputError(f"{where} has no model_type; pass a directory written by save_pretrained")
    _check_layer_counts(raw, where)
    if _reads_as_written(raw, model_type):
        config: PretrainedConfig | FileConfig = FileConfig(raw)
    else:
        from transformers import CONFIG_MAPPING, AutoConfig

        if model_type not in CONFIG_MAPPING:
            config = FileConfig(raw)
        else:
            try:
                config = AutoConfig.from_pretrained(config_file.parent, trust_remote_code=False)
            except Exception as err:  # transformers' validation raises TypeError, ValueError and its own
                raise InputError(
                    f"{where}: invalid for {model_type!r}: {one_line(err)}; fix the value"
                ) from err
    check_head_counts(config, raw, where)
    _check_per_layer_lists(config, where)
    return config


def nesting(value: Any) -> int:
    """How deep lists and objects nest in a JSON value (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack += [(inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item)]
    return deepest


def _check_layer_counts(raw: dict, where: str) -> None:
    """Layer counts (``num_hidden_layers``, ``n_layer``, nested ones too) within ``MAX_LAYERS``."""
    for key, value in raw.items():
        if isinstance(value, dict):
            _check_layer_counts(value, f"{where}: {key}")
        elif LAYER_COUNT.search(key) and isinstance(value, int) and value > MAX_LAYERS:
            raise InputError(f"{where}: {key} = {value} is more layers than any model has; fix the value")


PER_LAYER = ("layer_types", "no_rope_layers")
"""Config lists with one entry per layer, read by index by the architecture maps."""


def _check_per_layer_lists(config: PretrainedConfig | FileConfig, where: str) -> None:
    """Each of ``PER_LAYER`` the config has is a list with one entry per layer."""
    layers = getattr(config, "num_hidden_layers", None)
    for key in PER_LAYER:
        value = getattr(config, key, None)
        if value is None or not isinstance(layers, int):
            continue
        if not isinstance(value, list | tuple) or len(value) != layers:
            size = len(value) if isinstance(value, list | tuple) else type(value).__name__
            raise InputError(f"{where}: {key} has {size} entries for {layers} layers; fix the value")


def _reads_as_written(raw: dict, model_type: str) -> bool:
    """Whether the entries give exactly what transformers' class would: every listed entry stated, every
    size a positive integer (a null window or kv-head count or head width is what the class has too),
    and no ``layer_types`` (transformers checks its entries; a read as written file would not be)."""
    if model_type not in READ_AS_WRITTEN or not all(key in raw for key in READ_AS_WRITTEN[model_type]):
        return False
    if "layer_types" in raw:
        return False
    optional = ("num_key_value_heads", "head_dim", "sliding_window")
    return all(
        _positive_int(raw[key]) or (raw[key] is None and key in optional)
        for key in (*_SIZES, "sliding_window")
        if key in raw
    )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _head_count(config: PretrainedConfig | FileConfig, name: str) -> Any:
    """``config``'s ``name``; a per-layer attribute of a heterogeneous config (EmbeddingGemma 2's kv
    heads, which its global layers set apart) as the list of every layer's value, since transformers
    refuses to give one global value for it."""
    spec = vars(config).get("_heterogeneity_spec")
    if spec is not None and name in spec.per_layer_attributes:
        layers = config.per_layer_config
        return [getattr(layers[i], name, None) for i in range(config.num_hidden_layers)]
    return getattr(config, name, None)


def _none_by_default(cls: type, name: str) -> bool:
    """Whether the config class's own default of ``name`` is None (an optional part: stating null is
    stating the default, and a model that needed the count would not build without it)."""
    if dataclasses.is_dataclass(cls):
        return any(f.name == name and f.default is None for f in dataclasses.fields(cls))
    import inspect

    param = inspect.signature(cls.__init__).parameters.get(name)
    return param is not None and param.default is None


def check_head_counts(config: PretrainedConfig | FileConfig, raw: dict, where: str, path: str = "") -> None:
    """Every head count of ``config`` (and of its sub-configs) is a positive integer, and those that
    transformers would otherwise fill in with a default are stated in ``raw`` (the file's JSON)."""
    cls = type(config)
    as_written = isinstance(config, FileConfig)
    if as_written:  # only what the file states
        fields = set(raw)
    elif dataclasses.is_dataclass(cls):
        fields = {f.name for f in dataclasses.fields(cls)}
    else:
        fields = set(vars(config))
    aliases = {} if as_written else getattr(config, "attribute_map", {}) or {}
    required = {f for f in fields if REQUIRED_HEAD_COUNT.search(f)}
    canonical = aliases.get("num_attention_heads", "num_attention_heads")
    if canonical in fields and not as_written:
        required.add(canonical)
    for name in sorted(f for f in fields if HEAD_COUNT.search(f)):
        spellings = [name] + [alias for alias, target in aliases.items() if target == name]
        stated = any(key in raw for key in spellings)
        if name in required and not stated:
            raise InputError(
                f"{where} has no {path}{name} (transformers would assume a default head count); "
                "add the model's head count to it"
            )
        value = _head_count(config, name)
        if value is None and (not stated or _none_by_default(cls, name)):
            continue  # unset, or the class's own None: a part the model leaves out (Hiera's decoder, ZoeDepth's)
        values = value if isinstance(value, (list, tuple)) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise InputError(f"{where}: {path}{name} = {value!r} is not a positive integer; fix the value")
    if as_written:
        return
    from transformers import PretrainedConfig

    for key in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, key, None)
        if isinstance(sub, PretrainedConfig):
            nested = raw.get(key)
            check_head_counts(sub, nested if isinstance(nested, dict) else {}, where, f"{path}{key}.")

"""The second tiny-config candidate: the relations the default widths hold, kept at the tiny sizes,
and sizes the defaults leave unset given their tiny value (for configs whose first candidate fails)."""

from __future__ import annotations

import re
from typing import Any

from .sizes import COUNT_RULES, HEAD_COUNTS, HEAD_DIM, HEAD_WIDTHS, KV_HEAD_COUNTS, LAYER_KEYS, LAYERS, RULES
from .unset import fill_unset


def related(tiny: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``tiny`` with the relations the defaults' widths hold kept (each config and sub-config): sizes
    equal by default stay equal (kv heads = heads, Mimi's groups = width), a width that is heads × head
    width of its part stays so (Falcon-H1's ``mamba_d_ssm``), and rotary
    ``mrope_section`` splits sum to half the tiny rotary width."""
    out = dict(tiny)
    for key, value in tiny.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict):
            out[key] = related(value, defaults[key])
    sizes = {
        k: v
        for k, v in defaults.items()
        if isinstance(v, int)
        and not isinstance(v, bool)
        and v > 1
        and isinstance(out.get(k), int)
        and not any(re.search(pattern, str(k)) for pattern, _ in COUNT_RULES)
    }
    for value in set(sizes.values()):
        group = [k for k, v in sizes.items() if v == value]
        shrunk = [out[k] for k in group if out[k] != value]
        for k in group if shrunk else ():
            out[k] = max(shrunk)
    for a in sizes:  # heads × head width of one part (``mamba_*``), the first in the config's order
        part = str(a).split("_")[0]
        kin = [k for k in sizes if str(k).split("_")[0] == part and part not in ("num", "n", "max")]
        pairs = (
            (b, c) for b in kin for c in kin if "heads" in str(b) and "head" in str(c).replace("heads", "")
        )
        b, c = next(((b, c) for b, c in pairs if sizes[a] == sizes[b] * sizes[c]), (None, None))
        if b is not None and out[b] * out[c] > 1:
            out[a] = out[b] * out[c]
    _rotary_sections(out)
    _layer_shares(out, defaults)
    _layer_indices(out)
    return out


def _layer_indices(out: dict[str, Any]) -> None:
    """Indices of layers a tower's features are read from (Molmo2's ``vision_feature_layer``: [24, 18])
    become the last tiny layers, in the same order (negative ones count from the end already)."""
    for key, value in out.items():
        values = value if isinstance(value, list) else [value]
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        if re.search(r"feature_layers?$", str(key)) and values and ints and max(values) >= LAYERS:
            above = sorted({v for v in values if v >= 0}, reverse=True)
            moved = [max(0, LAYERS - 1 - above.index(v)) if v >= 0 else v for v in values]
            out[key] = moved if isinstance(value, list) else moved[0]


def _layer_shares(out: dict[str, Any], defaults: dict[str, Any]) -> None:
    """A count of some of the layers (Gemma 3n's ``num_kv_shared_layers``) keeps its share of the tiny
    layers, rounded down."""
    key = next((k for k in defaults if re.search(LAYER_KEYS, str(k)) and isinstance(out.get(k), int)), None)
    layers = defaults.get(key) if key else None
    if not isinstance(layers, int) or layers <= out[key]:
        return
    for name, value in defaults.items():
        some = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= layers
        if some and name != key and str(name).endswith("_layers") and out.get(name) == value:
            out[name] = value * out[key] // layers


def _rotary_sections(out: dict[str, Any]) -> None:
    """``mrope_section`` (in the config or its rope parameters) rescaled to sum to half the rotary width."""
    width = out.get("qk_rope_head_dim") or out.get("head_dim") or HEAD_DIM
    for key, holder in [(None, out)] + [(k, v) for k, v in out.items() if isinstance(v, dict)]:
        sections = holder.get("mrope_section")
        if isinstance(sections, list) and sections and all(isinstance(x, int) for x in sections):
            half, total = width // 2, sum(sections)
            scaled = [max(1, x * half // total) for x in sections]
            scaled[0] += half - sum(scaled)
            if key is not None:
                out[key] = holder = dict(holder)  # a copy: the first candidate keeps its own
            holder["mrope_section"] = scaled


KV_PAIRS = (
    ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_kv_head"),
    ("num_attention_heads", "n_heads", "n_head", "num_heads"),
)
"""The names of a config's kv-head and head counts."""


def equal_heads(tiny: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``tiny`` with its kv heads as many as its heads in each config and sub-config whose defaults
    have the two counts equal (multi-head attention stays so)."""
    out = dict(tiny)
    for key, value in tiny.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict):
            out[key] = equal_heads(value, defaults[key])
    heads = next((k for k in KV_PAIRS[1] if isinstance(defaults.get(k), int)), None)
    for kv in KV_PAIRS[0]:
        if heads and defaults.get(kv) == defaults[heads] and isinstance(out.get(heads), int):
            out[kv] = out[heads]
    return out


def unset_sizes(entries: dict[str, Any]) -> dict[str, Any]:
    """Entries whose size is unset (None) where the name says which size: the tiny value; unset
    structure the model reads (:func:`fill_unset`) filled."""
    out = fill_unset(entries)
    for key, value in entries.items():
        if isinstance(value, dict) and ("model_type" in value or str(key).endswith("_config")):
            out[key] = unset_sizes(value)
        elif value is None and (tiny := tiny_value(str(key))) is not None:
            out[key] = tiny
    return out


def tiny_value(name: str) -> int | float | None:
    """The tiny value an entry's name implies (``dropout``, ``layerdrop``: 0.0), else None."""
    if re.search(r"drop", name):  # dropout, layerdrop
        return 0.0
    if re.search(r"^prediction_length$", name):  # time series: the horizon has no default
        return 8
    if re.search(r"(^|_)budget$", name):  # tokens a sparse attention keeps: all of a tiny sequence
        return 512
    if re.search(r"(^|_)compress_ratio$", name):  # keys pooled into one block of a sparse attention's index
        return 2
    return next((tiny for pattern, tiny in RULES if re.search(pattern, name)), None)


def equal_chunks(model_type: str) -> bool:
    """Whether transformers' loading rules for ``model_type`` split a fused projection into equal q, k
    and v parts (GradiumPhonon's ``in_proj``, NeMo's ``w_qkv``): its checkpoints have as many kv heads
    as heads, and a tiny model with fewer could not be read back."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.core_model_loading import Chunk

    for rule in get_checkpoint_conversion_mapping(model_type) or []:
        targets = " ".join(getattr(rule, "target_patterns", None) or [])
        chunks = any(isinstance(op, Chunk) for op in getattr(rule, "operations", None) or [])
        if chunks and re.search(r"(^|[._])(k_proj|key)\b", targets):
            return True
    return False


def kv_as_heads(entries: dict[str, Any]) -> None:
    """Every kv head count of ``entries`` (and its sub-configs) set to the query heads beside it."""
    heads = next(
        (v for k, v in entries.items() if re.search(HEAD_COUNTS, str(k)) and isinstance(v, int)), None
    )
    for key, value in entries.items():
        if isinstance(value, dict):
            kv_as_heads(value)
        elif re.search(KV_HEAD_COUNTS, str(key)) and isinstance(value, int) and heads:
            entries[key] = heads


def sums(out: dict[str, Any], before: dict[str, Any]) -> None:
    """A width that is by default the sum of two of its parts, named as it is with one word more
    (LongCat-Flash's ``qk_head_dim`` = ``qk_nope_head_dim`` + ``qk_rope_head_dim``), stays their sum; a
    head width with a tiny value of its own keeps it (dots3's ``head_dim``, by chance the sum of two)."""
    ints = {k: v for k, v in before.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}
    for key, value in ints.items():
        if re.search(HEAD_WIDTHS, str(key)):
            continue
        words = str(key).split("_")
        parts = [
            k
            for k in ints
            if len(k.split("_")) == len(words) + 1
            and any(k.split("_")[:i] + k.split("_")[i + 1 :] == words for i in range(len(words) + 1))
        ]
        pairs = [(a, b) for a in parts for b in parts if a < b and ints[a] + ints[b] == value]
        if len(pairs) == 1 and all(isinstance(out.get(p), int) for p in pairs[0]):
            out[key] = out[pairs[0][0]] + out[pairs[0][1]]


def _derived(cls, entries: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """Sizes the config computes from its fields (no field of its own) that no rule shrank, such as
    BROS's ``dim_bbox_projection`` = width / heads: left out, so that the config derives them again from
    the tiny sizes rather than keep the default model's (kept where the config then does not build)."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        return []
    fields = {f.name for f in dataclasses.fields(cls)}
    return [
        k
        for k, v in entries.items()
        if k not in fields and isinstance(v, int) and not isinstance(v, bool) and v == defaults.get(k)
    ]


def variants(model_type: str, cls, entries: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """``entries`` to try: with as many kv heads as heads where the loading rules cut q/k/v in equal parts
    (``equal_chunks``), first without the derived sizes (``_derived``), then as they are; entries no
    config takes (the saving transformers' version, a path, architectures) left out."""
    for drop in ("transformers_version", "_name_or_path", "architectures"):
        entries.pop(drop, None)
    if equal_chunks(model_type):
        kv_as_heads(entries)
    derived = _derived(cls, entries, base)
    return [{k: v for k, v in entries.items() if k not in derived}, entries] if derived else [entries]

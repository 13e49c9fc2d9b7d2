"""A tiny config of any ``model_type``, derived from its defaults by the names of its entries.

Sizes are shrunk generically (widths to 64, 4 query heads and 2 kv heads of width 16, 2 layers, a
128-token vocabulary, 4 experts, 2 per token, images of 4×4 patches) wherever a default is larger, in
the config and each sub-config; token ids the smaller vocabulary no longer holds are renumbered;
per-layer lists keep one layer of each kind. Where that config's model does not build, the next of
:func:`candidates` is tried (the defaults' relations kept, then the counts only).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from . import validators
from .relations import KV_PAIRS, equal_heads, related, sums, tiny_value, unset_sizes, variants
from .sizes import COUNT_RULES, HEADS, KV_HEADS, LAYER_KEYS, LAYERS, RULES, WIDTH, all_layers
from .unset import fill_unset

TOKEN_ID = re.compile(r"(_token_id|_token_index|_token_ids|_id)$")
PER_LAYER = ("layer_types", "mlp_only_layers", "no_rope_layers", "layers_block_type", "block_types")


def shrink(entries: dict[str, Any], widths: bool = True) -> dict[str, Any]:
    """``entries`` (a config's ``to_dict()``) with every size made tiny, sub-configs included;
    ``widths=False``: the counts only (for a config whose widths are tied by rules of its own)."""
    entries = fill_unset(_native_backbone(entries))
    out = dict(entries)
    layers_before = next(
        (v for k, v in entries.items() if re.search(LAYER_KEYS, k) and isinstance(v, int)), None
    )
    for key, value in entries.items():
        if isinstance(value, dict) and ("model_type" in value or str(key).endswith("_config")):
            out[key] = shrink(value, widths)
            continue
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            out[key] = _shrunk_list(str(key), value, widths)
            continue
        if isinstance(value, bool) or not isinstance(value, int) or _counts_stages(entries, value):
            continue
        for pattern, tiny in RULES if widths else COUNT_RULES:
            if re.search(pattern, key):
                out[key] = min(value, tiny) if value > 0 else value
                break
    all_layers(entries, out, layers_before)
    _fit_patches(out)
    sums(out, entries)
    _fit_windows(out)
    unscheduled = dict(out)
    _hybrid_schedule(out)
    scheduled = {k for k in out if out[k] != unscheduled.get(k)}
    if "kv_lora_rank" in out and isinstance(out.get("num_key_value_heads"), int):
        out["num_key_value_heads"] = out.get("num_attention_heads", HEADS)  # MLA: one key per head
    _per_layer_lists(out, entries, layers_before, widths, scheduled)
    if out.get("attn_layer_period") == 2 and out.get("num_hidden_layers") == 2:
        # two periods: a block shared by the attention layers needs two of them (Zamba)
        out["num_hidden_layers"] = 4
        for key in PER_LAYER:
            if isinstance(out.get(key), list) and len(out[key]) == 2:
                out[key] = out[key] * 2
    if "sliding_window" in out and out["sliding_window"] is None and _names_sliding(out):
        out["sliding_window"] = 512  # sliding layers with no default window (Step3p5's text model)
    _stage_outputs(out, entries)
    _renumber_tokens(out)
    if out.get("attention_type") == "block_sparse":
        # BigBird's block-sparse attention falls back to full attention on a sequence this short by
        # replacing its attention module mid-forward (the same q/k projections), where no hook on the
        # module sees its q·k: the tiny model has the full attention from the start
        out["attention_type"] = "original_full"
    return out


TIMM_RESNET = re.compile(r"^(resnet|resnetv1)\d+[a-z]?$")


def _native_backbone(entries: dict[str, Any]) -> dict[str, Any]:
    """A timm ResNet backbone (the DETR family's default) as transformers' own ResNet with the same
    stages: a ResNet has no attention, the attention scored lies after it, and timm cannot be installed
    beside the CPU torch here."""
    backbone = entries.get("backbone_config")
    if not (isinstance(backbone, dict) and backbone.get("model_type") == "timm_backbone"):
        return entries
    if not TIMM_RESNET.match(str(backbone.get("backbone", ""))):
        return entries
    from transformers import ResNetConfig

    native = ResNetConfig(
        out_indices=backbone.get("out_indices"), num_channels=backbone.get("num_channels", 3)
    )
    return entries | {"backbone_config": native.to_dict()}


LIST_RULES = (
    (r"(^|_)(depths|num_layers|layers|blocks)$", 1),
    (r"(^|_)(num_heads|heads)$", 2),
    (r"(key_value_heads|kv_heads)", KV_HEADS),
)
LIST_WIDTHS = re.compile(r"(^|_)(hidden_sizes|embed_dims?|dims|channels|widths|hidden_dims)$")


def _shrunk_list(key: str, value: list[int], widths: bool = True) -> list[int]:
    """Per-stage lists: depths to 1, head counts to 2, widths to 32 (keeping the stages)."""
    for pattern, tiny in LIST_RULES if widths else LIST_RULES[:1]:
        if re.search(pattern, key):
            return [min(v, tiny) for v in value]
    if widths and LIST_WIDTHS.search(key):
        return [min(v, 32) for v in value]
    return value


def _names_sliding(out: dict[str, Any]) -> bool:
    """Whether another entry names sliding attention in use (not ``use_sliding_window: False``)."""
    others = {k: v for k, v in out.items() if k != "sliding_window"}
    return any(
        ("sliding" in str(k) and v not in (None, False, 0)) or "sliding" in str(v) for k, v in others.items()
    )


def _counts_stages(entries: dict[str, Any], value: int) -> bool:
    """Whether ``value`` is the length of a per-stage depth list (Swin's ``num_layers`` = its stage count)."""
    return any(
        re.search(r"(^|_)depths$", str(k)) and isinstance(v, list) and len(v) == value
        for k, v in entries.items()
    )


def _stage_outputs(out: dict[str, Any], before: dict[str, Any]) -> None:
    """A backbone's ``out_indices`` name stages of the default depth: they become the last stages of
    the tiny one (as many as before, the depth grown to hold them; the stem stays the stem)."""
    names, indices = before.get("stage_names"), before.get("out_indices")
    if not isinstance(names, list) or not isinstance(indices, list) or not names:
        return
    stages = len(names) - 1
    key = next((k for k, v in before.items() if re.search(LAYER_KEYS, str(k)) and v == stages), None)
    if key is None or _counts_stages(before, stages) or not isinstance(out.get(key), int):
        return
    picked = sorted({i for i in indices if isinstance(i, int) and i > 0})
    out[key] = depth = max(out[key], len(picked))
    moved = {i: depth - len(picked) + rank + 1 for rank, i in enumerate(picked)}
    out["out_indices"] = [moved.get(i, i) for i in indices]
    out["stage_names"] = [names[0]] + [f"stage{i}" for i in range(1, depth + 1)]
    out["out_features"] = [out["stage_names"][i] for i in out["out_indices"]]


def _hybrid_schedule(out: dict[str, Any]) -> None:
    """Hybrids that place attention by index or period: attention at layer 1 of the 2 (0 is the other kind)."""
    if "attn_layer_indices" in out:  # Bamba's default (None) has no attention layer at all
        out["attn_layer_indices"] = [1]
    kinds = out.get("layer_types")
    if isinstance(kinds, list) and len(set(kinds)) == 1 and re.search("linear|mamba", str(kinds[0])):
        out["layer_types"] = [kinds[0], "attention"]  # a default without attention layers (GraniteMoeHybrid)
    if isinstance(out.get("attn_layer_period"), int):
        out["attn_layer_period"], out["attn_layer_offset"] = 2, 1
    for key, value in list(out.items()):
        if "pattern" in str(key) and isinstance(value, str) and len(value) > LAYERS:
            kinds = "".join(dict.fromkeys(value))
            out[key] = kinds
            layers = next((k for k in out if re.search(LAYER_KEYS, str(k)) and isinstance(out[k], int)), None)
            if layers:
                out[layers] = len(kinds)


def _fit_patches(out: dict[str, Any]) -> None:
    """Images of whole patches, 4 a side at least; a map keyed by the vision tower's patch count (Aria's
    ``projector_patch_to_query_dict``) gains the tiny count."""
    patch = out.get("patch_size")
    if isinstance(patch, int) and isinstance(out.get("image_size"), int):
        out["image_size"] = max(out["image_size"], 4 * patch) // patch * patch
    vision = out.get("vision_config") if isinstance(out.get("vision_config"), dict) else {}
    if isinstance(vision.get("patch_size"), int) and isinstance(vision.get("image_size"), int):
        count = (vision["image_size"] // vision["patch_size"]) ** 2
        for key, value in list(out.items()):
            if (
                "patch" in str(key)
                and isinstance(value, dict)
                and value
                and all(isinstance(k, int) for k in value)
            ):
                out[key] = {count: min(value.values()), **value}


def _fit_windows(out: dict[str, Any]) -> None:
    """A hierarchical (Swin-like) tower's windows fit its last stage: each stage halves the patch grid of
    the tiny image, and a window wider than the last stage's grid would not match its position table."""
    window, depths, patch, image = (out.get(k) for k in ("window_size", "depths", "patch_size", "image_size"))
    if not (isinstance(window, int) and isinstance(depths, list) and len(depths) > 1):
        return
    if isinstance(patch, int) and isinstance(image, int) and patch > 0:
        out["window_size"] = max(1, min(window, image // patch // 2 ** (len(depths) - 1)))


def _per_layer_lists(
    out: dict[str, Any], before: dict[str, Any], layers: int | None, widths: bool, scheduled: set[str]
) -> None:
    """Lists with one entry per layer keep the first layer of each kind; the layer count follows. The lists
    ``_hybrid_schedule`` rewrote (``scheduled``) stay as it wrote them."""
    key = next((k for k in out if re.search(LAYER_KEYS, k) and isinstance(out[k], int)), None)
    if key is None or not layers or _counts_stages(before, layers):
        return
    kinds = next(
        (before[k] for k in PER_LAYER if isinstance(before.get(k), list) and len(before[k]) == layers), None
    )
    if kinds is None:
        keep = list(range(min(layers, LAYERS)))
    else:
        firsts = {}
        for i, kind in enumerate(kinds):
            firsts.setdefault(str(kind), i)
        keep = sorted(firsts.values())[:4]
        if len(keep) < LAYERS:
            keep = sorted(set(keep) | set(range(min(layers, LAYERS))))
    out[key] = len(keep)
    for name, value in before.items():
        if isinstance(value, list) and len(value) == layers and layers > 1 and name not in scheduled:
            heads = "heads" in str(name) and len(out[name]) == layers  # Sapiens2's kv heads per layer
            out[name] = [(out[name] if heads else value)[i] for i in keep]
        elif _by_layer(value, layers):
            kept = {int(k): v for k, v in value.items() if int(k) in keep}
            out[name] = {
                f"{keep.index(i):0{len(str(len(keep) - 1))}d}": shrink(v, widths)
                if isinstance(v, dict)
                else v
                for i, v in kept.items()
            }


def _by_layer(value: Any, layers: int) -> bool:
    """A dict keyed by layer index (Gemma 4's ``per_layer_config``: ``{"05": {"head_dim": 512}}``)."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(str(k).isdigit() and int(k) < layers and isinstance(v, dict) for k, v in value.items())
    )


def _renumber_tokens(out: dict[str, Any]) -> None:
    """Token ids beyond the tiny vocabulary (a multimodal config's: its text model's) get distinct ids
    at its top."""
    vocab = out.get("vocab_size") or (out.get("text_config") or {}).get("vocab_size")
    if not isinstance(vocab, int):
        return
    spare = vocab - 1
    for key, value in list(out.items()):
        if not TOKEN_ID.search(key) or key.startswith(("decoder_start", "forced")) and value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
            out[key] = spare
            spare -= 1
        elif (
            isinstance(value, list)
            and all(isinstance(v, int) for v in value)
            and any(v >= vocab for v in value)
        ):
            out[key] = [v if v < vocab else (spare := spare - 1) + 1 for v in value]
    if out.get("decoder_start_token_id") is None and "decoder_start_token_id" in out:
        out["decoder_start_token_id"] = 0


def reserved_tokens(entries: dict[str, Any]) -> set[int]:
    """Token ids the config names (pad, image, audio ...): inputs avoid them."""
    ids: set[int] = set()
    for key, value in entries.items():
        if isinstance(value, dict):
            ids |= reserved_tokens(value)
        elif TOKEN_ID.search(str(key)) and isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
        elif TOKEN_ID.search(str(key)) and isinstance(value, list):
            ids |= {v for v in value if isinstance(v, int)}
    return ids


def _mrope_sections(cls, entries: dict[str, Any]) -> None:
    """Multimodal rotary sections (t, h, w) that fit the tiny head where the config has none: the
    modules' defaults split the rotary half of a full-size head. A config class says it takes them
    (``ignore_keys_at_rope_validation``); sections the config has are rescaled by ``shrink``."""
    from transformers import CONFIG_MAPPING

    for key, sub in (getattr(cls, "sub_configs", None) or {}).items():
        if isinstance(entries.get(key), dict):
            kind = entries[key].get("model_type")
            _mrope_sections(CONFIG_MAPPING[kind] if kind in CONFIG_MAPPING else sub, entries[key])
    rope = entries.get("rope_parameters")
    takes = "mrope_section" in getattr(cls, "ignore_keys_at_rope_validation", ())
    if not takes or not isinstance(rope, dict) or not rope:
        return
    head = entries.get("head_dim") or entries.get("hidden_size", WIDTH) // entries.get(
        "num_attention_heads", HEADS
    )
    kinds = entries.get("layer_types") if isinstance(entries.get("layer_types"), list) else []
    per_kind = [rope[k] for k in dict.fromkeys(kinds) if isinstance(rope.get(k), dict)]  # keyed by layer kind
    for params in per_kind or [rope]:
        if "mrope_section" not in params:
            factor = params.get("partial_rotary_factor", entries.get("partial_rotary_factor", 1.0))
            half = int(head * factor) // 2
            params["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]


def optional_towers(model_type: str) -> list[str]:
    """The sub-configs ``model_type``'s defaults leave unset (None) that its config class declares: towers a
    checkpoint may have and the default model lacks (Gemma 4's vision and audio towers)."""
    from transformers import CONFIG_MAPPING, PretrainedConfig

    cls = CONFIG_MAPPING[model_type]
    try:
        entries = defaults(cls)
    except Exception:  # noqa: BLE001 — no defaults: the tiny config's own error says why
        return []
    subs = getattr(cls, "sub_configs", None) or {}
    return [
        key
        for key, sub in subs.items()
        if key in entries
        and entries[key] is None
        and isinstance(sub, type)
        and issubclass(sub, PretrainedConfig)
    ]


def tiny_config(model_type: str, towers: tuple[str, ...] = ()):
    """The tiny config of ``model_type``: the first of :func:`candidates` whose model builds (on the
    meta device), attributes the model reads and the config lacks added; else the first error.
    ``towers``: these of its ``optional_towers`` set to their own defaults, shrunk alike."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    base = defaults(cls) | {key: cls.sub_configs[key]().to_dict() for key in towers}
    first: Exception | None = None
    for tried, entries in enumerate(candidates(base)):
        _mrope_sections(cls, entries)
        for variant in variants(model_type, cls, entries, base):
            for _ in range(VALIDATOR_REPAIRS):
                try:
                    return _repaired(cls.from_dict(variant), MAX_PARAMS if tried else None)
                except Exception as err:  # noqa: BLE001 — a repair, the defaults' sizes or the next candidate
                    first = first or (err if variant.keys() >= entries.keys() else None)  # not re-derived
                    variant = validators.repaired(variant, str(err))
                    if variant is None:
                        break
    raise first


def equal_heads_config(config):
    """``config`` (a tiny one) with as many kv heads as heads wherever its defaults have as many (a model
    may read one count where the other is meant: Moonshine Streaming's q, Granite Speech 5's grouping):
    the second tiny config of a type refused with fewer kv heads than heads; None where that changes
    nothing or does not build."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[config.model_type]
    entries = config.to_dict()
    kept = equal_heads(entries, cls().to_dict())
    if kept == entries:
        return None
    try:
        return _repaired(cls.from_dict(kept))
    except Exception:  # noqa: BLE001 — no second config: the first one's result stands
        return None


def defaults(cls) -> dict[str, Any]:
    """``cls()``'s entries; where its own validator refuses its defaults (Gemma 4's assistant over Gemma
    4's text defaults), those of the config its sub-configs' defaults make once repaired as it says."""
    from transformers import CONFIG_MAPPING

    try:
        return cls().to_dict()
    except Exception as err:  # noqa: BLE001 — repaired below if the message says how
        first, message = err, str(err)
    entries: dict[str, Any] | None = {}
    for key, spec in (getattr(cls, "sub_configs_defaults", None) or {}).items():
        kind, kwargs = getattr(spec, "model_type", None), getattr(spec, "init_kwargs", None) or {}
        sub = CONFIG_MAPPING[kind] if kind in CONFIG_MAPPING else getattr(spec, "config_class", spec)
        entries[key] = sub(**kwargs).to_dict()
    for _ in range(VALIDATOR_REPAIRS):
        entries = validators.repaired(entries, message)
        if entries is None:
            break
        try:
            return cls(**entries).to_dict()
        except Exception as err:  # noqa: BLE001
            message = str(err)
    raise first


VALIDATOR_REPAIRS = 6
"""Entries the config's validator asks for, set one message at a time (each names what it checks next)."""


def candidates(defaults: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The tiny entries to try, most shrunk first (each derived only when the one before fails): all
    sizes; then the defaults' relations kept and sizes they leave unset (``head_dim: None``) given their
    tiny value; then the counts only (widths tied by the config's own rules: axial factors summing to the
    width ...)."""
    tiny = shrink(defaults)
    yield tiny
    yield unset_sizes(related(tiny, defaults))
    yield unset_sizes(shrink(defaults, widths=False))


MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")


MAX_PARAMS = 64_000_000
"""A fallback candidate (default widths) is taken only up to this size: its forward pass stays quick."""


def _repaired(config, max_params: int | None = None, tries: int = 8):
    """``config`` once its model builds on the meta device (with at most ``max_params``); an attribute
    the model reads that the config (or a sub-config) lacks gets the tiny value its name implies, else the
    value another of its configs has (Qwen3-Omni-MoE's talker reads the vision tower's
    ``spatial_merge_size``); a kv-head count gets the config's head count."""
    from ..architectures.discovery.attention import meta_model

    for _ in range(tries):
        try:
            params = sum(p.numel() for p in meta_model(config).parameters())
            if max_params is not None and params > max_params:
                raise ValueError(f"{params} parameters at the default widths, over {max_params}")
            return config
        except AttributeError as err:
            found = MISSING.search(str(err))
            owner = found and next((c for c in _configs(config) if type(c).__name__ == found[1]), None)
            value = found and tiny_value(found[2])
            heads = next((getattr(owner, n) for n in KV_PAIRS[1] if hasattr(owner, n)), None)
            if found and found[2] in KV_PAIRS[0] and isinstance(heads, int):
                value = heads  # a config without a kv-head count has as many as heads (Moonshine Streaming)
            if found and value is None:  # the value another config of the model has (its vision tower's)
                value = next((vars(c)[found[2]] for c in _configs(config) if found[2] in vars(c)), None)
            if owner is None or value is None:
                raise
            setattr(owner, found[2], value)
    raise ValueError(f"attributes still missing after {tries} repairs")


def _configs(config) -> list:
    """``config`` and its sub-configs, depth first."""
    from transformers import PretrainedConfig

    subs = [v for v in vars(config).values() if isinstance(v, PretrainedConfig)]
    return [config] + [c for sub in subs for c in _configs(sub)]

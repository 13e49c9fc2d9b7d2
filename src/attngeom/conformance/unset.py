"""Entries a config's defaults leave unset (None or empty) that its model reads as structure: per-layer
kind lists, rotary parameters per layer kind, token maps. Each gets the least the model's own code asks
for (a model that reads them does not build without)."""

from __future__ import annotations

import importlib
import re
from typing import Any

from .sizes import COUNT_RULES, EXPERTS, LAYER_KEYS, PER_TOKEN

TOP_K = dict(COUNT_RULES)[PER_TOKEN]

KIND_LISTS = re.compile(r"(^|_)layer_types$")
"""Per-layer kind lists (``layer_types``, DeepSeek-OCR 2's ``mlp_layer_types``)."""
ATTENTION_KIND = "full_attention"
"""The layer kind transformers' configs name plain attention by (``ALLOWED_LAYER_TYPES``)."""
MAPS = re.compile(r"(^|_)map$")
"""A map the model reads (Chameleon's and Emu3's token ``vocabulary_map``, Granite 4 Vision's
``deepstack_layer_map``): empty, of the type the config declares (the mapped extras are not used)."""
DEFAULT_THETA = 10_000.0


def fill_unset(entries: dict[str, Any]) -> dict[str, Any]:
    """``entries`` (one config's, not its sub-configs') with its unset structure filled."""
    out = dict(entries)
    experts = any(re.search(EXPERTS, str(k)) and isinstance(v, int) and v > 1 for k, v in entries.items())
    cls = _config_class(entries.get("model_type"))
    declared = {
        k: str(v)
        for c in reversed(getattr(cls, "__mro__", ()))
        for k, v in vars(c).get("__annotations__", {}).items()
    }
    for key, value in entries.items():
        if value is None and MAPS.search(str(key)):
            out[key] = [] if declared.get(key, "").startswith("list") else {}
        elif (
            value is None and declared.get(key, "").startswith("str") and (example := _example(cls, str(key)))
        ):
            out[key] = example  # a string the model parses, none given: the documentation's example
        elif value is None and experts and re.search(PER_TOKEN, str(key)):
            out[key] = TOP_K  # a router's top-k left unset (DeepSeek-OCR 2's text model): its tiny value
    layers_key = next((k for k in out if re.search(LAYER_KEYS, str(k)) and isinstance(out[k], int)), None)
    for key, value in entries.items():
        if value is None and KIND_LISTS.search(str(key)) and layers_key:
            kinds = compared_kinds(out.get("model_type"), str(key))
            if kinds and str(key) == "layer_types" and ATTENTION_KIND not in kinds:
                kinds.append(ATTENTION_KIND)  # the others name what is not attention (LFM2-MoE's "conv")
            if kinds:
                out[layers_key] = layers = max(out[layers_key], len(kinds))
                out[key] = kinds + kinds[-1:] * (layers - len(kinds))
    kinds = out.get("layer_types")
    if out.get("rope_parameters") == {} and isinstance(kinds, list) and kinds:
        # rotary parameters keyed by layer kind, none given (Cohere Compass): each kind the default rotary
        theta = out.get("rope_theta") or DEFAULT_THETA
        out["rope_parameters"] = {
            kind: {"rope_type": "default", "rope_theta": theta} for kind in dict.fromkeys(kinds)
        }
    return out


def compared_kinds(model_type: Any, key: str) -> list[str]:
    """The string kinds the model's code compares ``config.<key>[i]`` with, in the order they appear."""
    text = modeling_source(model_type)
    found = re.findall(rf"config\.{re.escape(key)}\[[^\]]+\]\s*[!=]=\s*[\"'](\w+)[\"']", text)
    return list(dict.fromkeys(found))


def _config_class(model_type: Any) -> type | None:
    from transformers import CONFIG_MAPPING

    return (
        CONFIG_MAPPING[model_type] if isinstance(model_type, str) and model_type in CONFIG_MAPPING else None
    )


def _example(cls: type | None, key: str) -> str | None:
    """The first example value (``e.g. `"1/4"```) the config class's documentation gives for ``key``."""
    doc = getattr(cls, "__doc__", None) or ""
    entry = re.search(rf"^\s*{re.escape(key)} \(.*?\):\n(.*?)(?=^\s*\w+ \(|\Z)", doc, re.S | re.M)
    found = entry and re.search(r"e\.g\. `\"([^\"`]+)\"`", entry[1])
    return found[1] if found else None


def modeling_source(model_type: Any) -> str:
    """The text of the modeling module beside ``model_type``'s config class ("" where there is none)."""
    from transformers import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return ""
    name = CONFIG_MAPPING[model_type].__module__.replace(".configuration_", ".modeling_")
    try:
        with open(importlib.import_module(name).__file__ or "", encoding="utf-8") as handle:
            return handle.read()
    except (ImportError, OSError):
        return ""

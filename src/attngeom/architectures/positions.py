"""What a decoder layer's form leaves out by its config: rotary (unless a NoPE layer), the scale, a window.

Read from the config of the model (or sub-model) the attention belongs to, layer by layer: a layer listed
as ``sliding_attention`` in ``layer_types`` (or every layer where a bare ``sliding_window`` is set) adds
``sliding_window``; a NoPE layer (``no_rope_layers[i] == 0``: SmolLM3, Llama 4) has no ``rotary``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def window(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """``sliding_window`` (or Llama 4's ``chunked_attention``) where layer i attends to a local span only."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        local = {"sliding_attention": "sliding_window", "chunked_attention": "chunked_attention"}
        kind = layer_types[i] if i < len(layer_types) else None
        return (local[kind],) if kind in local else ()
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return ("sliding_window",)
    return ()


def uses_rope(config: PretrainedConfig, i: int) -> bool:
    """False for a NoPE layer: ``no_rope_layers[i] == 0`` (SmolLM3, Llama 4; 1 means rotary)."""
    no_rope_layers = getattr(config, "no_rope_layers", None)
    return bool(no_rope_layers[i]) if no_rope_layers and i < len(no_rope_layers) else True


def rotary_terms(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """Rotary (unless a NoPE layer), the 1/√d_h scale, and a local window where the config sets one."""
    return (("rotary",) if uses_rope(config, i) else ()) + ("scale",) + window(config, i)

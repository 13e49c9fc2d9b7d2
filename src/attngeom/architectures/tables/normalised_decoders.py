"""Decoders that normalise q and k after the projection and whose NoPE layers only their modeling code
knows: the score is a form up to per-token scalars (``qk_norms.normalised`` folds the gains in).

- EXAONE 4: per-head q/k RMSNorm; with a sliding window configured only the local layers are rotary.
- StableLM: ``qk_layernorm`` runs one bias-free LayerNorm per head (a list of norms, which discovery does
  not fold).
- Llama 4's text model: rotary layers attend within chunks and L2-normalise q and k per head; its NoPE
  layers scale q by a per-position temperature.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from ..base import Architecture, AttentionLayer, TensorReader
from ..positions import rotary_terms, uses_rope, window
from ..qk_norms import QK_L2NORM, QK_LAYERNORM, QK_NORM_PER_HEAD, QK_NORM_WHOLE, normalised
from .decoders import NOPE_BY_CODE, decoder_architecture, llama_layers

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _rms_normalised(layers: Iterator[AttentionLayer], reader: TensorReader) -> Iterator[AttentionLayer]:
    """Each layer's ``q_norm`` / ``k_norm`` RMSNorm gains folded in."""
    for layer in layers:
        attention = f"layers.{layer.layer}.self_attn"
        q_gain = reader.get(f"{attention}.q_norm.weight").double()
        k_gain = reader.get(f"{attention}.k_norm.weight").double()
        form = QK_NORM_PER_HEAD if q_gain.numel() == layer.head_dim else QK_NORM_WHOLE
        yield normalised(layer, q_gain, k_gain, form)


def _exaone4_terms(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """EXAONE 4: with a sliding window configured, only the local layers are rotary (global ones NoPE)."""
    local = window(config, i)
    rotary = getattr(config, "sliding_window", None) is None or bool(local)
    return (("rotary",) if rotary else ()) + ("scale",) + local


def _exaone4_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return _rms_normalised(llama_layers(config, reader, _exaone4_terms), reader)


def _stacked_gains(reader: TensorReader, name: str, heads: int) -> torch.Tensor:
    """StableLM's per-head LayerNorms ``{name}.norms.{h}.weight``, concatenated head after head."""
    return torch.cat([reader.get(f"{name}.norms.{h}.weight") for h in range(heads)])


def _stablelm_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """StableLM: partial rotary; optional ``qk_layernorm``, one bias-free LayerNorm per head."""
    for layer in llama_layers(config, reader):
        if getattr(config, "qk_layernorm", False):
            attention = f"layers.{layer.layer}.self_attn"
            q_gain = _stacked_gains(reader, f"{attention}.q_layernorm", layer.n_heads)
            k_gain = _stacked_gains(reader, f"{attention}.k_layernorm", layer.n_kv_heads)
            layer = normalised(layer, q_gain, k_gain, QK_LAYERNORM, centre=True)
        yield layer


def llama4_text_layers(
    config: PretrainedConfig, reader: TensorReader, prefix: str = ""
) -> Iterator[AttentionLayer]:
    """Llama 4: rotary layers attend within chunks and L2-normalise q and k per head (``use_qk_norm``);
    the NoPE layers (``no_rope_layers[i] == 0``) scale q by a per-position temperature instead."""
    temperature = ("attn_temperature_tuning",) if config.attn_temperature_tuning else ()

    def terms(c: PretrainedConfig, i: int) -> tuple[str, ...]:
        return rotary_terms(c, i) + (() if uses_rope(c, i) else temperature)

    for layer in llama_layers(config, reader, terms, prefix):
        if config.use_qk_norm and uses_rope(config, layer.layer):
            layer = replace(layer, form=QK_L2NORM)
        yield layer


ARCHITECTURES: list[Architecture] = [
    decoder_architecture(
        ("exaone4",),
        _exaone4_layers,
        "per-head q/k RMSNorm folded; global layers NoPE when windowed",
        why=NOPE_BY_CODE,
    ),
    decoder_architecture(
        ("stablelm",),
        _stablelm_layers,
        "partial rotary; per-head q/k LayerNorm folded (qk_layernorm)",
        why="its qk_layernorm is a list of LayerNorms, one per head: no norm kind discovery folds",
    ),
    decoder_architecture(
        ("llama4_text",),
        llama4_text_layers,
        "rotary layers: chunked, q/k L2-normalised per head; NoPE layers: temperature-scaled q",
        why="q and k L2-normalised per head by a function, no norm module: discovery refuses it",
    ),
]

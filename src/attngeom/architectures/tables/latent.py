"""DeepSeek-V2's table: multi-head latent attention (``architectures.mla``), its content and rotary parts
scored as separate stacks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..base import Architecture, AttentionLayer, TensorReader
from ..mla import mla_layer

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _mla_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    for i in range(config.num_hidden_layers):
        yield from mla_layer(config, reader, f"layers.{i}.self_attn", i)


MLA = Architecture(
    model_types=("deepseek_v2",),
    modality="language",
    objective="autoregressive",
    layers=_mla_layers,
    n_layers=lambda c: 2 * c.num_hidden_layers,
    notes="multi-head latent attention: content and rotary parts as separate stacks",
    stacks=("decoder", "decoder_rope"),
    why="discovery's rotary (decoder_rope) part does not validate against the forward pass",
)

ARCHITECTURES: list[Architecture] = [MLA]

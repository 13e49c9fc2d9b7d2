"""Audio encoders discovery does not score: WavLM and w2v-BERT 2.0.

WavLM has wav2vec 2.0's layout; its attention adds a gated relative position bias to the scores (its gate
reads the query; outside the form). The convolutional relative position embedding is added to the input of
the first layer, so it is part of x, not of the form. w2v-BERT 2.0 is a Conformer with Shaw relative
positions (``relative_key``: q·k + q·r_{i−j}, the position term left out) and adapter layers over the
conv-pooled sequence (stack ``adapter``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..base import Architecture, AttentionLayer, TensorReader, separate_layers, separate_qk

if TYPE_CHECKING:
    from transformers import PretrainedConfig

CONFORMER_POSITIONS = {
    "relative": ("relative_position",),
    "relative_key": ("relative_position",),
    "rotary": ("rotary",),
}


def _wavlm_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return separate_layers(
        config,
        reader,
        "encoder.layers.{i}.attention",
        "q_proj",
        "k_proj",
        stack="encoder",
        left_out=("scale", "relative_position"),
    )


def _conformer_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Conformer blocks ``encoder.layers.i.self_attn.linear_{q,k}``; w2v-BERT's adapter layers (stack
    ``adapter``: self-attention over the conv-pooled sequence, width ``output_hidden_size``, no positions)."""
    kind = config.position_embeddings_type
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        prefix = f"encoder.layers.{i}.self_attn"
        tensors = separate_qk(reader, f"{prefix}.linear_q", f"{prefix}.linear_k")
        if kind == "relative":  # the content bias u is added to every query: part of the query bias
            tensors["b_q"] = tensors["b_q"] + reader.get(f"{prefix}.pos_bias_u").flatten()
        yield AttentionLayer(
            stack="encoder",
            layer=i,
            **tensors,
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=config.hidden_size // heads,
            left_out=("bias", "scale", *CONFORMER_POSITIONS.get(kind, ())),
        )
    if config.model_type == "wav2vec2-bert" and config.add_adapter:
        yield from separate_layers(
            config,
            reader,
            [f"adapter.layers.{i}.self_attn" for i in range(config.num_adapter_layers)],
            "linear_q",
            "linear_k",
            stack="adapter",
            left_out=("scale",),
            head_dim=config.output_hidden_size // heads,
        )


def _conformer_count(config: PretrainedConfig) -> int:
    adapter = config.model_type == "wav2vec2-bert" and config.add_adapter
    return config.num_hidden_layers + (config.num_adapter_layers if adapter else 0)


W2V_BERT = Architecture(
    model_types=("wav2vec2-bert",),
    modality="audio",
    objective="bidirectional",
    layers=_conformer_layers,
    n_layers=_conformer_count,
    notes="w2v-BERT 2.0: Conformer; relative_key positions left out; adapter layers as stack adapter",
    stacks=("encoder", "adapter"),
    why=(
        "its adapter layers (add_adapter, on in the released checkpoints) are off in the tiny model: "
        "discovery leaves them unscored"
    ),
)


ARCHITECTURES: list[Architecture] = [
    W2V_BERT,
    Architecture(
        model_types=("wavlm",),
        modality="audio",
        objective="bidirectional",
        layers=_wavlm_layers,
        n_layers=lambda c: c.num_hidden_layers,
        stacks=("encoder",),
        why="its attention runs neither in the tiny model's forward pass nor on its own: discovery refuses it",
    ),
]

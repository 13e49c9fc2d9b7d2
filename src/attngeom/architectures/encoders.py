"""Bidirectional (encoder-only) language models."""

from __future__ import annotations

from collections.abc import Iterator

from transformers import PretrainedConfig

from .base import Architecture, AttentionLayer, TensorReader, linear


def _bert_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    for i in range(config.num_hidden_layers):
        prefix = f"encoder.layer.{i}.attention.self"
        yield AttentionLayer(
            stack="encoder",
            layer=i,
            w_q=linear(reader.get(f"{prefix}.query.weight")),
            w_k=linear(reader.get(f"{prefix}.key.weight")),
            b_q=reader.get(f"{prefix}.query.bias"),
            b_k=reader.get(f"{prefix}.key.bias"),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=head_dim,
            left_out=("bias", "scale", "absolute_position_embeddings"),
        )


BERT = Architecture(
    model_types=("bert",),
    modality="language",
    objective="bidirectional",
    layers=_bert_layers,
    n_layers=lambda c: c.num_hidden_layers,
    stacks=("encoder",),
)

ARCHITECTURES: list[Architecture] = [BERT]

"""Autoregressive (decoder-only) language models."""

from __future__ import annotations

from collections.abc import Iterator

from transformers import PretrainedConfig

from .base import Architecture, AttentionLayer, TensorReader, head_dim_of, linear


def _llama_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = head_dim_of(config, heads)
    has_bias = reader.has("layers.0.self_attn.q_proj.bias")
    for i in range(config.num_hidden_layers):
        prefix = f"layers.{i}.self_attn"
        yield AttentionLayer(
            stack="decoder",
            layer=i,
            w_q=linear(reader.get(f"{prefix}.q_proj.weight")),
            w_k=linear(reader.get(f"{prefix}.k_proj.weight")),
            b_q=reader.get(f"{prefix}.q_proj.bias") if has_bias else None,
            b_k=reader.get(f"{prefix}.k_proj.bias") if has_bias else None,
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=(("bias",) if has_bias else ()) + ("rotary", "scale"),
        )


LLAMA = Architecture(
    model_types=("llama",),
    modality="language",
    objective="autoregressive",
    layers=_llama_layers,
    n_layers=lambda c: c.num_hidden_layers,
    stacks=("decoder",),
)

ARCHITECTURES: list[Architecture] = [LLAMA]

"""TransformerLens ``HookedTransformer`` (``attngeom.sources.lens``): W_Q and W_K per head, as it holds them.

Its parameters are already in the x W convention, one ``[d_model, d_head]`` block per head; the blocks
are laid side by side, head-major, as every other map does. A bidirectional ``attention_dir`` (a
HookedEncoder-style config) is an encoder stack, a causal one a decoder stack. A bridge's per-head q/k
norms (``q_norm.gain``) are folded in as discovery folds them (``qk_norms.normalised``).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..base import Architecture, AttentionLayer, TensorReader
from ..qk_norms import QK_LAYERNORM, QK_NORM_PER_HEAD, normalised

MODEL_TYPES = ("hooked_transformer",)
LEFT_OUT = {
    "standard": ("bias", "scale", "absolute_position_embeddings"),
    "rotary": ("bias", "scale", "rotary"),
}


def _heads_side_by_side(weight: torch.Tensor) -> torch.Tensor:
    """``[heads, d_model, d_head]`` → ``[d_model, heads · d_head]``, head h in columns h·d_head onwards."""
    heads, d_model, d_head = weight.shape
    return weight.permute(1, 0, 2).reshape(d_model, heads * d_head)


def _layers(config, reader: TensorReader) -> Iterator[AttentionLayer]:
    grouped = config.n_kv_heads != config.n_heads
    left_out = LEFT_OUT.get(
        config.positional_embedding_type, ("bias", "scale", config.positional_embedding_type)
    )
    qk_norm = getattr(config, "qk_norm", "")
    for i in range(config.n_layers):
        prefix = f"blocks.{i}.attn"
        layer = AttentionLayer(
            stack="encoder" if config.bidirectional else "decoder",
            layer=i,
            w_q=_heads_side_by_side(reader.get(f"{prefix}.W_Q")),
            w_k=_heads_side_by_side(reader.get(f"{prefix}._W_K" if grouped else f"{prefix}.W_K")),
            n_heads=config.n_heads,
            n_kv_heads=config.n_kv_heads,
            head_dim=config.d_head,
            left_out=left_out,
        )
        if qk_norm:
            gains = (reader.get(f"{prefix}.{n}_norm.gain").double() for n in "qk")
            form = QK_LAYERNORM if qk_norm == "layer" else QK_NORM_PER_HEAD
            layer = normalised(layer, *gains, form, centre=qk_norm == "layer")
        yield layer


ARCHITECTURES = [
    Architecture(
        model_types=MODEL_TYPES,
        modality="language",
        objective="autoregressive",
        layers=_layers,
        n_layers=lambda config: config.n_layers,
        notes="TransformerLens HookedTransformer (in memory): W_Q/W_K [heads, d_model, d_head], _W_K under GQA",
        stacks=("decoder", "encoder"),
        why="TransformerLens' layout (blocks.{i}.attn.W_Q), not a transformers model",
    )
]

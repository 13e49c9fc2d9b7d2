"""Longformer (and LED's encoder): local windowed attention plus global attention with its own projections.

Every token attends to a window around it through ``query`` / ``key``; tokens marked global attend to,
and are attended by, every token. A global token's own row uses separate projections ``query_global``
/ ``key_global``: a second bilinear form of the same layer input. The two are scored as two stacks,
``encoder`` (local, ``sliding_window`` left out) and ``encoder_global``, never mixed in one median.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..base import Architecture, AttentionLayer, TensorReader, separate_qk

if TYPE_CHECKING:
    from transformers import PretrainedConfig

TWO_FORMS = "two forms per module (query/key and query_global/key_global): discovery reads one"


GLOBAL_STACK = "encoder_global"


def longformer_stacks(
    reader: TensorReader, prefix: str, n_layers: int, heads: int, hidden_size: int
) -> Iterator[AttentionLayer]:
    """The local stack, then the global stack; ``prefix`` (with ``{i}``) names a layer's self-attention."""
    head_dim = hidden_size // heads
    for stack, q, k, window in (
        ("encoder", "query", "key", ("sliding_window",)),
        (GLOBAL_STACK, "query_global", "key_global", ()),
    ):
        for i in range(n_layers):
            attention = prefix.format(i=i)
            yield AttentionLayer(
                stack=stack,
                layer=i,
                **separate_qk(reader, f"{attention}.{q}", f"{attention}.{k}"),
                n_heads=heads,
                n_kv_heads=heads,
                head_dim=head_dim,
                left_out=("bias", "scale", "absolute_position_embeddings") + window,
            )


def _longformer_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return longformer_stacks(
        reader,
        "encoder.layer.{i}.attention.self",
        config.num_hidden_layers,
        config.num_attention_heads,
        config.hidden_size,
    )


ARCHITECTURES: list[Architecture] = [
    Architecture(
        model_types=("longformer",),
        modality="language",
        objective="bidirectional",
        layers=_longformer_layers,
        n_layers=lambda c: 2 * c.num_hidden_layers,
        notes="local (windowed) and global projections as two stacks",
        stacks=("encoder", GLOBAL_STACK),
        why=TWO_FORMS,
    ),
]

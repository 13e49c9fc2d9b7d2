"""Encoders with Transformer-XL-style relative attention: Funnel Transformer and XLNet.

Their score is a sum of terms: content (q + u)·k, position (q + v)·r and segment (q + s)·e. The
content term is the bilinear form of the layer input; its learned query bias u (``r_w_bias``) is the
form's query bias b_q. The position and segment terms are left out (``relative_position``,
``segment_bias``); the 1/√d_h scale too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..base import Architecture, AttentionLayer, TensorReader, linear

if TYPE_CHECKING:
    from transformers import PretrainedConfig

LEFT_OUT = ("scale", "relative_position", "segment_bias")

_FUNNEL_WITHOUT_DECODER = ("FunnelBaseModel", "FunnelForSequenceClassification", "FunnelForMultipleChoice")
"""Funnel classes built on ``FunnelBaseModel``: the pooled encoder only, no upsampling decoder."""


def _funnel_attention(
    reader: TensorReader, prefix: str, stack: str, index: int, config, cross: bool = False
) -> AttentionLayer:
    """``q_head`` (no bias) + ``r_w_bias``, ``k_head`` (biased); ``cross``: queries of pooled tokens."""
    return AttentionLayer(
        stack=stack,
        layer=index,
        w_q=linear(reader.get(f"{prefix}.q_head.weight")),
        w_k=linear(reader.get(f"{prefix}.k_head.weight")),
        b_q=reader.get(f"{prefix}.r_w_bias").flatten(),
        b_k=reader.get(f"{prefix}.k_head.bias"),
        n_heads=config.n_head,
        n_kv_heads=config.n_head,
        head_dim=config.d_head,
        left_out=("bias",) + LEFT_OUT,
        cross=cross,
    )


def _funnel_applications(config: PretrainedConfig) -> Iterator[tuple[int, int, bool]]:
    """(block, layer in block, pooled) of every encoder attention call, in order (a block may repeat its
    layers); ``pooled``: the call's queries are the mean-pooled tokens and its keys the unpooled ones (the
    first call of every block after the first, with ``pool_q_only``)."""
    for block, size in enumerate(config.block_sizes):
        for layer in range(size):
            for repeat in range(config.block_repeats[block]):
                yield block, layer, block > 0 and layer == 0 and repeat == 0 and config.pool_q_only


def _funnel_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Funnel: the encoder's blocks, one row per application; a call whose queries read the mean-pooled
    tokens and keys the unpooled ones is a cross form (``encoder_cross``: keys from another input than the
    queries, as discovery calls PVT's reduced keys); then the upsampling ``decoder`` layers where the
    checkpoint has them (``FunnelModel``, not ``FunnelBaseModel``)."""
    for index, (block, layer, pooled) in enumerate(_funnel_applications(config)):
        prefix = f"encoder.blocks.{block}.{layer}.attention"
        stack = "encoder_cross" if pooled else "encoder"
        yield _funnel_attention(reader, prefix, stack, index, config, cross=pooled)
    if not reader.has("decoder.layers.0.attention.q_head.weight"):
        return
    for i in range(config.num_decoder_layers):
        yield _funnel_attention(reader, f"decoder.layers.{i}.attention", "decoder", i, config)


def _funnel_count(config: PretrainedConfig) -> int:
    encoder = sum(1 for _ in _funnel_applications(config))
    without_decoder = set(config.architectures or ()) & set(_FUNNEL_WITHOUT_DECODER)
    return encoder + (0 if without_decoder else config.num_decoder_layers)


def _xlnet_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """XLNet: ``rel_attn.q`` / ``rel_attn.k`` are (d, H, d_h) parameters already in the x W convention;
    the content stream's query bias ``r_w_bias``; no key bias."""
    heads, head_dim = config.n_head, config.d_head
    for i in range(config.n_layer):
        prefix = f"layer.{i}.rel_attn"
        yield AttentionLayer(
            stack="encoder",
            layer=i,
            w_q=reader.get(f"{prefix}.q").flatten(1),
            w_k=reader.get(f"{prefix}.k").flatten(1),
            b_q=reader.get(f"{prefix}.r_w_bias").flatten(),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=head_dim,
            left_out=("bias",) + LEFT_OUT,
        )


ARCHITECTURES: list[Architecture] = [
    Architecture(
        model_types=("funnel",),
        modality="language",
        objective="bidirectional",
        layers=_funnel_layers,
        n_layers=_funnel_count,
        notes="content term (q + r_w_bias)·k; pooled blocks (a block's first call: pooled queries, unpooled "
        "keys, encoder_cross); decoder = the upsampling layers of FunnelModel",
        stacks=("encoder", "encoder_cross", "decoder"),
        why=(
            "discovery finds no attention in it (q_head/k_head projections, the head width in its config "
            "only); with block_repeats above 1 one module is applied with pooled, then unpooled queries (two "
            "forms)"
        ),
    ),
    Architecture(
        model_types=("xlnet",),
        modality="language",
        objective="bidirectional",
        layers=_xlnet_layers,
        n_layers=lambda c: c.n_layer,
        notes="permutation LM; content stream (q + r_w_bias)·k; position and segment terms left out",
        stacks=("encoder",),
        why="q and k are einsum parameters, not projection modules: nothing for discovery to find",
    ),
]

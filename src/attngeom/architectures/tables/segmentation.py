"""Segmentation models with an image encoder and a query decoder: SAM and Mask2Former.

Their decoders add position embeddings to the q and k inputs (not to v): those layers are scored as
position-augmented forms; token ↔ image attentions are cross stacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..base import (
    Architecture,
    ArchitectureError,
    AttentionLayer,
    TensorReader,
    fused_layers,
    fused_qkv,
    linear,
)
from .seq2seq import POSITIONS_IN_INPUT
from .vision import qk_block, vision_architecture
from .vision_stages import swin_layers

if TYPE_CHECKING:
    from transformers import PretrainedConfig

POSITION_FORM = "position_augmented: (x + p) W_q W_kᵀ (x + p)ᵀ, p the position embedding added to q/k inputs"
POSITION_CROSS_FORM = "position_augmented cross: (x + p) W_q W_kᵀ (y + p_y)ᵀ, another sequence's keys"


def _sam_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """SAM: the image encoder (fused ``qkv`` with columns [q | k | v], windowed and global layers, decomposed
    relative positions outside the form) and the two-way mask decoder.

    The decoder's attention projects to a narrower internal width (hidden / downsample rate); the
    callers add point / image position embeddings to the q and k inputs (not to v), except in the first
    self-attention. Its token → image and image → token attentions are cross stacks; the final token →
    image attention is the last layer of ``cross_token_to_image``.
    """
    vision = config.vision_config
    heads, d = vision.num_attention_heads, vision.hidden_size
    positions = ("relative_position",) if vision.use_rel_pos else ()
    positions += ("absolute_position_embeddings",) if vision.use_abs_pos else ()
    yield from fused_layers(
        reader,
        "vision_encoder.layers.{i}.attn.qkv",
        vision.num_hidden_layers,
        heads,
        d // heads,
        vision.qkv_bias,
        ("scale",) + positions,
        stack="encoder",
    )
    decoder = config.mask_decoder_config
    heads = decoder.num_attention_heads

    def attention(stack: str, index: int, name: str, form: str, cross: bool) -> AttentionLayer:
        w_q = linear(reader.get(f"mask_decoder.transformer.{name}.q_proj.weight"))
        return AttentionLayer(
            stack=stack,
            layer=index,
            w_q=w_q,
            w_k=linear(reader.get(f"mask_decoder.transformer.{name}.k_proj.weight")),
            b_q=reader.get(f"mask_decoder.transformer.{name}.q_proj.bias"),
            b_k=reader.get(f"mask_decoder.transformer.{name}.k_proj.bias"),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=w_q.shape[1] // heads,
            left_out=("bias", "scale"),
            form=form,
            cross=cross,
        )

    layers = decoder.num_hidden_layers
    for i in range(layers):
        yield attention("decoder", i, f"layers.{i}.self_attn", "standard" if i == 0 else POSITION_FORM, False)
    for i in range(layers):
        yield attention(
            "cross_token_to_image", i, f"layers.{i}.cross_attn_token_to_image", POSITION_CROSS_FORM, True
        )
    yield attention("cross_token_to_image", layers, "final_attn_token_to_image", POSITION_CROSS_FORM, True)
    for i in range(layers):
        yield attention(
            "cross_image_to_token", i, f"layers.{i}.cross_attn_image_to_token", POSITION_CROSS_FORM, True
        )


def _mask2former_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Mask2Former: the Swin backbone (stack ``backbone``) and the masked-attention transformer decoder.

    The decoder's self-attention (stack ``decoder``) and its masked cross-attention to the multi-scale
    pixel features (stack ``cross``, an ``nn.MultiheadAttention`` with fused ``in_proj`` rows [q; k; v])
    see position-augmented q/k inputs. The pixel decoder's multi-scale deformable attention samples
    features at predicted offsets: it is not a bilinear form and is not scored.
    """
    backbone = config.backbone_config
    if backbone.model_type == "swin":
        yield from swin_layers(backbone, reader, stack="backbone")
    elif backbone.model_type != "resnet":  # a ResNet backbone has no attention
        raise ArchitectureError(
            f"mask2former with a {backbone.model_type!r} backbone is not supported; supported backbones: swin, resnet"
        )
    heads, d = config.num_attention_heads, config.hidden_dim
    layers = config.decoder_layers - 1  # the first query update happens before the decoder layers
    for i in range(layers):
        yield qk_block(
            reader,
            "decoder",
            i,
            (f"transformer_module.decoder.layers.{i}.self_attn.q_proj",),
            (f"transformer_module.decoder.layers.{i}.self_attn.k_proj",),
            heads,
            d // heads,
            left_out=("bias", "scale"),
            form=POSITION_FORM,
        )
    for i in range(layers):
        prefix = f"transformer_module.decoder.layers.{i}.cross_attn.in_proj"
        yield AttentionLayer(
            stack="cross",
            layer=i,
            **fused_qkv(reader.get(f"{prefix}_weight"), reader.get(f"{prefix}_bias")),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=d // heads,
            left_out=("bias", "scale", "attention_mask"),
            form=POSITION_CROSS_FORM,
            cross=True,
        )


def _mask2former_count(config: PretrainedConfig) -> int:
    backbone = sum(config.backbone_config.depths) if config.backbone_config.model_type == "swin" else 0
    return backbone + 2 * (config.decoder_layers - 1)


ARCHITECTURES: list[Architecture] = [
    vision_architecture(
        ("sam",),
        _sam_layers,
        n_layers=lambda c: (
            c.vision_config.num_hidden_layers + 3 * c.mask_decoder_config.num_hidden_layers + 1
        ),
        stacks=("encoder", "decoder", "cross_token_to_image", "cross_image_to_token"),
        objective="encoder-decoder",
        notes="mask decoder: position-augmented q/k inputs; token↔image attentions are cross stacks",
        why=POSITIONS_IN_INPUT,
    ),
    vision_architecture(
        ("mask2former",),
        _mask2former_layers,
        n_layers=_mask2former_count,
        stacks=("backbone", "decoder", "cross"),
        objective="encoder-decoder",
        notes="pixel decoder's deformable attention is not a bilinear form: not scored",
        why=POSITIONS_IN_INPUT + "; discovery misses its masked cross-attention stack",
    ),
]

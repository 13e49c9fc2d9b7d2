"""Vision maps discovery does not give: ViT-MAE's pre-training decoder, DPT's backbones, ImageGPT's pixels.

The ViT family itself (ViT, DeiT, BEiT, DINOv2, the video models) is discovered; these tables read the
ViT layout where a checkpoint holds more than the tiny base model (ViT-MAE's decoder, a DPT backbone) or
where its input is not what discovery would name (ImageGPT's colour clusters). Names on disk
(``attention.attention.query``) differ from the names in memory in transformers 5.x (``attention.q_proj``);
both are asked for. ``qk_block`` also reads the towers of ``towers`` and ``multimodal``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from ..base import Architecture, AttentionLayer, TensorReader, fused_qkv, linear
from ..registry import REGISTRY
from .composite import Scoped, Tower, tower_layers

if TYPE_CHECKING:
    from transformers import PretrainedConfig

VIT_LEFT_OUT = ("bias", "scale", "absolute_position_embeddings")


def optional(reader: TensorReader, names: tuple[str, ...]) -> torch.Tensor | None:
    """The first of ``names`` that exists (in order, as ``get`` looks), or None."""
    for name in names:
        if reader.has(name):
            return reader.get(name)
    return None


def qk_block(
    reader: TensorReader,
    stack: str,
    index: int,
    q_names: tuple[str, ...],
    k_names: tuple[str, ...],
    heads: int,
    head_dim: int,
    *,
    k_bias: bool = True,
    q_bias_names: tuple[str, ...] = (),
    left_out: tuple[str, ...] = VIT_LEFT_OUT,
    form: str = "standard",
    cross: bool = False,
) -> AttentionLayer:
    """One attention block whose q/k projections are separate linears (any of the name alternatives).

    A checkpoint saved without q/k biases (``qkv_bias=False``) has no bias tensors: none are used, and
    ``bias`` is not listed as left out. ``q_bias_names``: further names of the query bias (VideoMAE's
    ``q_bias``).
    """
    b_q = optional(reader, tuple(f"{n}.bias" for n in q_names) + q_bias_names)
    b_k = optional(reader, tuple(f"{n}.bias" for n in k_names)) if k_bias else None
    if b_q is None and b_k is None:
        left_out = tuple(term for term in left_out if term != "bias")
    return AttentionLayer(
        stack=stack,
        layer=index,
        w_q=linear(reader.get(*(f"{n}.weight" for n in q_names))),
        w_k=linear(reader.get(*(f"{n}.weight" for n in k_names))),
        b_q=b_q,
        b_k=b_k,
        n_heads=heads,
        n_kv_heads=heads,
        head_dim=head_dim,
        left_out=left_out,
        form=form,
        cross=cross,
    )


def vit_names(disk: str, memory: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """q/k names: on disk ``{disk}.attention.query``, in memory ``{m}.q_proj`` for each alternative m."""
    return (f"{disk}.attention.query", *(f"{m}.q_proj" for m in memory)), (
        f"{disk}.attention.key",
        *(f"{m}.k_proj" for m in memory),
    )


def _vit_stack(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ViT layout: ``encoder.layer.i.attention.attention.query`` on disk; ``layers.i.attention.q_proj``
    or ``encoder.layer.i.attention.q_proj`` in memory."""
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        names = vit_names(
            f"encoder.layer.{i}.attention", (f"layers.{i}.attention", f"encoder.layer.{i}.attention")
        )
        yield qk_block(reader, "encoder", i, *names, heads, config.hidden_size // heads)


def _vit_mae_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ViT-MAE: the encoder, and the pre-training decoder when the checkpoint has it (ViTMAEForPreTraining)."""
    yield from _vit_stack(config, reader)
    disk, memory = "decoder_encoder.layer.{i}.attention", "decoder_layers.{i}.attention"
    if not (
        reader.has(disk.format(i=0) + ".attention.query.weight")
        or reader.has(memory.format(i=0) + ".q_proj.weight")
    ):
        return
    heads = config.decoder_num_attention_heads
    for i in range(config.decoder_num_hidden_layers):
        names = vit_names(disk.format(i=i), (memory.format(i=i),))
        yield qk_block(reader, "decoder", i, *names, heads, config.decoder_hidden_size // heads)


def _dpt_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """DPT: a ViT encoder (DPT-Hybrid: after a BiT stem, which has no attention), or a backbone model
    (``backbone_config``) as stack ``backbone``: Swin v2 by its table, a ViT-layout one (DINOv2, BEiT) as ViT's."""
    if config.backbone_config is None or config.is_hybrid:
        yield from _vit_stack(config, reader)
    elif config.backbone_config.model_type in REGISTRY:
        yield from tower_layers(DPT_BACKBONE, config, reader)
    else:
        for layer in _vit_stack(config.backbone_config, Scoped(reader, ("backbone.",))):
            yield replace(layer, stack="backbone")


DPT_BACKBONE = (Tower("backbone", "backbone_config", ("backbone.",), "vision"),)


def _dpt_count(config: PretrainedConfig) -> int:
    if config.backbone_config is None or config.is_hybrid:
        return config.num_hidden_layers
    if config.backbone_config.model_type in REGISTRY:
        sub, architecture = DPT_BACKBONE[0].architecture(config)
        return architecture.n_layers(sub)
    return config.backbone_config.num_hidden_layers


def _layers(config: PretrainedConfig) -> int:
    return config.num_hidden_layers


def vision_architecture(model_types: tuple[str, ...], layers, **kwargs) -> Architecture:
    """A vision family: one ``encoder`` stack, bidirectional, ``num_hidden_layers`` layers unless given."""
    kwargs.setdefault("n_layers", _layers)
    kwargs.setdefault("stacks", ("encoder",))
    kwargs.setdefault("objective", "bidirectional")
    return Architecture(model_types=model_types, modality="vision", layers=layers, **kwargs)


def _imagegpt_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ImageGPT is GPT-2 over pixel tokens: ``c_attn`` a Conv1D (d × 3d, x W form), columns [q | k | v]."""
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        weight, bias = reader.get(f"h.{i}.attn.c_attn.weight"), reader.get(f"h.{i}.attn.c_attn.bias")
        yield AttentionLayer(
            stack="decoder",
            layer=i,
            **fused_qkv(weight.T, bias),  # the transposed Conv1D weight is the nn.Linear layout
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=config.hidden_size // heads,
            left_out=VIT_LEFT_OUT,
        )


ARCHITECTURES: list[Architecture] = [
    vision_architecture(
        ("vit_mae",),
        _vit_mae_layers,
        n_layers=lambda c: c.num_hidden_layers + c.decoder_num_hidden_layers,
        stacks=("encoder", "decoder"),
        notes="decoder only in pre-training checkpoints",
        why=(
            "its pre-training checkpoints add a decoder the tiny base model lacks: discovery leaves it "
            "unscored"
        ),
    ),
    vision_architecture(
        ("dpt",),
        _dpt_layers,
        n_layers=_dpt_count,
        stacks=("encoder", "backbone"),
        notes="ViT encoder, or a BEiT / Swin v2 / DINOv2 backbone scored by its own map (stack backbone)",
        why=(
            "a backbone_config (DINOv2, BEiT, Swin v2) replaces its ViT encoder, saved under the backbone's "
            "old names: discovery validated the tiny model's ViT only"
        ),
    ),
    Architecture(
        model_types=("imagegpt",),
        modality="vision",
        objective="autoregressive",
        layers=_imagegpt_layers,
        n_layers=_layers,
        stacks=("decoder",),
        why="its input_ids are colour clusters of pixels: discovery's modality would be language",
    ),
]

"""Vision transformers with the ViT layout: image and video patch encoders, ViT-MAE's decoder, DPT.

DINO checkpoints are model_type ``vit`` and DiT checkpoints ``beit``: they are scored by those maps.
Names on disk (``attention.attention.query``) differ from the names in memory in transformers 5.x
(``attention.q_proj``); both are asked for. Video models (VideoMAE, ViViT, TimeSformer) add space-time
position embeddings to the input (part of x); TimeSformer's divided attention has two forms per block.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from . import gpt_lineage
from .base import Architecture, AttentionLayer, TensorReader, fused_qkv, linear
from .composite import Tower, tower_layers

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


def _vit_stack(
    config: PretrainedConfig,
    reader: TensorReader,
    k_bias: bool = True,
    left_out: tuple[str, ...] = VIT_LEFT_OUT,
    legacy_q_bias: bool = False,
) -> Iterator[AttentionLayer]:
    """ViT layout: ``encoder.layer.i.attention.attention.query`` on disk; ``layers.i.attention.q_proj``
    (ViT, DeiT, ViViT) or ``encoder.layer.i.attention.q_proj`` (DINOv2) in memory.

    ``legacy_q_bias``: the query bias may be saved as ``attention.attention.q_bias`` (VideoMAE).
    """
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        disk = f"encoder.layer.{i}.attention"
        names = vit_names(disk, (f"layers.{i}.attention", f"encoder.layer.{i}.attention"))
        yield qk_block(
            reader,
            "encoder",
            i,
            *names,
            heads,
            config.hidden_size // heads,
            k_bias=k_bias,
            q_bias_names=(f"{disk}.attention.q_bias",) if legacy_q_bias else (),
            left_out=left_out,
        )


def vit_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """The ViT layout (also ViViT's and the audio spectrogram transformer's)."""
    return _vit_stack(config, reader)


def _beit_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BEiT / DiT / data2vec-vision: the key has no bias; relative position bias is outside the form."""
    positions = ("relative_position",)
    if getattr(config, "use_absolute_position_embeddings", False):
        positions += ("absolute_position_embeddings",)
    return _vit_stack(config, reader, k_bias=False, left_out=("bias", "scale") + positions)


def _videomae_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """VideoMAE: the key has no bias, the query one only with ``qv_bias`` (saved as ``q_bias``)."""
    return _vit_stack(config, reader, k_bias=False, legacy_q_bias=True)


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


def _timesformer_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """TimeSformer: fused ``qkv`` rows [q; k; v]. Divided space-time attention runs, per block, a
    ``temporal`` attention (each patch position across frames) before the spatial one (stack
    ``encoder``: the patches of one frame and the class token); each is a standard form over its own
    tokens, with its own weights. ``space_only`` / ``joint_space_time`` models have the spatial one only.
    """
    heads = config.num_attention_heads
    modules = [("temporal", "temporal_attention"), ("encoder", "attention")]
    if config.attention_type != "divided_space_time":
        modules = modules[1:]
    for i in range(config.num_hidden_layers):
        for stack, module in modules:
            prefix = f"encoder.layer.{i}.{module}.attention.qkv"
            bias = reader.get(f"{prefix}.bias") if config.qkv_bias else None
            yield AttentionLayer(
                stack=stack,
                layer=i,
                **fused_qkv(reader.get(f"{prefix}.weight"), bias),
                n_heads=heads,
                n_kv_heads=heads,
                head_dim=config.hidden_size // heads,
                left_out=VIT_LEFT_OUT if config.qkv_bias else VIT_LEFT_OUT[1:],
            )


def _timesformer_count(config: PretrainedConfig) -> int:
    return config.num_hidden_layers * (2 if config.attention_type == "divided_space_time" else 1)


DPT_BACKBONE = (Tower("backbone", "backbone_config", ("backbone.",), "vision"),)


def _dpt_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """DPT: a ViT encoder (DPT-Hybrid: after a BiT stem, which has no attention), or a backbone model
    (BEiT, Swin v2, DINOv2: ``backbone_config``) scored by its own map as stack ``backbone``."""
    if config.backbone_config is not None and not config.is_hybrid:
        return tower_layers(DPT_BACKBONE, config, reader)
    return _vit_stack(config, reader)


def _dpt_count(config: PretrainedConfig) -> int:
    if config.backbone_config is not None and not config.is_hybrid:
        sub, architecture = DPT_BACKBONE[0].architecture(config)
        return architecture.n_layers(sub)
    return config.num_hidden_layers


def _imagegpt_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ImageGPT is GPT-2 over pixel tokens: Conv1D ``c_attn`` with columns [q | k | v]."""
    return gpt_lineage._gpt2_layers(config, reader)


def _layers(config: PretrainedConfig) -> int:
    return config.num_hidden_layers


def vision_architecture(model_types: tuple[str, ...], layers, **kwargs) -> Architecture:
    """A vision family: one ``encoder`` stack, bidirectional, ``num_hidden_layers`` layers unless given."""
    kwargs.setdefault("n_layers", _layers)
    kwargs.setdefault("stacks", ("encoder",))
    kwargs.setdefault("objective", "bidirectional")
    return Architecture(model_types=model_types, modality="vision", layers=layers, **kwargs)


ARCHITECTURES: list[Architecture] = [
    vision_architecture(
        ("vit", "deit", "vit_msn", "dinov2", "dinov2_with_registers", "yolos"),
        vit_layers,
        notes="DINO is vit",
    ),
    vision_architecture(("beit", "data2vec-vision"), _beit_layers, notes="DiT is beit"),
    vision_architecture(
        ("vit_mae",),
        _vit_mae_layers,
        n_layers=lambda c: c.num_hidden_layers + c.decoder_num_hidden_layers,
        stacks=("encoder", "decoder"),
        notes="decoder only in pre-training checkpoints",
    ),
    vision_architecture(("vivit",), vit_layers, notes="ViT layout over tubelets; space-time positions in x"),
    vision_architecture(
        ("videomae",), _videomae_layers, notes="ViT layout; no key bias; space-time positions in x"
    ),
    vision_architecture(
        ("timesformer",),
        _timesformer_layers,
        n_layers=_timesformer_count,
        stacks=("temporal", "encoder"),
        notes="divided space-time attention: a temporal and a spatial form per block",
    ),
    vision_architecture(
        ("dpt",),
        _dpt_layers,
        n_layers=_dpt_count,
        stacks=("encoder", "backbone"),
        notes="ViT encoder, or a BEiT / Swin v2 / DINOv2 backbone scored by its own map (stack backbone)",
    ),
    Architecture(
        model_types=("imagegpt",),
        modality="vision",
        objective="autoregressive",
        layers=_imagegpt_layers,
        n_layers=_layers,
        stacks=("decoder",),
    ),
]

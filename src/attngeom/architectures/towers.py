"""Towers: the text, vision and audio encoders that two-tower models pair and composites reuse.

CLIP-style contrastive models (CLIP, SigLIP, SigLIP2, OWL-ViT, OWLv2) score both towers as stacks
``text`` and ``vision``; each tower is also a ``model_type`` of its own (``siglip_vision_model`` ...), so
a checkpoint of one tower is scored, and a composite (LLaVA, PaliGemma, BLIP-2, Qwen2-VL) scores its
towers through these maps (see ``composite``). Every map names its main stack after the tower.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from . import decoders, encoders
from .base import Architecture, AttentionLayer, TensorReader, UnscoredLayer, fused_qkv, head_dim_of
from .vision import VIT_LEFT_OUT, qk_block
from .vision_stages import swin_stages

if TYPE_CHECKING:
    from transformers import PretrainedConfig

CROSS_IMAGE_FORM = "cross: x W_q W_kᵀ yᵀ, y the image features (two spaces)"
POOLING_REASON = "attention pooling: the query is a learned probe, not the input, so q·k is linear in x, not a bilinear form"


def _towers(config: PretrainedConfig) -> list[tuple[str, PretrainedConfig]]:
    if hasattr(config, "text_config") and hasattr(config, "vision_config"):
        return [("text", config.text_config), ("vision", config.vision_config)]
    return [("text" if "text" in config.model_type else "vision", config)]


def _text_vision_layers(
    config: PretrainedConfig, reader: TensorReader
) -> Iterator[AttentionLayer | UnscoredLayer]:
    """CLIP layout: ``{text,vision}_model.encoder.layers.i.self_attn.{q,k}_proj``, one stack per tower.

    SigLIP's vision tower may end in an attention-pooling head (``head.attention``, a learned probe
    attending to the patches): recorded as an unscored ``vision_head`` layer.
    """
    for stack, tower in _towers(config):
        heads = tower.num_attention_heads
        for i in range(tower.num_hidden_layers):
            # A single tower saves its layers with or without the ``vision_model.`` prefix.
            bases = (f"{stack}_model.encoder.layers.{i}.self_attn", f"encoder.layers.{i}.self_attn")
            q_names, k_names = tuple(f"{b}.q_proj" for b in bases), tuple(f"{b}.k_proj" for b in bases)
            yield qk_block(reader, stack, i, q_names, k_names, heads, tower.hidden_size // heads)
        if stack == "vision" and reader.has("head.attention.in_proj_weight"):
            yield UnscoredLayer("vision_head", 0, POOLING_REASON)


def _text_vision_count(config: PretrainedConfig) -> int:
    return sum(tower.num_hidden_layers for _, tower in _towers(config))


def _blip_vision_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BLIP / BLIP-2 vision: fused ``self_attn.qkv`` rows [q; k; v] (BLIP-2: the key part of the bias is
    a stored zero)."""
    heads = config.num_attention_heads
    has_bias = reader.has("encoder.layers.0.self_attn.qkv.bias")
    for i in range(config.num_hidden_layers):
        prefix = f"encoder.layers.{i}.self_attn.qkv"
        bias = reader.get(f"{prefix}.bias") if has_bias else None
        yield AttentionLayer(
            stack="vision",
            layer=i,
            **fused_qkv(reader.get(f"{prefix}.weight"), bias),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=config.hidden_size // heads,
            left_out=VIT_LEFT_OUT if has_bias else VIT_LEFT_OUT[1:],
        )


def _qwen_vision_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Qwen2-VL / Qwen2.5-VL vision: ``blocks.i.attn.qkv`` rows [q; k; v], 2-D rotary on q and k.
    Qwen2.5-VL attends within windows except in ``fullatt_block_indexes``: ``window`` is left out there."""
    heads = config.num_heads
    width = getattr(config, "embed_dim", None) or config.hidden_size  # Qwen2-VL names it embed_dim
    full = getattr(config, "fullatt_block_indexes", None)
    for i in range(config.depth):
        prefix = f"blocks.{i}.attn.qkv"
        window = ("window",) if full is not None and i not in full else ()
        yield AttentionLayer(
            stack="vision",
            layer=i,
            **fused_qkv(reader.get(f"{prefix}.weight"), reader.get(f"{prefix}.bias")),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=width // heads,
            left_out=("bias", "rotary", "scale", *window),
        )


def _pixtral_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Pixtral vision encoder: ``transformer.layers.i.attention.{q,k}_proj`` without bias, 2-D rotary."""
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        base = f"transformer.layers.{i}.attention"
        yield qk_block(
            reader,
            "vision",
            i,
            (f"{base}.q_proj",),
            (f"{base}.k_proj",),
            heads,
            head_dim_of(config, heads),
            left_out=("rotary", "scale"),
        )


def _blip_text_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BLIP's BERT-style text tower: self-attention (``text``) and, in a decoder config (the default),
    cross-attention to the image features in every layer (``text_cross``)."""
    heads = config.num_attention_heads
    for stack, module, left_out in (
        ("text", "attention", VIT_LEFT_OUT),
        ("text_cross", "crossattention", ("bias", "scale")),
    ):
        if stack == "text_cross" and not config.is_decoder:
            return
        for i in range(config.num_hidden_layers):
            base = f"encoder.layer.{i}.{module}.self"
            cross = stack == "text_cross"
            yield qk_block(
                reader,
                stack,
                i,
                (f"{base}.query",),
                (f"{base}.key",),
                heads,
                config.hidden_size // heads,
                left_out=left_out,
                form=CROSS_IMAGE_FORM if cross else "standard",
                cross=cross,
            )


def _qformer_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BLIP-2's Q-Former: self-attention among the learned query tokens (``qformer``) and, every
    ``cross_attention_frequency`` layers, their cross-attention to the image features (``qformer_cross``)."""
    heads = config.num_attention_heads
    for stack, module in (("qformer", "attention"), ("qformer_cross", "crossattention")):
        cross = stack == "qformer_cross"
        for i in range(config.num_hidden_layers):
            if cross and i % config.cross_attention_frequency:
                continue
            base = f"encoder.layer.{i}.{module}.attention"
            yield qk_block(
                reader,
                stack,
                i,
                (f"{base}.query",),
                (f"{base}.key",),
                heads,
                config.hidden_size // heads,
                left_out=("bias", "scale"),
                form=CROSS_IMAGE_FORM if cross else "standard",
                cross=cross,
            )


def _clap_audio_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """CLAP's audio encoder (HTS-AT): Swin blocks over spectrogram patches, ``audio_encoder.layers``."""
    depths, heads = config.depths, config.num_attention_heads
    widths = [config.patch_embeds_hidden_size * 2**stage for stage in range(len(depths))]
    return swin_stages(reader, "audio_encoder", widths, depths, heads, stack="audio")


def _tower(
    model_types: tuple[str, ...], modality: str, layers, stacks: tuple[str, ...], n_layers, **kwargs
) -> Architecture:
    """A single tower; its first stack is its main one (a composite names it after the tower)."""
    kwargs.setdefault("objective", "bidirectional")
    return Architecture(
        model_types=model_types, modality=modality, layers=layers, n_layers=n_layers, stacks=stacks, **kwargs
    )


def _layers(config: PretrainedConfig) -> int:
    return config.num_hidden_layers


TEXT_VISION = ("clip", "siglip", "siglip2", "owlvit", "owlv2")
POOLING_NOTE = "vision_head: SigLIP's attention-pooling probe, recorded unscored (no bilinear form)"

ARCHITECTURES: list[Architecture] = [
    Architecture(
        model_types=TEXT_VISION,
        modality="multimodal",
        objective="bidirectional",
        layers=_text_vision_layers,
        n_layers=_text_vision_count,
        stacks=("text", "vision", "vision_head"),
        stack_modality={"text": "language", "vision": "vision", "vision_head": "vision"},
        notes=POOLING_NOTE,
    ),
    _tower(
        tuple(f"{t}_text_model" for t in TEXT_VISION), "language", _text_vision_layers, ("text",), _layers
    ),
    _tower(
        tuple(f"{t}_vision_model" for t in TEXT_VISION),
        "vision",
        _text_vision_layers,
        ("vision", "vision_head"),
        _layers,
        notes=POOLING_NOTE,
    ),
    _tower(
        ("idefics3_vision",), "vision", _text_vision_layers, ("vision",), _layers, notes="SigLIP's layout"
    ),
    _tower(("blip_vision_model", "blip_2_vision_model"), "vision", _blip_vision_layers, ("vision",), _layers),
    _tower(
        ("qwen2_vl_vision", "qwen2_5_vl_vision"),
        "vision",
        _qwen_vision_layers,
        ("vision",),
        lambda c: c.depth,
        notes="fused qkv; 2-D rotary; Qwen2.5-VL windows listed in left_out",
    ),
    _tower(
        ("pixtral",),
        "vision",
        _pixtral_layers,
        ("vision",),
        _layers,
        notes="Pixtral's vision encoder; 2-D rotary",
    ),
    _tower(
        ("blip_text_model",),
        "language",
        _blip_text_layers,
        ("text", "text_cross"),
        lambda c: c.num_hidden_layers * (2 if c.is_decoder else 1),
        notes="cross-attention to the image in a decoder config (text_cross)",
        stack_modality={"text_cross": "multimodal"},
    ),
    _tower(
        ("blip_2_qformer",),
        "multimodal",
        _qformer_layers,
        ("qformer", "qformer_cross"),
        lambda c: c.num_hidden_layers + len(range(0, c.num_hidden_layers, c.cross_attention_frequency)),
        notes="learned queries' self-attention, and their cross-attention to the image (qformer_cross)",
    ),
    _tower(("clap_audio_model",), "audio", _clap_audio_layers, ("audio",), lambda c: sum(c.depths)),
    _tower(
        ("clap_text_model",), "language", encoders._bert_layers, ("encoder",), _layers, notes="RoBERTa layout"
    ),
    _tower(
        ("qwen2_vl_text", "qwen2_5_vl_text"),
        "language",
        decoders.llama_layers,
        ("decoder",),
        _layers,
        objective="autoregressive",
        notes="Llama layout; multimodal rotary (M-RoPE) left out",
    ),
]

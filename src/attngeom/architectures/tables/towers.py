"""Towers discovery does not score: BLIP's and BLIP-2's (read by their composites' tables), CLAP's audio
encoder and Qwen2-VL's vision tower.

CLAP (a RoBERTa text tower and an HTS-AT audio tower) is scored tower by tower (``composite``): its
text tower is discovered (``clap_text_model``), its audio tower's Swin blocks are read here. Qwen2-VL's
vision tower has no model class of its own in transformers: a checkpoint of the tower alone
(``qwen2_vl_vision``) is read here; inside Qwen2-VL it is discovered with the rest of the model.
Every map names its main stack after the tower.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..base import Architecture, AttentionLayer, TensorReader, fused_layers
from .composite import Tower, composite
from .vision import VIT_LEFT_OUT, qk_block, vision_architecture
from .vision_stages import swin_stages

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_AUDIO_TOWER = "its HTS-AT (Swin) audio tower does not run in the tiny model: discovery refuses it"
_BLIP_TOWER = "a tower of BLIP or BLIP-2, whose tables read it by this map"


CROSS_IMAGE_FORM = "cross: x W_q W_kᵀ yᵀ, y the image features (two spaces)"


def _blip_vision_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BLIP / BLIP-2 vision: fused ``self_attn.qkv`` rows [q; k; v] (BLIP-2: the key part of the bias is
    a stored zero)."""
    heads = config.num_attention_heads
    has_bias = reader.has("encoder.layers.0.self_attn.qkv.bias")
    yield from fused_layers(
        reader,
        "encoder.layers.{i}.self_attn.qkv",
        config.num_hidden_layers,
        heads,
        config.hidden_size // heads,
        has_bias,
        VIT_LEFT_OUT[1:],  # bias: as has_bias says
        stack="vision",
    )


def _bert_layers(
    config: PretrainedConfig,
    reader: TensorReader,
    stack: str,
    attention: str,
    layers: range,
    left_out: tuple[str, ...] = ("bias", "scale"),
) -> Iterator[AttentionLayer]:
    """BERT-style attention ``encoder.layer.i.{attention}.query`` / ``.key`` of each layer in ``layers``; a
    ``*_cross`` stack is cross-attention to the image features."""
    heads = config.num_attention_heads
    cross = stack.endswith("_cross")
    for i in layers:
        base = f"encoder.layer.{i}.{attention}"
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


def _blip_text_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BLIP's BERT-style text tower: self-attention (``text``) and, in a decoder config (the default),
    cross-attention to the image features in every layer (``text_cross``)."""
    layers = range(config.num_hidden_layers)
    yield from _bert_layers(config, reader, "text", "attention.self", layers, VIT_LEFT_OUT)
    if config.is_decoder:
        yield from _bert_layers(config, reader, "text_cross", "crossattention.self", layers)


def _qformer_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BLIP-2's Q-Former: self-attention among the learned query tokens (``qformer``) and, every
    ``cross_attention_frequency`` layers, their cross-attention to the image features (``qformer_cross``)."""
    n = config.num_hidden_layers
    yield from _bert_layers(config, reader, "qformer", "attention.attention", range(n))
    cross_layers = range(0, n, config.cross_attention_frequency)
    yield from _bert_layers(config, reader, "qformer_cross", "crossattention.attention", cross_layers)


def _qwen_vision_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Qwen2-VL vision: ``blocks.i.attn.qkv`` rows [q; k; v], 2-D rotary on q and k."""
    heads = config.num_heads
    width = getattr(config, "embed_dim", None) or config.hidden_size  # Qwen2-VL names it embed_dim
    yield from fused_layers(
        reader,
        "blocks.{i}.attn.qkv",
        config.depth,
        heads,
        width // heads,
        True,
        ("rotary", "scale"),
        stack="vision",
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
    return Architecture(
        model_types=model_types,
        modality=modality,
        objective="bidirectional",
        layers=layers,
        n_layers=n_layers,
        stacks=stacks,
        **kwargs,
    )


ARCHITECTURES: list[Architecture] = [
    vision_architecture(
        ("blip_vision_model", "blip_2_vision_model"), _blip_vision_layers, stacks=("vision",), why=_BLIP_TOWER
    ),
    _tower(
        ("blip_text_model",),
        "language",
        _blip_text_layers,
        ("text", "text_cross"),
        lambda c: c.num_hidden_layers * (2 if c.is_decoder else 1),
        notes="cross-attention to the image in a decoder config (text_cross)",
        stack_modality={"text_cross": "multimodal"},
        why=_BLIP_TOWER,
    ),
    _tower(
        ("blip_2_qformer",),
        "multimodal",
        _qformer_layers,
        ("qformer", "qformer_cross"),
        lambda c: c.num_hidden_layers + len(range(0, c.num_hidden_layers, c.cross_attention_frequency)),
        notes="learned queries' self-attention, and their cross-attention to the image (qformer_cross)",
        why=_BLIP_TOWER,
    ),
    vision_architecture(
        ("qwen2_vl_vision",),
        _qwen_vision_layers,
        n_layers=lambda c: c.depth,
        stacks=("vision",),
        notes="2-D rotary",
        why="transformers defines no model class for the tower alone: nothing for discovery to build",
    ),
    _tower(
        ("clap_audio_model",),
        "audio",
        _clap_audio_layers,
        ("audio",),
        lambda c: sum(c.depths),
        why=_AUDIO_TOWER,
    ),
    composite(
        ("clap",),
        (
            Tower("text", "text_config", ("text_model.",), "language"),
            Tower("audio", "audio_config", ("audio_model.",), "audio"),
        ),
        objective="bidirectional",
        notes="RoBERTa text tower + HTS-AT (Swin) audio tower",
        why=_AUDIO_TOWER,
    ),
]

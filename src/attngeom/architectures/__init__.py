"""The architecture map: for each ``model_type``, which tensors hold W_q and W_k of every head."""

from __future__ import annotations

from . import (
    audio,
    composite_decoders,
    decoders,
    encoders,
    gpt_lineage,
    latent,
    lens,
    longformer,
    multimodal,
    normalised_decoders,
    relative_encoders,
    seamless,
    segmentation,
    seq2seq,
    towers,
    vision,
    vision_stages,
)
from .base import Architecture, ArchitectureError, AttentionLayer, TensorReader, UnscoredLayer
from .registry import REGISTRY, architecture_for, register, supported_model_types

for _module in (
    encoders,
    decoders,
    gpt_lineage,
    seq2seq,
    vision,
    audio,
    latent,
    longformer,
    normalised_decoders,
    relative_encoders,
    composite_decoders,
    seamless,
    multimodal,
    segmentation,
    towers,
    vision_stages,
    lens,
):
    register(_module.ARCHITECTURES)


__all__ = [
    "REGISTRY",
    "Architecture",
    "ArchitectureError",
    "AttentionLayer",
    "TensorReader",
    "UnscoredLayer",
    "architecture_for",
    "supported_model_types",
]

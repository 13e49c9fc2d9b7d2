"""The architecture map: for each ``model_type``, which tensors hold W_q and W_k of every head."""

from __future__ import annotations

from transformers import PretrainedConfig

from . import (
    audio,
    composite_decoders,
    decoders,
    encoders,
    gpt_lineage,
    latent,
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

REGISTRY: dict[str, Architecture] = {}
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
):
    for _arch in _module.ARCHITECTURES:
        for _model_type in _arch.model_types:
            if _model_type in REGISTRY:
                raise RuntimeError(f"model_type {_model_type!r} is mapped twice")
            REGISTRY[_model_type] = _arch


def supported_model_types() -> list[str]:
    return sorted(REGISTRY)


def architecture_for(config: PretrainedConfig) -> Architecture:
    """The map for this config's ``model_type``, or an error naming it and the supported list."""
    model_type = getattr(config, "model_type", None) or "<none>"
    if model_type not in REGISTRY:
        raise ArchitectureError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(supported_model_types())}"
        )
    return REGISTRY[model_type]


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

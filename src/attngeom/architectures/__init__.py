"""The architecture map: for each ``model_type``, which tensors hold W_q and W_k of every head.

Two mechanisms: ``discovery`` reads the layout off the model itself for every type the generated
conformance run validated; ``tables`` holds a hand-written map only where discovery cannot see what a
checkpoint holds, each with its reason. ``registry`` picks one for a config.
"""

from __future__ import annotations

from .base import Architecture, ArchitectureError, AttentionLayer, TensorReader, UnscoredLayer
from .registry import REGISTRY, architecture_for, supported_model_types

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

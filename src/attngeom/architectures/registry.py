"""The registry of architecture maps by ``model_type``, filled by the package when it is imported.

A leaf module (it imports only ``base``), so a composite map can look up the map of each of its towers
without importing the families that import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .base import Architecture, ArchitectureError

if TYPE_CHECKING:
    from transformers import PretrainedConfig

REGISTRY: dict[str, Architecture] = {}


def register(architectures: Iterable[Architecture]) -> None:
    """Map every ``model_type`` of ``architectures``; a type mapped twice is a defect of the package."""
    for architecture in architectures:
        for model_type in architecture.model_types:
            if model_type in REGISTRY:
                raise RuntimeError(f"model_type {model_type!r} is mapped twice")
            REGISTRY[model_type] = architecture


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

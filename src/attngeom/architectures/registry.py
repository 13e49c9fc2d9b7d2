"""The registry of architecture maps by ``model_type``, filled by the package when it is imported.

A leaf module (it imports only ``base`` and ``validated``; ``discovered`` and ``observed`` only when it
is asked), so a composite map can look up the map of each of its towers without importing the families
that import it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .base import Architecture, ArchitectureError
from .validated import conformance

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
    """The map for this config's ``model_type``: its table, else its discovered layout where the generated
    conformance run validated it, else an error with the reason and the nearest supported types."""
    model_type = getattr(config, "model_type", None) or "<none>"
    if model_type in REGISTRY:
        return REGISTRY[model_type]
    entry = conformance().get(model_type)
    if entry is not None and entry["status"] == "validated":
        from .discovered import discover
        from .observed import Observed

        return discover(config, entry.get("layout", ""), Observed.of(entry))
    refused = entry is not None and entry["status"] == "refused"
    reason = entry["reason"] if refused else "not in the conformance run of the installed transformers"
    scored = sorted(set(REGISTRY) | {t for t, e in conformance().items() if e["status"] == "validated"})
    near = difflib.get_close_matches(model_type, scored, n=3, cutoff=0.5)
    nearest = f"; nearest supported: {', '.join(near)}" if near else ""
    raise ArchitectureError(
        f"unsupported model_type {model_type!r} ({reason}){nearest}; "
        "see the support table in docs/support.md (`attngeom support-table`)"
    )

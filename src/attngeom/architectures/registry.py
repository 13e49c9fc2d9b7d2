"""The registry of architecture maps by ``model_type``, filled by the package when it is imported.

A leaf module (it imports only ``base``, ``table_reasons`` and ``validated``; ``discovered`` and
``observed`` only when it is asked), so a composite map can look up the map of each of its towers
without importing the families that import it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .base import Architecture, ArchitectureError
from .table_reasons import WHY
from .validated import conformance

if TYPE_CHECKING:
    from transformers import PretrainedConfig

REGISTRY: dict[str, Architecture] = {}


def register(architectures: Iterable[Architecture]) -> None:
    """Map every ``model_type`` of ``architectures``; a type mapped twice, or a table without its reason
    (``table_reasons.WHY``), is a defect of the package."""
    for architecture in architectures:
        for model_type in architecture.model_types:
            if model_type in REGISTRY:
                raise RuntimeError(f"model_type {model_type!r} is mapped twice")
            if model_type not in WHY:
                raise RuntimeError(f"model_type {model_type!r} has a table but no reason in table_reasons")
            REGISTRY[model_type] = architecture


def supported_model_types() -> list[str]:
    return sorted(REGISTRY)


def labels_of(model_type: str) -> tuple[str, str] | None:
    """(modality, objective) of a type attngeom scores, known before any weight is read: its table's, or
    what the conformance run observed of its discovered layout; ``None`` for a type it does not score."""
    if model_type in REGISTRY:
        return REGISTRY[model_type].modality, REGISTRY[model_type].objective
    entry = conformance().get(model_type)
    if entry is not None and entry["status"] == "validated":
        return entry["modality"], entry["objective"]
    return None


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

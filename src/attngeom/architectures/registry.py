"""The architecture maps by ``model_type``: a hand-written table where one is kept, else the layout
discovery reads, where the generated conformance run validated it.

A leaf module (it imports only ``base`` and ``discovery.validated``; a table's module, and ``discovery``'s,
only when a type is asked for), so a composite table can look up the map of each of its towers without
importing every family, and ``import attngeom.architectures`` imports no table.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING

from .base import Architecture, ArchitectureError
from .discovery.validated import conformance

if TYPE_CHECKING:
    from transformers import PretrainedConfig

TABLES: dict[str, str] = {
    "mobilebert": "encoders",
    "deberta": "encoders",
    "llama": "decoders",
    "mistral": "decoders",
    "mixtral": "decoders",
    "gemma": "decoders",
    "mobilellm": "decoders",
    "cohere2": "decoders",
    "bloom": "gpt_lineage",
    "falcon": "gpt_lineage",
    "gpt_bigcode": "gpt_lineage",
    "mpt": "gpt_lineage",
    "dbrx": "gpt_lineage",
    "longt5": "seq2seq",
    "speecht5": "seq2seq",
    "musicgen": "seq2seq",
    "musicgen_decoder": "seq2seq",
    "detr": "seq2seq",
    "led": "seq2seq",
    "vit_mae": "vision",
    "dpt": "vision",
    "imagegpt": "vision",
    "wav2vec2-bert": "audio",
    "wavlm": "audio",
    "deepseek_v2": "latent",
    "longformer": "longformer",
    "exaone4": "normalised_decoders",
    "stablelm": "normalised_decoders",
    "llama4_text": "normalised_decoders",
    "funnel": "relative_encoders",
    "xlnet": "relative_encoders",
    "llama4": "composite_decoders",
    "seamless_m4t": "seamless",
    "llava": "multimodal",
    "llava_next": "multimodal",
    "blip": "multimodal",
    "blip-2": "multimodal",
    "git": "multimodal",
    "mllama": "multimodal",
    "sam": "segmentation",
    "mask2former": "segmentation",
    "blip_vision_model": "towers",
    "blip_2_vision_model": "towers",
    "blip_text_model": "towers",
    "blip_2_qformer": "towers",
    "qwen2_vl_vision": "towers",
    "clap_audio_model": "towers",
    "clap": "towers",
    "swinv2": "vision_stages",
    "hooked_transformer": "lens",
}
"""``model_type`` → the module of ``architectures.tables`` that holds its table (an ``Architecture`` of its
``ARCHITECTURES`` naming the type, with the reason it is kept, ``why``), imported when the type is first
asked for. ``tests/test_architecture_tables.py`` checks the map against the modules."""


class Tables(MutableMapping[str, Architecture]):
    """The hand-written tables by ``model_type``, a table's module imported when one of its types is first
    asked for; a table set here (a test's hybrid model) stands until it is deleted."""

    def __init__(self, modules: Mapping[str, str]) -> None:
        self._modules = dict(modules)
        self._loaded: dict[str, Architecture] = {}

    def __getitem__(self, model_type: str) -> Architecture:
        if model_type not in self._loaded:
            module = importlib.import_module(f"{__package__}.tables.{self._modules[model_type]}")
            self._loaded[model_type] = next(a for a in module.ARCHITECTURES if model_type in a.model_types)
        return self._loaded[model_type]

    def __setitem__(self, model_type: str, architecture: Architecture) -> None:
        self._loaded[model_type] = architecture

    def __delitem__(self, model_type: str) -> None:
        if model_type not in self:
            raise KeyError(model_type)
        self._modules.pop(model_type, None)
        self._loaded.pop(model_type, None)

    def __contains__(self, model_type: object) -> bool:  # without importing the table's module
        return model_type in self._modules or model_type in self._loaded

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._modules), **dict.fromkeys(self._loaded)})

    def __len__(self) -> int:
        return len(set(self._modules) | set(self._loaded))


REGISTRY = Tables(TABLES)


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
        from .discovery.discovered import discover
        from .discovery.observed import Observed

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

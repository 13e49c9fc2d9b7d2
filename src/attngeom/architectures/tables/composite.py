"""Composite models: sub-models ("towers") with their own config, each scored by the registry's map.

A LLaVA-style checkpoint holds a vision tower and a language model under prefixes (``vision_tower.``,
``language_model.model.``), each described by a nested config (``vision_config``, ``text_config``)
whose ``model_type`` the registry already maps. A tower is scored by that map, reading its tensors
through a ``Scoped`` reader, and its stacks are renamed after the tower: the inner model's main stack
(its first) takes the tower's name (a Llama decoder → ``text``), any other stack keeps its name after
the tower's (a T5 language model → ``text``, ``text_decoder``, ``text_cross``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..base import Architecture, ArchitectureError, AttentionLayer, TensorReader, UnscoredLayer
from ..registry import architecture_for

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class Scoped:
    """A ``TensorReader`` that looks for every name under one of ``prefixes``, in order.

    Several prefixes cover the layouts of one tower: on disk (``language_model.model.layers``, as
    transformers saves LLaVA) and in memory (``model.language_model.layers``, matched as a suffix).
    """

    def __init__(self, reader: TensorReader, prefixes: tuple[str, ...]) -> None:
        self.reader = reader
        self.prefixes = prefixes

    def has(self, name: str) -> bool:
        return any(self.reader.has(prefix + name) for prefix in self.prefixes)

    def get(self, *names: str):
        for name in names:
            for prefix in self.prefixes:
                if self.reader.has(prefix + name):
                    return self.reader.get(prefix + name)
        return self.reader.get(*(prefix + name for name in names for prefix in self.prefixes))


@dataclass(frozen=True)
class Tower:
    """One sub-model of a composite: its stack name, its config attribute, where its tensors lie."""

    name: str
    config: str
    """Attribute of the composite's config that holds the tower's config (``vision_config``)."""
    prefixes: tuple[str, ...]
    modality: str
    probe: str | None = None
    """A tensor name under ``prefixes``: the tower is optional and scored only where the checkpoint has it."""

    def architecture(self, config: PretrainedConfig) -> tuple[PretrainedConfig, Architecture]:
        """The tower's config and the registry's map for it (an error names the tower if unmapped)."""
        sub = getattr(config, self.config)
        try:
            return sub, architecture_for(sub)
        except ArchitectureError as error:
            raise ArchitectureError(f"{config.model_type} {self.config}: {error}") from None

    def stack_of(self, architecture: Architecture, stack: str) -> str:
        """The inner model's main stack becomes the tower's name; another keeps its suffix after it."""
        main = architecture.stacks[0]
        if stack == main:
            return self.name
        rest = stack[len(main) + 1 :] if stack.startswith(main + "_") else stack
        return f"{self.name}_{rest}"


def tower_layers(
    towers: tuple[Tower, ...], config: PretrainedConfig, reader: TensorReader
) -> Iterator[AttentionLayer | UnscoredLayer]:
    """Every tower's layers, tower by tower, under the tower's stack names.

    Every tower's map is looked up before any tensor is read: an unmapped tower fails before a download.
    """
    resolved = [(tower, *tower.architecture(config)) for tower in towers]
    for tower, sub, architecture in resolved:
        scoped = Scoped(reader, tower.prefixes)
        if tower.probe is not None and not scoped.has(tower.probe):
            continue
        for layer in architecture.layers(sub, scoped):
            yield replace(layer, stack=tower.stack_of(architecture, layer.stack))


@dataclass(frozen=True)
class Composite(Architecture):
    """An architecture made of towers: modality and objective come from the tower a stack belongs to."""

    towers: tuple[Tower, ...] = ()
    objective_from: str | None = None
    """The tower whose objective is the model's (the language model of a vision-language model)."""

    def _tower_of(self, stack: str) -> Tower | None:
        """The tower with the longest name that ``stack`` is or starts with (``text_encoder_cross``)."""
        owners = [t for t in self.towers if stack == t.name or stack.startswith(t.name + "_")]
        return max(owners, key=lambda t: len(t.name), default=None)

    def modality_of(self, stack: str) -> str:
        if stack in self.stack_modality:
            return self.stack_modality[stack]
        tower = self._tower_of(stack)
        return tower.modality if tower else self.modality

    def objective_of(self, config: PretrainedConfig) -> str:
        tower = next((t for t in self.towers if t.name == self.objective_from), None)
        if tower is None:
            return super().objective_of(config)
        sub, architecture = tower.architecture(config)
        return architecture.objective_of(sub)


def composite(
    model_types: tuple[str, ...],
    towers: tuple[Tower, ...],
    *,
    objective: str,
    objective_from: str | None = None,
    notes: str = "",
    cross_modality: Mapping[str, str] | None = None,
    why: str,
) -> Composite:
    """A multimodal composite of ``towers``; ``cross_modality`` names stacks whose modality is not their
    tower's (a text tower's cross-attention to the image is multimodal)."""
    cross_modality = dict(cross_modality or {})
    required = tuple(t for t in towers if t.probe is None)
    counted = required + tuple(t for t in towers if t.probe is not None)[:1]

    def n_layers(config: PretrainedConfig) -> int:
        """Layers of the required towers and of one optional tower (BLIP's checkpoints hold one text
        tower, except VQA's two): the progress bar's estimate before the tensors are seen."""
        total = 0
        for tower in counted:
            sub, architecture = tower.architecture(config)
            total += architecture.n_layers(sub)
        return total

    return Composite(
        model_types=model_types,
        modality="multimodal",
        objective=objective,
        layers=lambda config, reader: tower_layers(towers, config, reader),
        n_layers=n_layers,
        notes=notes,
        stacks=tuple(t.name for t in towers) + tuple(cross_modality),
        stack_modality={**{t.name: t.modality for t in towers}, **cross_modality},
        towers=towers,
        objective_from=objective_from,
        why=why,
    )

"""Llama 4 (Scout, Maverick): a vision encoder and the MoE text decoder, each its own stack.

The checkpoint nests the text model and the vision encoder under prefixes (``language_model.model.`` and
``vision_model.model.`` as the Hub's files spell them; ``model.language_model.`` in a transformers 5
model in memory). ``Within`` is a reader that looks a name up under the first prefix that has it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..base import Architecture, AttentionLayer, TensorReader, separate_layers
from .normalised_decoders import llama4_text_layers

if TYPE_CHECKING:
    from transformers import PretrainedConfig


@dataclass(frozen=True)
class Within:
    """A view of ``reader`` in which a name is looked up under the first of ``prefixes`` that has it."""

    reader: TensorReader
    prefixes: tuple[str, ...]

    def _full(self, name: str) -> str | None:
        return next((p + name for p in self.prefixes if self.reader.has(p + name)), None)

    def has(self, name: str) -> bool:
        return self._full(name) is not None

    def get(self, *names: str) -> torch.Tensor:
        for name in names:
            if (full := self._full(name)) is not None:
                return self.reader.get(full)
        return self.reader.get(*(self.prefixes[0] + name for name in names))  # raises, naming what is missing


TEXT_PREFIXES = ("language_model.model.", "language_model.")


def _llama4_vision_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Llama 4's vision encoder: biased q_proj/k_proj; a 2-D rotary embedding of the patch position."""
    return separate_layers(
        config,
        reader,
        "vision_model.model.layers.{i}.self_attn",
        "q_proj",
        "k_proj",
        stack="vision",
        left_out=("rotary_2d", "scale"),
    )


def _llama4_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Llama 4 (Scout, Maverick): the vision encoder (stack ``vision``), then the MoE text decoder."""
    yield from _llama4_vision_layers(config.vision_config, reader)
    yield from llama4_text_layers(config.text_config, Within(reader, TEXT_PREFIXES))


def _composite(model_types: tuple[str, ...], layers, notes: str, *, why: str) -> Architecture:
    return Architecture(
        model_types=model_types,
        modality="multimodal",
        objective="autoregressive",
        layers=layers,
        n_layers=lambda c: c.vision_config.num_hidden_layers + c.text_config.num_hidden_layers,
        notes=notes,
        stacks=("vision", "decoder"),
        stack_modality={"vision": "vision", "decoder": "language"},
        why=why,
    )


ARCHITECTURES: list[Architecture] = [
    _composite(
        ("llama4",),
        _llama4_layers,
        "vision encoder (2-D rotary) and Llama 4 text decoder (see llama4_text)",
        why="its vision encoder does not run in the tiny model (discovery refuses it); text as llama4_text",
    ),
]

"""What counts as a q or k projection for discovery: a linear map of one token's input, and where its
weight is.

Besides ``nn.Linear`` and transformers' ``Conv1D``: a quantised linear layer that keeps its float weight
as ``weight`` [outputs × inputs] (I-BERT's ``QuantLinear``), and a wrapper whose one linear child is
``linear`` (Moshi's ``MoshiLinear``, Gemma 4's ``Gemma4ClippableLinear``): the projection is then that
child (``q_proj.linear``), its weight the checkpoint tensor the form is read from.
"""

from __future__ import annotations

import re

import torch

from .base import ArchitectureError

TOKEN_MIXING = re.compile(r"^(q|k|query|key)_s?conv$")
"""A child of an attention convolving its q or k over neighbouring tokens (Inkling's ``k_sconv``)."""
WRAPPED_MIXING = re.compile(r"^s?conv$")
"""The same convolution as a child of the q or k projection's wrapper (Inkling 2's ``k_proj.sconv``)."""


def is_linear(module: object) -> bool:
    """``nn.Linear``, or a layer holding its float weight as ``nn.Linear`` does (a quantised linear)."""
    if isinstance(module, torch.nn.Linear):
        return True
    weight = getattr(module, "weight", None)
    return (
        isinstance(module, torch.nn.Module)
        and isinstance(weight, torch.nn.Parameter)
        and weight.dim() == 2
        and tuple(weight.shape)
        == (getattr(module, "out_features", None), getattr(module, "in_features", None))
    )


def is_conv1d(module: object) -> bool:
    """transformers' ``Conv1D``: a linear layer whose weight is stored transposed (inputs × outputs)."""
    from transformers.pytorch_utils import Conv1D

    return isinstance(module, Conv1D)


def rows(module: torch.nn.Module) -> int:
    """A projection's output width (a ``Conv1D`` calls it ``nf``)."""
    return module.nf if is_conv1d(module) else module.out_features


def inputs(module: torch.nn.Module) -> int:
    """A projection's input width."""
    return module.weight.shape[0] if is_conv1d(module) else module.in_features


def projection(module: torch.nn.Module, name: str) -> str | None:
    """The child path of ``module``'s projection ``name`` (``name``, or ``name.linear`` through a wrapper
    whose parameters are all its linear child's), or None where ``name`` is no linear projection.

    A wrapper that convolves its output over tokens raises ``ArchitectureError``: its q or k is not a
    linear map of one token's input."""
    child = getattr(module, name, None)
    if is_linear(child):
        return name
    inner = getattr(child, "linear", None)
    if not isinstance(child, torch.nn.Module) or not is_linear(inner):
        return None
    mixed = [n for n, _ in child.named_children() if WRAPPED_MIXING.search(n)]
    if mixed:
        raise ArchitectureError(
            f"{type(module).__name__}: q or k passes through a convolution over tokens (`{name}.{mixed[0]}`), "
            "so it is not a bilinear form of one token's input"
        )
    own = {id(p) for p in inner.parameters()}
    return f"{name}.linear" if all(id(p) in own for p in child.parameters()) else None

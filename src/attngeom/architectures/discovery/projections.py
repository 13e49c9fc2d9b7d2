"""What counts as a q or k projection for discovery: a linear map of one token's input, and where its
weight is.

Besides ``nn.Linear`` and transformers' ``Conv1D``: a pointwise ``nn.Conv1d`` (its weight [outputs ×
inputs × 1], its inputs and outputs channels first), a quantised linear layer that keeps its float weight
as ``weight`` [outputs × inputs] (I-BERT's ``QuantLinear``), and a wrapper whose one linear child is
``linear`` (Moshi's ``MoshiLinear``, Gemma 4's ``Gemma4ClippableLinear``): the projection is then that
child (``q_proj.linear``), its weight the checkpoint tensor the form is read from. A q or k that passes
through a convolution over tokens first (``token_convolution``) is no linear map of one token's input.
"""

from __future__ import annotations

import re

import torch

QK_PART = re.compile(r"(^|_)(q|k|query|key)(_|$)")
CONV_PART = re.compile(r"conv", re.IGNORECASE)


def is_pointwise(module: object) -> bool:
    """A 1-wide ``nn.Conv1d`` over (batch, channels, tokens): a linear map of each token, block-diagonal
    where it is grouped (SqueezeBERT's)."""
    return (
        isinstance(module, torch.nn.Conv1d)
        and module.kernel_size == (1,)
        and module.padding in ((0,), "valid")
    )


def is_linear(module: object) -> bool:
    """``nn.Linear``, a pointwise convolution, or a layer holding its float weight as ``nn.Linear`` does
    (a quantised linear)."""
    if isinstance(module, torch.nn.Linear) or is_pointwise(module):
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
    if is_pointwise(module):
        return module.out_channels
    return module.nf if is_conv1d(module) else module.out_features


def inputs(module: torch.nn.Module) -> int:
    """A projection's input width."""
    if is_pointwise(module):
        return module.in_channels
    return module.weight.shape[0] if is_conv1d(module) else module.in_features


def projection(module: torch.nn.Module, name: str) -> str | None:
    """The child path of ``module``'s projection ``name`` (``name``, or ``name.linear`` through a wrapper
    whose parameters are all its linear child's), or None where ``name`` is no linear projection."""
    child = getattr(module, name, None)
    if is_linear(child):
        return name
    inner = getattr(child, "linear", None)
    if not isinstance(child, torch.nn.Module) or not is_linear(inner):
        return None
    own = {id(p) for p in inner.parameters()}
    return f"{name}.linear" if all(id(p) in own for p in child.parameters()) else None


def token_convolution(attention: torch.nn.Module) -> str | None:
    """The path of a convolution over tokens that the attention's q or k passes through, by its name: one
    inside a q/k projection (Inkling 2's ``k_proj.sconv``) or a q/k convolutional projection (CvT's
    ``convolution_projection_query``); None where there is none."""
    for path, _ in attention.named_modules():
        parts = path.split(".")
        if any(QK_PART.search(p) for p in parts) and any(CONV_PART.search(p) for p in parts):
            return path
    return None

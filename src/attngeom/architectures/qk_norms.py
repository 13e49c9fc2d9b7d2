"""q/k norms beside an attention's projections, probed on a CPU copy: what discovery folds into W_q, W_k.

A norm's kind is read off its behaviour, not its class: is its gain ``w`` or ``1 + w``, does it centre
(LayerNorm) or not (RMS), does it add a bias, or has it no gain at all.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from .base import ArchitectureError

NORMS = (
    ("q_norm", "k_norm"),
    ("q_layernorm", "k_layernorm"),
    ("query_layernorm", "key_layernorm"),
    ("qk_norm", "qk_norm"),
)
"""Child names of q/k norms applied after the projections."""


@dataclass(frozen=True)
class Norm:
    """A q or k norm: the gain is ``weight + offset``; ``centre`` for a LayerNorm; ``bias`` if it adds one."""

    name: str
    offset: float
    centre: bool
    bias: bool
    weight: bool = True
    """False for a norm without a gain (Muse Spark's shared ``qk_norm``): the gain is 1."""


def probe_norm(norm: torch.nn.Module, name: str, width: int = 0) -> Norm | None:
    """How ``norm`` scales: run a CPU copy with weight 0 (gain ``w``: output 0) and with weight set to
    give gain 1 (a LayerNorm centres its output). ``None`` when it is not an elementwise-gain norm.
    A norm without a weight is run on ``width``-wide rows."""
    weight = getattr(norm, "weight", None)
    if weight is None and width and not list(norm.parameters()):
        return _probe_plain(norm, name, width)
    if not isinstance(weight, torch.Tensor) or weight.dim() not in (1, 2):
        return None  # 2: a gain per head (Chameleon's heads × head width LayerNorm)
    probe = copy.deepcopy(norm).to_empty(device="cpu").float()
    bias = getattr(probe, "bias", None)
    x = torch.randn(3, *weight.shape, generator=torch.Generator().manual_seed(0)) + 2.0
    with torch.no_grad():
        if isinstance(bias, torch.Tensor):
            bias.zero_()
        probe.weight.zero_()
        at_zero = probe(x)
        offset = 0.0 if at_zero.abs().max() < 1e-6 else 1.0
        probe.weight.fill_(1.0 - offset)
        at_one = probe(x)
    if offset and (probe(x) - at_zero).abs().max() > 1e-6:
        return None
    centre = bool(at_one.mean(-1).abs().max() < 1e-4)
    if weight.dim() == 2 and not _per_row(x, at_one, centre):
        return None  # a norm over all heads with a gain per head: not a per-head norm
    return Norm(name, offset, centre, isinstance(bias, torch.Tensor))


def _per_row(x: torch.Tensor, y: torch.Tensor, centre: bool) -> bool:
    """Whether ``y`` is ``x`` normalised row by row (last axis), centred (LayerNorm) or not (RMS), up to
    the norm's epsilon."""
    base = x - x.mean(-1, keepdim=True) if centre else x
    scale = base.pow(2).mean(-1, keepdim=True).rsqrt()
    return bool((y - base * scale).abs().max() < 1e-3)


def _probe_plain(norm: torch.nn.Module, name: str, width: int) -> Norm | None:
    """A gain-free norm: its output a positive multiple of each row (RMS) or of the centred row (LayerNorm)."""
    x = torch.randn(3, width, generator=torch.Generator().manual_seed(0)) + 2.0
    with torch.no_grad():
        y = norm(x)
    for centre, base in ((False, x), (True, x - x.mean(-1, keepdim=True))):
        c = (y * base).sum(-1, keepdim=True) / (base * base).sum(-1, keepdim=True)
        if (c > 0).all() and (y - c * base).abs().max() < 1e-4 * y.abs().max():
            return Norm(name, 0.0, centre, False, weight=False)
    return None


def qk_norms(module: torch.nn.Module, width: int) -> tuple[Norm | None, Norm | None]:
    for q_name, k_name in NORMS:
        q_norm, k_norm = getattr(module, q_name, None), getattr(module, k_name, None)
        if isinstance(q_norm, torch.nn.Identity) and isinstance(k_norm, torch.nn.Identity):
            return None, None  # a family whose q/k norm is switched off in this config
        if isinstance(q_norm, torch.nn.Module) and isinstance(k_norm, torch.nn.Module):
            q, k = probe_norm(q_norm, q_name, width), probe_norm(k_norm, k_name, width)
            if q is None or k is None:
                raise ArchitectureError(f"{type(module).__name__}: q/k norm {q_name} of unknown kind")
            return q, k
    return None, None


QUERY_SCALES = ("scaling", "per_dim_scale")
"""Names of an attention's own learned per-dimension query scale (TimesFM, VideoPrism's pooling head)."""


def query_scale(module: torch.nn.Module, head_dim: int) -> str:
    """The name of the attention's learned per-dimension query scale, a ``head_dim``-wide parameter of
    its own that multiplies q as softplus(scale) (its constant factor is a positive scalar, no part of
    the form), else "": a fixed diagonal map after W_q, folded into it (the conformance check confirms
    the convention on the model's own q)."""
    for name in QUERY_SCALES:
        scale = getattr(module, name, None)
        if isinstance(scale, torch.nn.Parameter) and scale.shape == (head_dim,):
            return name
    return ""


def rope_key_norm(module: torch.nn.Module) -> Norm | None:
    """The RMS norm a latent attention applies to its shared rotary key alone (Dots 3's
    ``k_rope_only_layernorm``): a child named for the rotary part and a norm; its gain is folded into
    the rotary key projection."""
    for name, child in module.named_children():
        if "rope" in name and "norm" in name:
            norm = probe_norm(child, name)
            if norm is None or norm.centre or norm.bias:
                raise ArchitectureError(f"{type(module).__name__}: rotary key norm {name} of unknown kind")
            return norm
    return None

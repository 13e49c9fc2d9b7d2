"""The q and k of an attention module that computes its scores itself, outside transformers' attention
interface: the operands of the first matrix product its forward takes (q · kᵀ, before any softmax).

Legacy modules with a fused q/k/v projection (GPT-NeoX-Japanese's ``baddbmm``, MGP-STR's ``q @ kᵀ``)
split the projection's output themselves; their q and k, as the product gets them, are what confirms the
layout of that split. A module whose first product is something else gives operands that match no
form's q and k, so the check refuses it.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

PRODUCTS = (
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.bmm,
    torch.Tensor.bmm,
    torch.baddbmm,
)


class FirstProducts(TorchFunctionMode):
    """Records, for the innermost open attention module (``active``, by path), the operands of its first
    matrix product as ``q_mm`` and ``k_mm`` (kᵀ transposed back) in ``records[path]``."""

    def __init__(self, records: dict[str, dict[str, torch.Tensor]]):
        super().__init__()
        self.records, self.active = records, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in PRODUCTS and self.active and len(args) >= 2:
            a, b = args[1:3] if func is torch.baddbmm else args[:2]
            record = self.records.get(self.active[-1])
            if record is not None and "q_mm" not in record and a.dim() >= 3 and b.dim() == a.dim():
                record["q_mm"], record["k_mm"] = a.detach(), b.detach().transpose(-1, -2)
        return func(*args, **kwargs)


def as_heads(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor | None:
    """``t`` (batch and heads flattened or not) in the (B, H, N, d) shape of ``like``, where it fits."""
    return t.reshape(like.shape) if t.numel() == like.numel() and t.shape[-2:] == like.shape[-2:] else None

"""tr(M M), ‖M‖²_F and the symmetry they give, for a bilinear form M = A Bᵀ held by its d × r factors.

The part of the score mathematics that training differentiates (the symmetry regulariser) as well as
scoring: ``scores`` builds every score on these products, and the training code imports only this module,
so a change to the rest of the scoring code rescores trained models without training them again
(docs/pipeline.md, "Reruns follow the code"). Batched over leading dimensions, on any device.
"""

from __future__ import annotations

import torch


def product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x @ y``, batched. Where one operand is shared (size 1 in the last batch dimension, as a kv head's
    factor is shared by its group of query heads) and is the larger one, the other operand's batch is
    folded into the rows or columns of one product, so the shared factor is never copied per head."""
    if x.dim() < 3 or y.dim() < 3 or x.shape[-3] == y.shape[-3] or 1 not in (x.shape[-3], y.shape[-3]):
        return x @ y
    x_size, y_size = x.shape[-2] * x.shape[-1], y.shape[-2] * y.shape[-1]
    if x.shape[-3] == 1 and x_size >= y_size:  # x @ [y_1 … y_G]
        g, k, n = y.shape[-3:]
        columns = y.movedim(-3, -2).reshape(*y.shape[:-3], k, g * n)
        return (x.squeeze(-3) @ columns).unflatten(-1, (g, n)).movedim(-2, -3)
    if y.shape[-3] == 1 and y_size >= x_size:  # [x_1; …; x_G] @ y
        g, m, k = x.shape[-3:]
        rows = x.reshape(*x.shape[:-3], g * m, k)
        return (rows @ y.squeeze(-3)).unflatten(-2, (g, m))
    return x @ y


GRAM_BLOCK = 128
"""Gram matrices of rank ≥ 2 · GRAM_BLOCK are formed block by block (``gram``)."""


def gram(xt: torch.Tensor) -> torch.Tensor:
    """Xᵀ X from Xᵀ (…, r, d). Symmetric, so for r ≥ 2 · GRAM_BLOCK only the diagonal blocks (recursively)
    and the upper off-diagonal block are multiplied, the lower one mirrored: 5/8 of the flops at r = 512
    (BLAS's ``syrk`` would take 1/2; torch does not expose it), 24 → 17 ms on one core."""
    r = xt.shape[-2]
    if r < 2 * GRAM_BLOCK or xt.requires_grad:
        return xt @ xt.mT
    half = r // 2
    top, bottom = xt[..., :half, :], xt[..., half:, :]
    out = xt.new_empty(*xt.shape[:-2], r, r)
    out[..., :half, :half] = gram(top)
    out[..., :half, half:] = top @ bottom.mT
    out[..., half:, :half] = out[..., :half, half:].mT
    out[..., half:, half:] = gram(bottom)
    return out


def trace_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """tr(M M) = tr((Bᵀ A)²) for factors A, B of shape (…, d, r)."""
    bt_a = product(b.mT, a)  # (…, r, r)
    return (bt_a * bt_a.mT).sum(dim=(-2, -1))


def frobenius_sq(gram_a: torch.Tensor, gram_b: torch.Tensor) -> torch.Tensor:
    """‖M‖²_F = tr((AᵀA)(BᵀB)) from the two Gram matrices (both symmetric)."""
    return (gram_a * gram_b).sum(dim=(-2, -1))


def symmetry_ratio(trace: torch.Tensor, frobenius: torch.Tensor) -> torch.Tensor:
    """s = tr(M M) / ‖M‖²_F ∈ [−1, 1]: 1 symmetric, −1 skew-symmetric, 0 for the zero matrix."""
    safe = torch.where(frobenius > 0, frobenius, torch.ones_like(frobenius))
    return torch.where(frobenius > 0, trace / safe, torch.zeros_like(frobenius)).clamp(-1.0, 1.0)


def form_symmetry(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The symmetry of M = A Bᵀ (batched, differentiable): what ``scores.Form(a, b).symmetry`` gives,
    without the row and column norms that only directionality needs."""
    return symmetry_ratio(trace_mm(a, b), frobenius_sq(gram(a.mT), gram(b.mT)))

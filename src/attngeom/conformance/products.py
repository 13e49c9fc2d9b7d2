"""The q and k at an attention module's score product, for a module that computes its scores itself
rather than through transformers' attention interface (SAM's windowed ViT and its users: ``(q · scale) @
kᵀ`` on the split of one fused ``qkv`` projection).

A fused projection's output holds q, k and v in an order discovery reads from its layout; only the q and k
that meet in the scores confirm that order. Outside the interface they are taken from the first matrix
product (``@``, ``matmul``, ``bmm``, ``baddbmm``, ``scaled_dot_product_attention``) of the module's forward whose
shared dimension is the module's head width: (…, N, d_h) × (…, d_h, M), the key transposed back. The check
then holds them to the form exactly as it holds the interface's q and k, so a product that is not the
scores (or a wrong layout) fails the check; it never passes one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch.overrides import TorchFunctionMode

from ..architectures.discovery import Found
from .running import track_running

ADDED = {torch.baddbmm, torch.Tensor.baddbmm}
"""Products added to a first operand, ``baddbmm(bias, q, kᵀ)`` (GPT-NeoX-Japanese): q and kᵀ come second."""
TRANSPOSED = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm, *ADDED}
"""Products whose second operand is the keys transposed (…, d_h, M)."""
UPRIGHT = {torch.nn.functional.scaled_dot_product_attention}
"""Products given the keys as they are (…, M, d_h)."""


class _ScoreProducts(TorchFunctionMode):
    """Records, per attention path, the operands of the first score-shaped product in its forward."""

    def __init__(self, head_dims: dict[str, int]):
        super().__init__()
        self.head_dims, self.active = head_dims, []
        self.found: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def cut_short(self, kept: set[str]) -> None:
        """After a forward pass that raised: no module is running, and only ``kept`` paths' finds stay."""
        self.active.clear()
        for path in set(self.found) - kept:
            del self.found[path]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        path = self.active[-1] if self.active else None
        if path is not None and path not in self.found and len(args) >= 2:
            q, k = args[1:3] if func in ADDED and len(args) >= 3 else args[:2]
            if func in TRANSPOSED and _tensors(q, k):
                k = k.mT
            if (
                (func in TRANSPOSED or func in UPRIGHT)
                and _tensors(q, k)
                and _scores(q, k, self.head_dims[path])
            ):
                self.found[path] = (q.detach(), k.detach())
        return func(*args, **kwargs)


def _tensors(q, k) -> bool:
    return isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() >= 2 and k.dim() >= 2


def _scores(q: torch.Tensor, k: torch.Tensor, head_dim: int) -> bool:
    """Whether q (…, N, d) and k (…, M, d) are a score product's operands of head width ``head_dim``."""
    return q.shape[-1] == k.shape[-1] == head_dim and q.shape[:-2] == k.shape[:-2]


@contextmanager
def score_products(modules: dict[str, torch.nn.Module], items: list[Found]) -> Iterator[_ScoreProducts]:
    """Within the block, the q and k of each fused module's first score product, by path (the ``found``
    of the mode yielded fills as the modules run); modules with separate projections are left to their
    projections' hooks."""
    fused = {item.path: item.head_dim for item in items if item.fused and not item.latent}
    mode = _ScoreProducts(fused)

    with ExitStack() as stack:
        track_running(stack, {path: modules[path] for path in fused}, mode.active)
        if fused:
            stack.enter_context(mode)
        yield mode


def as_heads(t: torch.Tensor, n: int) -> torch.Tensor:
    """A product operand (…, N, d) as (B, n, N, d): its leading axes read as batch-major, head-minor (a
    model that orders them otherwise fails the check, it is not reordered to pass it)."""
    if t.dim() == 4 and t.shape[1] == n:
        return t
    lead = t.shape[:-2].numel()
    return t.reshape(lead // n, n, *t.shape[-2:]) if lead % n == 0 else t


def first_output(output):
    """A projection's output (a quantised linear's is a pair: the output and its scale, I-BERT's)."""
    return output[0] if isinstance(output, tuple) else output


def tokens_last(projection, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A projection's input and output as (..., tokens, features): a pointwise convolution's are
    channels first."""
    return (x.mT, y.mT) if isinstance(projection, torch.nn.Conv1d) else (x, y)


def operands(record: dict, item: Found) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The q and k of a score product: as the products mode found them, else the projections' outputs
    split into heads (where they are q's and k's own width); None where neither is there."""
    if "q_attn" in record:
        return record["q_attn"], record["k_attn"]
    q, k = record["q"], record["k"]
    widths = (item.n_heads * item.head_dim, item.n_kv_heads * item.head_dim)
    if item.fused or item.latent or (q.shape[-1], k.shape[-1]) != widths:
        return None, None
    return heads(q, item.n_heads, item.head_dim), heads(k, item.n_kv_heads, item.head_dim)


def heads(t: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """(B, ..., n·d) → (B, n, N, d): a 2-D packed input as one batch, a grid's positions (B, H, W, ·) as
    one token axis."""
    t = t.reshape(1, -1, t.shape[-1]) if t.dim() == 2 else t.flatten(1, -2)
    return t.reshape(t.shape[0], t.shape[1], n, d).transpose(1, 2)

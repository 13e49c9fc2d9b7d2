"""The q and k at an attention module's score product, for a module that computes its scores itself
rather than through transformers' attention interface (SAM's windowed ViT: ``(q · scale) @ kᵀ`` on the
split of one fused ``qkv`` projection; FSMT's time-first ``bmm``; Aria's projector, whose ``q_proj`` and
``k_proj`` outputs go through ``nn.MultiheadAttention``'s own input projections before q·kᵀ).

What the projections give is not what the scores are made of wherever the module does more between them
(a fused output's order, a second projection, a scale or bias added to q): only the q and k that meet in
the score product confirm the form. Outside the interface they are taken from the first matrix product
(``@``, ``matmul``, ``bmm``, ``baddbmm``, ``einsum``, ``scaled_dot_product_attention``) of the module's forward whose
shared dimension is the module's head width: (…, N, d_h) × (…, d_h, M), the key transposed back; inside
``nn.MultiheadAttention`` (``multi_head_attention_forward``, whose own products no function mode sees) they
are its input projections of query and key, as that function computes them before its product. The check
then holds them to the form exactly as it holds the interface's q and k, so a product that is not the
scores (or a wrong layout, or a map left out) fails the check; it never passes one.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch.overrides import TorchFunctionMode

from ..architectures.discovery.attention import Found
from .faults import observing
from .running import track_running

ADDED = {torch.baddbmm, torch.Tensor.baddbmm}
"""Products added to a first operand, ``baddbmm(bias, q, kᵀ)`` (GPT-NeoX-Japanese): q and kᵀ come second."""
TRANSPOSED = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm, *ADDED}
"""Products whose second operand is the keys transposed (…, d_h, M)."""
UPRIGHT = {torch.nn.functional.scaled_dot_product_attention}
"""Products given the keys as they are (…, M, d_h)."""
MULTIHEAD = torch.nn.functional.multi_head_attention_forward
"""``nn.MultiheadAttention``'s function: its input projections, then q·kᵀ, out of any function mode's sight."""


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
        if path is not None and path not in self.found:
            with observing("the score-product watch"):
                self._watch(path, func, args, kwargs)
        return func(*args, **kwargs)

    def _watch(self, path: str, func, args: tuple, kwargs: dict) -> None:
        if func is MULTIHEAD:
            self.found[path] = multihead_operands(args, kwargs)
            return
        if func is torch.einsum:
            operands = einsum_operands(args)
            if operands is not None and _scores(*operands, self.head_dims[path]):
                self.found[path] = operands
            return
        if len(args) < 2:
            return
        q, k = args[1:3] if func in ADDED and len(args) >= 3 else args[:2]
        if func in TRANSPOSED and _tensors(q, k):
            k = k.mT
        if (func in TRANSPOSED or func in UPRIGHT) and _tensors(q, k) and _scores(q, k, self.head_dims[path]):
            self.found[path] = (q.detach(), k.detach())


def _tensors(q, k) -> bool:
    return isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() >= 2 and k.dim() >= 2


def _scores(q: torch.Tensor, k: torch.Tensor, head_dim: int) -> bool:
    """Whether q (…, N, d) and k (…, M, d) are a score product's operands of head width ``head_dim``."""
    return q.shape[-1] == k.shape[-1] == head_dim and q.shape[:-2] == k.shape[:-2]


def einsum_operands(args: tuple) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The q and k of ``einsum(equation, q, k)`` that contracts one axis (a score product: Pegasus-X's
    ``BHNKF,BHNXF->BHNKX``, ProphetNet's ``bsij,bsjk->bsik`` with k transposed), each with its other axes
    in the output's order and the contracted one last; else None."""
    if len(args) != 3 or not isinstance(args[0], str) or not _tensors(args[1], args[2]):
        return None
    equation = args[0].replace(" ", "")
    if "->" not in equation or "." in equation:
        return None
    inputs, out = equation.split("->")
    if inputs.count(",") != 1:
        return None
    a, b = inputs.split(",")
    shared = set(a) & set(b) - set(out)
    if len(shared) != 1 or len(set(a)) != len(a) or len(set(b)) != len(b):  # one contraction, no diagonal
        return None
    (contracted,) = shared
    operands = []
    for letters, tensor in ((a, args[1]), (b, args[2])):
        order = [letters.index(x) for x in out if x in letters] + [letters.index(contracted)]
        if len(order) != len(letters) or tensor.dim() != len(letters):
            return None
        operands.append(tensor.permute(*order).detach())
    return operands[0], operands[1]


def multihead_operands(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The q and k of a ``multi_head_attention_forward`` call as (B, H, N, d_h) and (B, H, M, d_h): its
    query and key through its input projections (packed ``in_proj_weight`` rows [q; k; v], else the
    separate ``q_proj_weight`` and ``k_proj_weight``), the products it computes before q·kᵀ."""
    bound = inspect.signature(MULTIHEAD).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    width, heads = a["embed_dim_to_check"], a["num_heads"]
    weight, bias = a["in_proj_weight"], a["in_proj_bias"]
    biases = (None, None) if bias is None else (bias[:width], bias[width : 2 * width])
    if a["use_separate_proj_weight"]:
        weights = (a["q_proj_weight"], a["k_proj_weight"])
    else:
        weights = (weight[:width], weight[width : 2 * width])
    out = []
    for x, w, b in zip((a["query"], a["key"]), weights, biases, strict=True):
        y = torch.nn.functional.linear(x, w, b)  # (N, B, E) or, unbatched, (N, E)
        y = y if y.dim() == 3 else y[:, None]
        out.append(y.reshape(y.shape[0], y.shape[1], heads, -1).permute(1, 2, 0, 3).detach())
    return out[0], out[1]


@contextmanager
def score_products(modules: dict[str, torch.nn.Module], items: list[Found]) -> Iterator[_ScoreProducts]:
    """Within the block, the q and k of each module's first score product, by path (the ``found`` of the
    mode yielded fills as the modules run; a latent attention's q and k are seen at the interface only)."""
    watched = {item.path: item.head_dim for item in items if not item.latent}
    mode = _ScoreProducts(watched)

    with ExitStack() as stack:
        track_running(stack, {path: modules[path] for path in watched}, mode.active)
        if watched:
            stack.enter_context(mode)
        yield mode


def as_heads(t: torch.Tensor, n: int) -> torch.Tensor:
    """A product operand (…, N, d) as (B, n, N, d): its leading axes read as batch-major, head-minor (a
    model that orders them otherwise fails the check, it is not reordered to pass it); one with its heads
    second already is kept as it is (blocks of tokens: ``check.unblocked``)."""
    if t.dim() >= 4 and t.shape[1] == n:  # (B, H, N, d), or in blocks (B, H, blocks, rows, d)
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

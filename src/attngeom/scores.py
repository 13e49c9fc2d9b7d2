"""Symmetry and directionality of a bilinear form M = A Bᵀ, computed from its d × r factors.

Never forms the d × d matrix: every quantity is a trace or a diagonal of small r × r products (the
README, "What is computed"). The traces and the symmetry formula (``form_symmetry``) are also what the
training regulariser differentiates. Works batched over leading dimensions, so one call scores every head
of a layer, and on whatever device the factors live on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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


GAMMA = 2.0
"""Threshold in standard deviations above the mean norm, as in the published tables."""

DIRECTIONALITY_VARIANTS = ("excess", "eq17")
"""``excess``: sum of (norm − threshold) over norms above the threshold (the published tables).
``eq17``: the paper's literal Eq. 17, sum of the norms above the threshold."""


@dataclass(frozen=True)
class FormStatistics:
    """What the scores of M = A Bᵀ are made of, each batched over the leading dimensions."""

    trace_mm: torch.Tensor | None  # tr(M M); None for a two-space (cross-attention) form
    frobenius_sq: torch.Tensor  # ‖M‖²_F
    row_norms: torch.Tensor  # ‖m_i,·‖ for every row i (…, d)
    col_norms: torch.Tensor  # ‖m_·,j‖ for every column j (…, d)


def _diagonal(gram_matrix: torch.Tensor, ft: torch.Tensor) -> torch.Tensor:
    """diag(F G Fᵀ) = Σ_c (G Fᵀ)_ci (Fᵀ)_ci for a transposed factor Fᵀ (…, r, d); the product is
    multiplied in place where no gradient needs it (one d-long temporary fewer)."""
    out = product(gram_matrix, ft)
    out = out * ft if out.requires_grad else out.mul_(ft)
    return out.sum(dim=-2)


def form_statistics(a: torch.Tensor, b: torch.Tensor, square: bool = True) -> FormStatistics:
    """Traces and row/column norms of M = A Bᵀ for factors A, B of shape (…, d, r).

    Leading dimensions broadcast: one key factor B (d × r) serves a batch of query factors A.

    With ``square=False`` M maps between two spaces (A is d_q × r, B is d_k × r, e.g. decoder queries
    against encoder keys): tr(M M) has no meaning there and is left out.

    The products are taken on the transposed factors Aᵀ, Bᵀ (r × d): for factors stored as the rows of
    an ``nn.Linear`` weight (how the engine holds them) every operand and every d-long pass is contiguous.
    """
    if square and a.shape[-2:] != b.shape[-2:]:
        raise ValueError(f"factors must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if not square and a.shape[-1] != b.shape[-1]:
        raise ValueError(f"factors must share their rank, got {tuple(a.shape)} and {tuple(b.shape)}")
    at, bt = a.mT, b.mT
    gram_a = gram(at)
    gram_b = gram(bt)
    row_sq = _diagonal(gram_b, at)  # diag(A BᵀB Aᵀ)
    col_sq = _diagonal(gram_a, bt)  # diag(B AᵀA Bᵀ)
    return FormStatistics(
        trace_mm=trace_mm(a, b) if square else None,
        frobenius_sq=frobenius_sq(gram_a, gram_b),
        row_norms=row_sq.clamp_min(0).sqrt(),
        col_norms=col_sq.clamp_min(0).sqrt(),
    )


def symmetry(stats: FormStatistics) -> torch.Tensor:
    """s = tr(M M) / ‖M‖²_F ∈ [−1, 1]: 1 symmetric, −1 skew-symmetric, 0 for the zero matrix."""
    if stats.trace_mm is None:
        raise ValueError("symmetry is undefined for a two-space (cross-attention) form")
    return symmetry_ratio(stats.trace_mm, stats.frobenius_sq)


def _mass_above_threshold(norms: torch.Tensor, gamma: float, variant: str) -> torch.Tensor:
    threshold = norms.mean(dim=-1, keepdim=True) + gamma * norms.std(dim=-1, keepdim=True)
    # Clear the threshold by more than rounding: norms equal up to their last bits (an orthogonal M)
    # are equal, and rounding noise must not pick the sign of the score.
    rounding = norms.shape[-1] ** 0.5 * torch.finfo(norms.dtype).eps * norms.amax(dim=-1, keepdim=True)
    above = norms > threshold + rounding
    if variant == "excess":
        contribution = norms - threshold
    elif variant == "eq17":
        contribution = norms
    else:
        raise ValueError(
            f"unknown directionality variant {variant!r}; choose one of {DIRECTIONALITY_VARIANTS}"
        )
    return torch.where(above, contribution, torch.zeros_like(norms)).sum(dim=-1)


def directionality(stats: FormStatistics, gamma: float = GAMMA, variant: str = "excess") -> torch.Tensor:
    """d = (r̄ − c̄) / (r̄ + c̄): positive when a few rows dominate, negative when columns do; 0 if neither."""
    rows = _mass_above_threshold(stats.row_norms, gamma, variant)
    cols = _mass_above_threshold(stats.col_norms, gamma, variant)
    total = rows + cols
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return torch.where(total > 0, (rows - cols) / safe, torch.zeros_like(total))


@dataclass(frozen=True)
class Scores:
    """Scores of a batch of bilinear forms, one entry per form."""

    symmetry: torch.Tensor | None  # None for a two-space (cross-attention) form
    directionality: torch.Tensor
    norm: torch.Tensor  # Frobenius norm ‖M‖_F


@dataclass(frozen=True)
class Form:
    """The bilinear form M = A Bᵀ, held by its factors A, B of shape (…, d, r) and never formed.

    Every scorer (the scoring engine, the scores a training run records, the heatmaps) scores through this
    object, and its symmetry is ``form_symmetry``'s formula, which the training regulariser
    differentiates: each formula lives once. Leading dimensions broadcast (one key factor B serves a batch
    of query factors A). ``cross``: M maps between two spaces (decoder queries × encoder keys); A and B may
    have different numbers of rows, and symmetry is undefined. Differentiable.
    """

    a: torch.Tensor
    b: torch.Tensor
    cross: bool = False

    @cached_property
    def statistics(self) -> FormStatistics:
        return form_statistics(self.a, self.b, square=not self.cross)

    @property
    def symmetry(self) -> torch.Tensor | None:
        return None if self.cross else symmetry(self.statistics)

    def directionality(self, gamma: float = GAMMA, variant: str = "excess") -> torch.Tensor:
        return directionality(self.statistics, gamma, variant)

    @property
    def norm(self) -> torch.Tensor:
        return self.statistics.frobenius_sq.clamp_min(0).sqrt()

    def scores(self, gamma: float = GAMMA, variant: str = "excess") -> Scores:
        return Scores(self.symmetry, self.directionality(gamma, variant), self.norm)

    def dense(self) -> torch.Tensor:
        """M itself (d × d): for heatmaps and tests only."""
        return self.a @ self.b.mT


def score_factors(
    a: torch.Tensor, b: torch.Tensor, gamma: float = GAMMA, variant: str = "excess", square: bool = True
) -> Scores:
    """Scores of M = A Bᵀ (batched over leading dimensions): ``Form(a, b, cross=not square).scores()``."""
    return Form(a, b, cross=not square).scores(gamma, variant)


def score_dense(m: torch.Tensor, gamma: float = GAMMA, variant: str = "excess") -> Scores:
    """Reference: the same scores from the dense square matrix M (tests and benchmarks only)."""
    stats = FormStatistics(
        trace_mm=(m * m.mT).sum(dim=(-2, -1)),
        frobenius_sq=(m * m).sum(dim=(-2, -1)),
        row_norms=torch.linalg.vector_norm(m, dim=-1),
        col_norms=torch.linalg.vector_norm(m, dim=-2),
    )
    return Scores(
        symmetry=symmetry(stats),
        directionality=directionality(stats, gamma, variant),
        norm=stats.frobenius_sq.sqrt(),
    )


def split_heads(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """(d, n_heads·head_dim) → (n_heads, d, head_dim), head-major as every HF projection lays it out."""
    d, width = w.shape
    if width != n_heads * head_dim:
        raise ValueError(f"projection width {width} is not n_heads × head_dim = {n_heads} × {head_dim}")
    return w.reshape(d, n_heads, head_dim).permute(1, 0, 2)


HEAD_CHUNK = 1 << 20
"""Elements of W_q scored per batch of kv groups (at least one group). Small temporaries (8 MB in float64)
are reused from the heap; batching every head of a 1B model's layer (32 MB temporaries) page-faulted
fresh memory for each one and cost a quarter more CPU time (``benchmarks/README.md``)."""


def score_layer(
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    gamma: float = GAMMA,
    variant: str = "excess",
    cross: bool = False,
) -> tuple[Scores, Scores]:
    """Per-head and per-layer scores of one attention layer.

    ``w_q`` is d × (H·d_h) and ``w_k`` is d × (H_kv·d_h), in the x W convention. Query head h uses kv
    head h // (H / H_kv). The layer form Σ_h W_q,h W_k,g(h)ᵀ is scored as P Kᵀ where P sums the query
    heads that share a kv head, so its rank is at most H_kv·d_h. With ``cross`` ``w_k`` may have a
    different number of rows (keys read another space) and symmetry is None.

    Fastest when ``w_q.mT`` and ``w_k.mT`` are contiguous (the ``nn.Linear`` weight layout): every head
    is then a view, and all heads of a kv group are scored in one batched product.
    """
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
    for w, heads in ((w_q, n_heads), (w_k, n_kv_heads)):
        if w.shape[1] != heads * head_dim:
            raise ValueError(
                f"projection width {w.shape[1]} is not n_heads × head_dim = {heads} × {head_dim}"
            )
    group = n_heads // n_kv_heads
    d_q, d_k = w_q.shape[0], w_k.shape[0]
    q_heads = w_q.mT.reshape(n_kv_heads, group, head_dim, d_q)  # query head g·group + j, transposed
    k_heads = w_k.mT.reshape(n_kv_heads, 1, head_dim, d_k)  # kv head g, shared by its group
    step = max(1, HEAD_CHUNK // (group * head_dim * d_q))
    parts = [
        Form(q_heads[g : g + step].mT, k_heads[g : g + step].mT, cross).scores(gamma, variant)
        for g in range(0, n_kv_heads, step)
    ]
    per_head = Scores(
        symmetry=None if cross else torch.cat([s.symmetry.flatten() for s in parts]),
        directionality=torch.cat([s.directionality.flatten() for s in parts]),
        norm=torch.cat([s.norm.flatten() for s in parts]),
    )
    p = q_heads.sum(dim=1).reshape(n_kv_heads * head_dim, d_q).mT  # (d, H_kv·d_h)
    per_layer = Form(p, w_k, cross).scores(gamma, variant)
    return per_head, per_layer

"""Property tests of the score mathematics: definitions, invariances, and factored == dense."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import attngeom.scores as scores_module
from attngeom import scores as form_math
from attngeom.scores import (
    DIRECTIONALITY_VARIANTS,
    Form,
    FormStatistics,
    Scores,
    directionality,
    form_statistics,
    score_dense,
    score_factors,
    score_layer,
    split_heads,
)

F64 = torch.float64
FAST = settings(max_examples=40, deadline=None)

seeds = st.integers(0, 2**32 - 1)
variants = st.sampled_from(DIRECTIONALITY_VARIANTS)
batch_shapes = st.lists(st.integers(1, 3), max_size=2).map(tuple)
# Dense square matrices with arbitrary entries, ties and zeros included (hypothesis likes those).
square_matrices = st.integers(2, 12).flatmap(
    lambda d: arrays(np.float64, (d, d), elements=st.floats(-1e3, 1e3, allow_subnormal=False))
)


def gaussian(seed: int, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def assert_scores_close(got: Scores, want: Scores, atol: float = 1e-9, rtol: float = 1e-9) -> None:
    for field in ("symmetry", "directionality", "norm"):
        torch.testing.assert_close(getattr(got, field), getattr(want, field), atol=atol, rtol=rtol, msg=field)


# --- symmetry: +1 for symmetric, −1 for skew-symmetric --------------------------------------------------------


@FAST
@given(m=square_matrices)
def test_dense_symmetric_scores_one_and_skew_minus_one(m: np.ndarray) -> None:
    x = torch.from_numpy(m)
    sym, skew = x + x.T, x - x.T
    assume(bool((sym * sym).sum() > 0) and bool((skew * skew).sum() > 0))  # not zero, not underflowing
    assert score_dense(sym).symmetry.item() == pytest.approx(1.0, abs=1e-12)
    assert score_dense(skew).symmetry.item() == pytest.approx(-1.0, abs=1e-12)
    assert score_dense(sym).directionality.item() == pytest.approx(0.0, abs=1e-9)
    assert score_dense(skew).directionality.item() == pytest.approx(0.0, abs=1e-9)


def symmetry_rounding(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The rounding bound of a symmetry computed from factors: tr(MM) and ‖M‖²_F are sums of products of
    A's and B's entries, so each is off by about ε‖A‖²_F‖B‖²_F, and their ratio by ε·κ² with
    κ = ‖A‖_F‖B‖_F / ‖ABᵀ‖_F. The factor 64 is margin over the 3 measured on 252,000 Gaussian draws."""
    norm = torch.linalg.matrix_norm  # Frobenius, batched over the leading dimensions
    kappa = norm(a) * norm(b) / norm(a @ b.mT)
    return 64 * torch.finfo(a.dtype).eps * kappa**2


@FAST
@given(seed=seeds, batch=batch_shapes, d=st.integers(2, 24), r=st.integers(2, 8))
def test_factored_symmetric_scores_one_and_skew_minus_one(seed: int, batch: tuple, d: int, r: int) -> None:
    """Within rounding of the factors' conditioning: a 2 × 2 skew A K Aᵀ is one number, at times near 0."""
    a = gaussian(seed, *batch, d, r)
    y = gaussian(seed + 1, *batch, r, r)
    symmetric_b, skew_b = a @ (y + y.mT), a @ (y - y.mT)  # M = A S Aᵀ (S = Sᵀ) and A K Aᵀ (K = −Kᵀ)
    symmetric, skew = score_factors(a, symmetric_b), score_factors(a, skew_b)
    assert ((symmetric.symmetry - 1).abs() <= symmetry_rounding(a, symmetric_b)).all(), symmetric.symmetry
    assert ((skew.symmetry + 1).abs() <= symmetry_rounding(a, skew_b)).all(), skew.symmetry
    torch.testing.assert_close(symmetric.directionality, torch.zeros(batch, dtype=F64), atol=1e-6, rtol=0)


# --- invariances ------------------------------------------------------------------------------------------------


@FAST
@given(m=square_matrices, variant=variants)
def test_transpose_flips_directionality_keeps_symmetry(m: np.ndarray, variant: str) -> None:
    x = torch.from_numpy(m)
    s, t = score_dense(x, variant=variant), score_dense(x.T, variant=variant)
    assert t.symmetry.item() == pytest.approx(s.symmetry.item(), abs=1e-12)
    assert t.directionality.item() == pytest.approx(-s.directionality.item(), abs=1e-9)
    assert t.norm.item() == pytest.approx(s.norm.item(), rel=1e-12)


@FAST
@given(seed=seeds, batch=batch_shapes, d=st.integers(2, 24), r=st.integers(1, 8), variant=variants)
def test_factored_transpose_is_swapping_factors(
    seed: int, batch: tuple, d: int, r: int, variant: str
) -> None:
    a, b = gaussian(seed, *batch, d, r), gaussian(seed + 1, *batch, d, r)
    s, t = score_factors(a, b, variant=variant), score_factors(b, a, variant=variant)
    assert_scores_close(t, Scores(s.symmetry, -s.directionality, s.norm))


@FAST
@given(
    seed=seeds,
    d=st.integers(2, 24),
    r=st.integers(1, 8),
    c=st.floats(1e-3, 1e3),
    negative=st.booleans(),
    variant=variants,
)
def test_scale_invariance(seed: int, d: int, r: int, c: float, negative: bool, variant: str) -> None:
    """s(cM) = s(M) and d(cM) = d(M) for every c ≠ 0 (negative too: tr(MM) and the norms see c², |c|)."""
    c = -c if negative else c
    a, b = gaussian(seed, d, r), gaussian(seed + 1, d, r)
    base = score_factors(a, b, variant=variant)
    want = Scores(base.symmetry, base.directionality, abs(c) * base.norm)
    assert_scores_close(score_factors(c * a, b, variant=variant), want)
    assert_scores_close(score_dense(c * (a @ b.mT), variant=variant), want)


# --- factored == dense ------------------------------------------------------------------------------------------


@FAST
@given(seed=seeds, batch=batch_shapes, d=st.integers(2, 32), r=st.integers(1, 12), variant=variants)
def test_factored_equals_dense(seed: int, batch: tuple, d: int, r: int, variant: str) -> None:
    a, b = gaussian(seed, *batch, d, r), gaussian(seed + 1, *batch, d, r)
    assert_scores_close(score_factors(a, b, variant=variant), score_dense(a @ b.mT, variant=variant))


def test_factored_float32_close_to_float64() -> None:
    a, b = gaussian(0, 4, 256, 16), gaussian(1, 4, 256, 16)
    got, want = score_factors(a.float(), b.float()), score_factors(a, b)
    for field in ("symmetry", "directionality", "norm"):
        torch.testing.assert_close(getattr(got, field).double(), getattr(want, field), atol=1e-4, rtol=1e-4)


def dense_layer(
    w_q: torch.Tensor, w_k: torch.Tensor, n_heads: int, n_kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head matrices W_q,h W_k,g(h)ᵀ and their sum, formed explicitly from column slices."""
    group = n_heads // n_kv_heads
    heads = []
    for h in range(n_heads):
        g = h // group
        q_h = w_q[:, h * head_dim : (h + 1) * head_dim]
        k_g = w_k[:, g * head_dim : (g + 1) * head_dim]
        heads.append(q_h @ k_g.T)
    return torch.stack(heads), sum(heads)


LAYER_SHAPES = [
    # (d, n_heads, n_kv_heads, head_dim)
    (32, 8, 2, 4),  # grouped-query attention, head_dim = d / H
    (32, 8, 2, 6),  # grouped-query attention, head_dim ≠ d / H
    (24, 8, 2, 5),
    (16, 4, 4, 4),  # multi-head
    (20, 6, 1, 7),  # multi-query
    (8, 2, 1, 16),  # head_dim · H > d
]


@pytest.mark.parametrize("variant", DIRECTIONALITY_VARIANTS)
@pytest.mark.parametrize(("d", "n_heads", "n_kv_heads", "head_dim"), LAYER_SHAPES)
def test_score_layer_equals_dense(d: int, n_heads: int, n_kv_heads: int, head_dim: int, variant: str) -> None:
    w_q, w_k = gaussian(0, d, n_heads * head_dim), gaussian(1, d, n_kv_heads * head_dim)
    per_head, per_layer = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim, variant=variant)
    heads, layer = dense_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    assert per_head.symmetry.shape == (n_heads,)
    assert_scores_close(per_head, score_dense(heads, variant=variant))
    assert_scores_close(per_layer, score_dense(layer, variant=variant))


@FAST
@given(
    seed=seeds,
    d=st.integers(2, 40),
    n_kv_heads=st.sampled_from([1, 2, 4]),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.integers(1, 9),
)
def test_score_layer_equals_dense_random_shapes(
    seed: int, d: int, n_kv_heads: int, group: int, head_dim: int
) -> None:
    n_heads = n_kv_heads * group
    w_q, w_k = gaussian(seed, d, n_heads * head_dim), gaussian(seed + 1, d, n_kv_heads * head_dim)
    per_head, per_layer = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    heads, layer = dense_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    assert_scores_close(per_head, score_dense(heads))
    assert_scores_close(per_layer, score_dense(layer))


def score_layer_per_group(
    w_q: torch.Tensor, w_k: torch.Tensor, n_heads: int, n_kv_heads: int, head_dim: int
) -> tuple[Scores, Scores]:
    """The previous implementation: one ``Form`` per kv group on split views, then P Kᵀ (a reference)."""
    group = n_heads // n_kv_heads
    q_heads, k_heads = split_heads(w_q, n_heads, head_dim), split_heads(w_k, n_kv_heads, head_dim)
    parts = [Form(q_heads[g * group : (g + 1) * group], k_heads[g]).scores() for g in range(n_kv_heads)]
    per_head = Scores(
        *(torch.cat([getattr(s, f) for s in parts]) for f in ("symmetry", "directionality", "norm"))
    )
    p = (
        q_heads.reshape(n_kv_heads, group, *q_heads.shape[1:])
        .sum(dim=1)
        .permute(1, 0, 2)
        .reshape(w_q.shape[0], -1)
    )
    return per_head, Form(p, w_k).scores()


def assert_same_to_1e12(got: Scores, want: Scores) -> None:
    """1e-12 relative; symmetry and directionality lie in [−1, 1], so there 1e-12 absolute too (a
    directionality is a difference of excesses over a threshold: near 0 its relative error is unbounded)."""
    for field in ("symmetry", "directionality"):
        torch.testing.assert_close(
            getattr(got, field), getattr(want, field), rtol=1e-12, atol=1e-12, msg=field
        )
    torch.testing.assert_close(got.norm, want.norm, rtol=1e-12, atol=0, msg="norm")


@FAST
@given(
    seed=seeds,
    d=st.integers(8, 96),
    n_kv_heads=st.sampled_from([1, 2, 4]),
    group=st.sampled_from([1, 2, 4, 8]),
    head_dim=st.integers(1, 16),
    engine_layout=st.booleans(),
)
def test_score_layer_matches_dense_and_previous_implementation(
    seed: int, d: int, n_kv_heads: int, group: int, head_dim: int, engine_layout: bool
) -> None:
    """Random GQA layers, in the plain x W layout and in the engine's (Wᵀ contiguous), to 1e-12."""
    n_heads = n_kv_heads * group
    w_q, w_k = gaussian(seed, d, n_heads * head_dim), gaussian(seed + 1, d, n_kv_heads * head_dim)
    if engine_layout:
        w_q, w_k = w_q.T.contiguous().T, w_k.T.contiguous().T
    per_head, per_layer = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    heads, layer = dense_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    old_head, old_layer = score_layer_per_group(w_q, w_k, n_heads, n_kv_heads, head_dim)
    assert_same_to_1e12(per_head, score_dense(heads))
    assert_same_to_1e12(per_layer, score_dense(layer))
    assert_same_to_1e12(per_head, old_head)
    assert_same_to_1e12(per_layer, old_layer)


def test_score_layer_in_chunks_of_kv_groups_matches_one_batch(monkeypatch) -> None:
    """A very wide layer is scored a few kv groups at a time (bounded memory): same numbers."""
    n_heads, n_kv_heads, head_dim, d = 32, 8, 8, 64
    w_q, w_k = gaussian(0, d, n_heads * head_dim), gaussian(1, d, n_kv_heads * head_dim)
    whole = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    monkeypatch.setattr(scores_module, "HEAD_CHUNK", 3 * 4 * head_dim * d)  # three kv groups per batch
    chunked = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    for got, want in zip(chunked, whole, strict=True):
        assert_same_to_1e12(got, want)


@FAST
@given(seed=seeds, batch=batch_shapes, r=st.integers(1, 48), d=st.integers(1, 40), block=st.integers(1, 9))
def test_gram_in_blocks_equals_one_product(seed: int, batch: tuple, r: int, d: int, block: int) -> None:
    """Xᵀ X formed block by block (upper blocks multiplied, lower ones mirrored) is the one product."""
    xt = gaussian(seed, *batch, r, d)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(form_math, "GRAM_BLOCK", block)
        gram = form_math.gram(xt)
    torch.testing.assert_close(gram, xt @ xt.mT, rtol=1e-12, atol=1e-12 * d)


@FAST
@given(
    seed=seeds,
    d=st.integers(8, 64),
    n_kv_heads=st.sampled_from([1, 2, 4]),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.integers(1, 12),
    block=st.integers(1, 6),
)
def test_score_layer_with_gram_blocks_matches_dense(
    seed: int, d: int, n_kv_heads: int, group: int, head_dim: int, block: int
) -> None:
    """The blocked Gram products (``GRAM_BLOCK``; every layer of a 1B model uses them) change no score
    beyond 1e-12, in the engine's layout."""
    n_heads = n_kv_heads * group
    w_q = gaussian(seed, d, n_heads * head_dim).T.contiguous().T
    w_k = gaussian(seed + 1, d, n_kv_heads * head_dim).T.contiguous().T
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(form_math, "GRAM_BLOCK", block)
        per_head, per_layer = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    heads, layer = dense_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    assert_same_to_1e12(per_head, score_dense(heads))
    assert_same_to_1e12(per_layer, score_dense(layer))


def test_layer_pairs_query_head_with_kv_head_h_div_group() -> None:
    """Only the kv head h // (H/H_kv) is non-zero for query head h: any other pairing scores the zero matrix."""
    d, n_heads, n_kv_heads, head_dim = 16, 8, 2, 4
    w_q = gaussian(0, d, n_heads * head_dim)
    w_k = gaussian(1, d, n_kv_heads * head_dim)
    w_k[:, head_dim:] = 0  # kv head 1 is zero: query heads 4..7 (h // 4 == 1) must score 0
    per_head, _ = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    assert (per_head.norm[:4] > 0).all()
    assert (per_head.norm[4:] == 0).all()


def dense_rectangular(m: torch.Tensor, variant: str) -> Scores:
    """Directionality and norm of a (…, d_q, d_k) matrix from its dense row and column norms."""
    stats = FormStatistics(
        trace_mm=None,
        frobenius_sq=(m * m).sum(dim=(-2, -1)),
        row_norms=torch.linalg.vector_norm(m, dim=-1),
        col_norms=torch.linalg.vector_norm(m, dim=-2),
    )
    return Scores(None, directionality(stats, variant=variant), stats.frobenius_sq.sqrt())


@pytest.mark.parametrize("variant", DIRECTIONALITY_VARIANTS)
def test_cross_attention_layer_equals_dense(variant: str) -> None:
    """Queries from a d_q space, keys from a d_k space: no symmetry, directionality of the rectangular M."""
    d_q, d_k, n_heads, n_kv_heads, head_dim = 24, 40, 8, 2, 6
    w_q, w_k = gaussian(0, d_q, n_heads * head_dim), gaussian(1, d_k, n_kv_heads * head_dim)
    per_head, per_layer = score_layer(w_q, w_k, n_heads, n_kv_heads, head_dim, variant=variant, cross=True)
    heads, layer = dense_layer(w_q, w_k, n_heads, n_kv_heads, head_dim)
    assert per_head.symmetry is None and per_layer.symmetry is None
    for got, want in (
        (per_head, dense_rectangular(heads, variant)),
        (per_layer, dense_rectangular(layer, variant)),
    ):
        torch.testing.assert_close(got.directionality, want.directionality, atol=1e-9, rtol=1e-9)
        torch.testing.assert_close(got.norm, want.norm, atol=1e-9, rtol=1e-9)


# --- degenerate matrices ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", DIRECTIONALITY_VARIANTS)
def test_zero_matrix_scores_zero_not_nan(variant: str) -> None:
    zero = torch.zeros(3, 10, 4, dtype=F64)
    for scores in (
        score_factors(zero, zero, variant=variant),
        score_dense(torch.zeros(3, 10, 10, dtype=F64), variant=variant),
        *score_layer(torch.zeros(10, 8), torch.zeros(10, 4), 4, 2, 2, variant=variant),
    ):
        for field in ("symmetry", "directionality", "norm"):
            value = getattr(scores, field)
            assert not value.isnan().any(), field
            assert (value == 0).all(), field


@pytest.mark.parametrize("d", [16, 64, 256])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_equal_norms_give_zero_directionality(d: int, dtype: torch.dtype) -> None:
    """An orthogonal M has every row and column norm equal to 1: no row or column stands out.

    Rounding makes the norms differ in the last bits; that noise must not decide the sign.
    """
    q, _ = torch.linalg.qr(gaussian(d, d, d))
    q = q.to(dtype)
    eye = torch.eye(d, dtype=dtype)
    for variant in DIRECTIONALITY_VARIANTS:
        assert score_dense(q, variant=variant).directionality.item() == 0.0
        assert score_factors(q, eye, variant=variant).directionality.item() == 0.0
        assert score_factors(eye, q.T.contiguous(), variant=variant).directionality.item() == 0.0


# --- directionality against a hand computation of the definitions -----------------------------------------------


def hand_scores(m: list[list[float]], variant: str) -> tuple[float, float, int, int]:
    """The reference README's definitions, in plain Python: (symmetry, directionality, #rows, #cols above)."""
    n = len(m)
    trace_mm = sum(m[i][j] * m[j][i] for i in range(n) for j in range(n))
    frobenius_sq = sum(x * x for row in m for x in row)
    rows = [math.sqrt(sum(x * x for x in row)) for row in m]
    cols = [math.sqrt(sum(m[i][j] ** 2 for i in range(n))) for j in range(n)]

    def mass(norms: list[float]) -> tuple[float, int]:
        threshold = statistics.fmean(norms) + 2 * statistics.stdev(norms)  # sample std (n − 1)
        above = [x for x in norms if x > threshold]
        total = sum(x - threshold for x in above) if variant == "excess" else sum(above)
        return total, len(above)

    (r, n_rows), (c, n_cols) = mass(rows), mass(cols)
    return trace_mm / frobenius_sq, (r - c) / (r + c), n_rows, n_cols


def test_excess_and_eq17_match_hand_computation() -> None:
    m = gaussian(0, 10, 10)
    m[3, :] *= 5  # one dominant row
    m[:, 7] *= 5  # and one dominant column, so both sums are non-zero
    results = {}
    for variant in DIRECTIONALITY_VARIANTS:
        sym, direc, n_rows, n_cols = hand_scores(m.tolist(), variant)
        assert n_rows >= 1 and n_cols >= 1  # the case exercises both sums
        for scores in (
            score_dense(m, variant=variant),
            score_factors(m, torch.eye(10, dtype=F64), variant=variant),
        ):
            assert scores.symmetry.item() == pytest.approx(sym, abs=1e-12)
            assert scores.directionality.item() == pytest.approx(direc, abs=1e-12)
        results[variant] = direc
    assert abs(results["excess"] - results["eq17"]) > 1e-2  # the variants are distinguishable here


def test_unknown_variant_raises() -> None:
    with pytest.raises(ValueError, match="variant"):
        score_dense(torch.eye(3, dtype=F64), variant="eq15")


@FAST
@given(seed=seeds, d=st.integers(12, 48), c=st.floats(5.0, 100.0), j=st.integers(0, 47), variant=variants)
def test_dominant_column_negative_dominant_row_positive(
    seed: int, d: int, c: float, j: int, variant: str
) -> None:
    j %= d
    column = gaussian(seed, d, d)
    column[:, j] += c  # column j dominates: every row gets the same large entry
    row = column.T.contiguous()
    eye = torch.eye(d, dtype=F64)
    for scores in (score_dense(column, variant=variant), score_factors(column, eye, variant=variant)):
        assert scores.directionality.item() < 0
    for scores in (score_dense(row, variant=variant), score_factors(row, eye, variant=variant)):
        assert scores.directionality.item() > 0


# --- bad shapes -------------------------------------------------------------------------------------------------


def test_bad_shapes_raise() -> None:
    with pytest.raises(ValueError, match="same shape"):
        form_statistics(torch.zeros(4, 2), torch.zeros(4, 3))
    with pytest.raises(ValueError, match="multiple"):
        score_layer(torch.zeros(8, 12), torch.zeros(8, 8), 3, 2, 4)
    with pytest.raises(ValueError, match="n_heads × head_dim"):
        score_layer(torch.zeros(8, 12), torch.zeros(8, 4), 4, 1, 4)


def test_form_is_differentiable_through_every_statistic() -> None:
    """The training regulariser back-propagates through ``Form``: its in-place shortcuts stay off there."""
    a = gaussian(0, 2, 12, 3).requires_grad_()
    b = gaussian(1, 1, 12, 3).requires_grad_()  # one key factor shared by two query factors

    def statistics(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        stats = Form(a, b).statistics
        return stats.trace_mm, stats.frobenius_sq, stats.row_norms, stats.col_norms

    assert torch.autograd.gradcheck(statistics, (a, b))

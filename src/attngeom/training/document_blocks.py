"""Attention inside each document of packed rows, in Triton kernels that visit only the key blocks a query
block's documents reach, with attention dropout inside (``training.attention: blocks``).

A document is a contiguous run of a row, so the keys any query of a block may see lie between the start of
its first query's document and the end of its last one's (``document_mask.document_bounds``); the kernels
loop over those key blocks only and mask the pairs of other documents inside them (and, ``causal``, later
keys). What the dense document mask computes over every pair of a 512-token row, they compute over the blocks
the documents touch: FlashAttention 2's forward (online softmax, log-sum-exp kept) and backward (the scores recomputed;
dK, dV per key block, dQ per query block), in bf16 products with float32 accumulation.

Dropout keeps a pair with probability 1 − p and scales it by 1/(1 − p), as SDPA does, p resolved to 1/65,536
(``dropout.dropout_threshold``). Each pair's 16-bit draw is the top of a keyed integer hash of its place (``_kept``),
computed where the pair is, the same in the forward and the backward pass (``keep_mask`` draws them alone,
for tests). Not Philox, as SDPA's dropout is: Philox's four words per call, shared between pairs, had to be
moved between threads to their pairs, which cost more than the hash (results/document_blocks_h200, lab 1).
The seed is drawn from torch's CUDA generator on the device, so a CUDA graph replays new draws.

CUDA (or Triton's interpreter: ``TRITON_INTERPRET=1``, on the CPU, for tests); Triton comes with CUDA
builds of torch, so this module is imported only where the setting is chosen. transformers' BERT reaches it
through its ``AttentionInterface`` under ``BLOCKS``, given the bounds as a keyword its layers pass on.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from transformers import AttentionInterface

from .document_attention import BLOCKS
from .dropout import dropout_threshold

LOG2E = tl.constexpr(1.4426950408889634)
"""log₂ e: the kernels take softmax in base 2 (``exp2``), the scores scaled by scale · log₂ e, the
log-sum-exp kept in base 2."""


@triton.jit
def _rows(pointer, base, places, inside, s_l, D: tl.constexpr, DIM: tl.constexpr):
    """The (places, D) tile of one row and head; rows outside the sequence and the head dimension's padding
    (``D``: ``DIM`` padded to a power of two, at least 16) read as zero."""
    offs_d = tl.arange(0, D)
    mask = inside[:, None] & (offs_d < DIM)[None, :]
    return tl.load(pointer + base + places[:, None] * s_l + offs_d[None, :], mask=mask, other=0.0)


@triton.jit
def _store_rows(pointer, value, base, places, inside, s_l, D: tl.constexpr, DIM: tl.constexpr):
    """Writes a (places, D) tile where ``_rows`` reads it."""
    offs_d = tl.arange(0, D)
    mask = inside[:, None] & (offs_d < DIM)[None, :]
    tl.store(
        pointer + base + places[:, None] * s_l + offs_d[None, :],
        value.to(pointer.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _float32(value):
    """A float argument in float32: inductor passes one as fp64, which would make every product with it,
    tile by tile, fp64 arithmetic and conversions."""
    return tl.cast(value, tl.float32)


@triton.jit
def _attend(queries, keys, lo, hi, CAUSAL: tl.constexpr):
    """Which pairs attend: the key inside the query's document ([lo, hi), the query's bounds) and, ``CAUSAL``,
    not after it; ``queries``, ``lo``, ``hi`` and ``keys`` come shaped to broadcast, so one function serves
    both frames (query × key, key × query)."""
    attend = (keys >= lo) & (keys < hi)
    if CAUSAL:
        attend = attend & (keys <= queries)
    return attend


@triton.jit
def _mix(x):
    """Wellons' 32-bit integer hash lowbias32 (xorshift, multiply, xorshift, multiply), without its last
    xorshift, which leaves the top 16 bits, the ones the draws use, as they are."""
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    return x


@triton.jit
def _stream(seed, row_head):
    """The key of one row and head's draws, from the call's seed."""
    key = _mix(seed.to(tl.uint32) ^ (row_head.to(tl.uint32) * 0x9E3779B9))
    return key ^ (key >> 16)


@triton.jit
def _kept(stream, queries, keys, length, threshold):
    """Which pairs dropout keeps: the top 16 bits of the hash of the pair's place (query × length + key)
    under the row and head's ``stream``, kept where at least ``threshold``. A draw per pair, computed where
    the pair is, in either frame: no shuffle of shared draws between threads."""
    return (_mix((queries * length + keys).to(tl.uint32) ^ stream) >> 16) >= threshold


def _configs(blocks: list[tuple[int, int, int, int]]) -> list[triton.Config]:
    """Autotuner candidates: (BM, BN, warps, stages); under Triton's interpreter, which has no GPU to time
    them on, the first alone."""
    configs = [triton.Config({"BM": m, "BN": n}, num_warps=w, num_stages=st) for m, n, w, st in blocks]
    return configs[:1] if triton.knobs.runtime.interpret else configs


QUERY_BLOCKS = _configs([(64, 64, 4, 2), (64, 32, 4, 2), (64, 64, 4, 3), (64, 32, 4, 3), (64, 128, 4, 2)])
"""Candidates of the kernels that loop over key blocks for a query block (forward, dQ): the fastest of a
wider search on an H200 at BERT's shapes (``benchmarks/results/document_blocks_h200/``)."""
KEY_BLOCKS = _configs([(32, 64, 4, 2), (16, 64, 4, 2), (64, 64, 4, 2), (32, 64, 4, 3), (32, 128, 4, 2)])
"""Candidates of the kernel that loops over query blocks for a key block (dK, dV)."""
TUNED_ON = ["length", "heads", "D", "DROPOUT", "CAUSAL"]


@triton.autotune(configs=QUERY_BLOCKS, key=TUNED_ON)
@triton.jit
def _attention_forward(
    Q, K, V, O, LSE, LO, HI, SEED,
    threshold, keep_scale, scale, length, heads,
    s_b, s_l, s_h,
    BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, DIM: tl.constexpr, DROPOUT: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """The output of one query block, and its base-2 log-sum-exp, over the key blocks its documents reach."""
    block, row_head = tl.program_id(0), tl.program_id(1)
    row, head = row_head // heads, row_head % heads
    offs_m = block * BM + tl.arange(0, BM)
    inside = offs_m < length
    base = row * s_b + head * s_h
    q = _rows(Q, base, offs_m, inside, s_l, D, DIM)
    lo_m = tl.load(LO + row * length + offs_m, mask=inside, other=length)
    hi_m = tl.load(HI + row * length + offs_m, mask=inside, other=0)
    last = tl.max(hi_m, axis=0)
    if CAUSAL:
        last = tl.minimum(last, block * BM + BM)
    stream = _stream(tl.load(SEED), row_head)
    qk_scale, keep_scale = _float32(scale * LOG2E), _float32(keep_scale)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start in range((tl.min(lo_m, axis=0) // BN) * BN, last, BN):
        offs_n = start + tl.arange(0, BN)
        k = _rows(K, base, offs_n, offs_n < length, s_l, D, DIM)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(
            _attend(offs_m[:, None], offs_n[None, :], lo_m[:, None], hi_m[:, None], CAUSAL), s, float("-inf")
        )
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if DROPOUT:
            p = tl.where(_kept(stream, offs_m[:, None], offs_n[None, :], length, threshold), p, 0.0)
        v = _rows(V, base, offs_n, offs_n < length, s_l, D, DIM)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if DROPOUT:  # a kept pair's scale, once per query
        acc = acc * keep_scale
    _store_rows(O, acc / l_safe[:, None], base, offs_m, inside, s_l, D, DIM)
    tl.store(LSE + row_head * length + offs_m, m_i + tl.math.log2(l_safe), mask=inside)


@triton.autotune(configs=KEY_BLOCKS, key=TUNED_ON)
@triton.jit
def _attention_backward_keys(
    Q, K, V, DO, LSE, DELTA, DK, DV, LO, HI, SEED,
    threshold, keep_scale, scale, length, heads,
    s_b, s_l, s_h,
    BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, DIM: tl.constexpr, DROPOUT: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """dK and dV of one key block, over the query blocks its documents reach. Computed in the key × query
    frame (Sᵀ = K Qᵀ), so that Pᵀ and dSᵀ enter their products as computed, never transposed in registers."""
    block, row_head = tl.program_id(0), tl.program_id(1)
    row, head = row_head // heads, row_head % heads
    offs_n = block * BN + tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    inside = offs_n < length
    base = row * s_b + head * s_h
    k = _rows(K, base, offs_n, inside, s_l, D, DIM)
    v = _rows(V, base, offs_n, inside, s_l, D, DIM)
    lo_n = tl.load(LO + row * length + offs_n, mask=inside, other=length)
    hi_n = tl.load(HI + row * length + offs_n, mask=inside, other=0)
    first = tl.min(lo_n, axis=0)
    if CAUSAL:
        first = tl.maximum(first, block * BN)
    stream = _stream(tl.load(SEED), row_head)
    qk_scale, keep_scale, scale = _float32(scale * LOG2E), _float32(keep_scale), _float32(scale)
    dk = tl.zeros([BN, D], tl.float32)
    dv = tl.zeros([BN, D], tl.float32)
    for start in range((first // BM) * BM, tl.max(hi_n, axis=0), BM):
        offs_m = start + tl.arange(0, BM)
        rows_in = offs_m < length
        q_t = tl.load(
            Q + base + offs_m[None, :] * s_l + offs_d[:, None],
            mask=rows_in[None, :] & (offs_d < DIM)[:, None],
            other=0.0,
        )
        lo_m = tl.load(LO + row * length + offs_m, mask=rows_in, other=length)
        hi_m = tl.load(HI + row * length + offs_m, mask=rows_in, other=0)
        lse = tl.load(LSE + row_head * length + offs_m, mask=rows_in, other=0.0)
        s_t = tl.dot(k, q_t) * qk_scale
        attend = _attend(offs_m[None, :], offs_n[:, None], lo_m[None, :], hi_m[None, :], CAUSAL)
        p_t = tl.where(attend, tl.math.exp2(s_t - lse[None, :]), 0.0)
        do = _rows(DO, base, offs_m, rows_in, s_l, D, DIM)
        dp_t = tl.dot(v, tl.trans(do))
        if DROPOUT:
            kept = _kept(stream, offs_m[None, :], offs_n[:, None], length, threshold)
            dv += tl.dot(tl.where(kept, p_t * keep_scale, 0.0).to(do.dtype), do)
            dp_t = tl.where(kept, dp_t * keep_scale, 0.0)
        else:
            dv += tl.dot(p_t.to(do.dtype), do)
        delta = tl.load(DELTA + row_head * length + offs_m, mask=rows_in, other=0.0)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q_t.dtype), tl.trans(q_t))
    _store_rows(DK, dk * scale, base, offs_n, inside, s_l, D, DIM)
    _store_rows(DV, dv, base, offs_n, inside, s_l, D, DIM)


@triton.autotune(configs=QUERY_BLOCKS, key=TUNED_ON)
@triton.jit
def _attention_backward_queries(
    Q, K, V, DO, LSE, DELTA, DQ, LO, HI, SEED,
    threshold, keep_scale, scale, length, heads,
    s_b, s_l, s_h,
    BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, DIM: tl.constexpr, DROPOUT: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """dQ of one query block, over the key blocks its documents reach."""
    block, row_head = tl.program_id(0), tl.program_id(1)
    row, head = row_head // heads, row_head % heads
    offs_m = block * BM + tl.arange(0, BM)
    inside = offs_m < length
    base = row * s_b + head * s_h
    q = _rows(Q, base, offs_m, inside, s_l, D, DIM)
    do = _rows(DO, base, offs_m, inside, s_l, D, DIM)
    lse = tl.load(LSE + row_head * length + offs_m, mask=inside, other=0.0)
    delta = tl.load(DELTA + row_head * length + offs_m, mask=inside, other=0.0)
    lo_m = tl.load(LO + row * length + offs_m, mask=inside, other=length)
    hi_m = tl.load(HI + row * length + offs_m, mask=inside, other=0)
    last = tl.max(hi_m, axis=0)
    if CAUSAL:
        last = tl.minimum(last, block * BM + BM)
    stream = _stream(tl.load(SEED), row_head)
    qk_scale, keep_scale, scale = _float32(scale * LOG2E), _float32(keep_scale), _float32(scale)
    dq = tl.zeros([BM, D], tl.float32)
    for start in range((tl.min(lo_m, axis=0) // BN) * BN, last, BN):
        offs_n = start + tl.arange(0, BN)
        k = _rows(K, base, offs_n, offs_n < length, s_l, D, DIM)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        attend = _attend(offs_m[:, None], offs_n[None, :], lo_m[:, None], hi_m[:, None], CAUSAL)
        p = tl.where(attend, tl.math.exp2(s - lse[:, None]), 0.0)
        v = _rows(V, base, offs_n, offs_n < length, s_l, D, DIM)
        dp = tl.dot(do, tl.trans(v))
        if DROPOUT:
            kept = _kept(stream, offs_m[:, None], offs_n[None, :], length, threshold)
            dp = tl.where(kept, dp * keep_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    _store_rows(DQ, dq * scale, base, offs_m, inside, s_l, D, DIM)


@triton.jit
def _keep_mask(OUT, SEED, threshold, length, BM: tl.constexpr, BN: tl.constexpr):
    """The pairs the kernels' dropout keeps, as a (rows, heads, L, L) tensor: for tests."""
    block_m, block_n, row_head = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = block_m * BM + tl.arange(0, BM)
    offs_n = block_n * BN + tl.arange(0, BN)
    keep = _kept(_stream(tl.load(SEED), row_head), offs_m[:, None], offs_n[None, :], length, threshold)
    where = OUT + row_head * length * length + offs_m[:, None] * length + offs_n[None, :]
    tl.store(where, keep.to(tl.int8), mask=(offs_m[:, None] < length) & (offs_n[None, :] < length))


@triton.jit
def _attention_delta(
    O, DO, DELTA, length, heads, s_b, s_l, s_h, BM: tl.constexpr, D: tl.constexpr, DIM: tl.constexpr
):
    """Each query's Σ_d dO · O, which the backward pass subtracts from every pair's dP."""
    block, row_head = tl.program_id(0), tl.program_id(1)
    offs_m = block * BM + tl.arange(0, BM)
    inside = offs_m < length
    base = (row_head // heads) * s_b + (row_head % heads) * s_h
    o = _rows(O, base, offs_m, inside, s_l, D, DIM).to(tl.float32)
    do = _rows(DO, base, offs_m, inside, s_l, D, DIM).to(tl.float32)
    tl.store(DELTA + row_head * length + offs_m, tl.sum(o * do, axis=1), mask=inside)


BLOCK = 64
"""The block of the helper kernels (Σ dO · O, the dropout mask for tests); the attention kernels' blocks are
tuned (``QUERY_BLOCKS``, ``KEY_BLOCKS``)."""


def tuned() -> dict[str, str]:
    """The configuration the autotuner chose for each attention kernel (after a call)."""
    return {
        kernel.fn.__name__: str(getattr(kernel, "best_config", None))
        for kernel in (_attention_forward, _attention_backward_keys, _attention_backward_queries)
    }


def padded(dim: int) -> int:
    """The head dimension the kernels compute in: a power of two (``tl.arange``), at least 16 (``tl.dot``);
    the padding is masked out of every load and store."""
    return max(16, triton.next_power_of_2(dim))


class DocumentFlash(torch.autograd.Function):
    """(B, L, H, D) queries, keys, values (BERT's layout) → (B, L, H, D): attention inside each document."""

    @staticmethod
    def forward(ctx, q, k, v, lo, hi, dropout: float, causal: bool, scale: float):
        rows, length, heads, dim = q.shape
        q, k, v = (t.contiguous() for t in (q, k, v))  # one layout, (B, L, H, D), for every tensor
        seed = torch.randint(0, 2**31 - 1, (1,), device=q.device, dtype=torch.int64)
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty(rows * heads, length, device=q.device, dtype=torch.float32)
        _attention_forward[lambda meta: (triton.cdiv(length, meta["BM"]), rows * heads)](
            q, k, v, out, lse, lo, hi, seed, *dropout_threshold(dropout), scale, length, heads, *q.stride()[:3],
            D=padded(dim), DIM=dim, DROPOUT=dropout > 0, CAUSAL=causal,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse, lo, hi, seed)
        ctx.settings = dropout, causal, scale
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, lo, hi, seed = ctx.saved_tensors
        dropout, causal, scale = ctx.settings
        rows, length, heads, dim = q.shape
        grad = grad.contiguous()
        grid = (triton.cdiv(length, BLOCK), rows * heads)
        delta = torch.empty(rows * heads, length, device=q.device, dtype=torch.float32)
        _attention_delta[grid](
            out, grad, delta, length, heads, *q.stride()[:3], BM=BLOCK, D=padded(dim), DIM=dim
        )
        dq, dk, dv = (torch.empty_like(q, memory_format=torch.contiguous_format) for _ in range(3))
        settings = dict(D=padded(dim), DIM=dim, DROPOUT=dropout > 0, CAUSAL=causal)
        common = (*dropout_threshold(dropout), scale, length, heads, *q.stride()[:3])
        keys = _attention_backward_keys[lambda meta: (triton.cdiv(length, meta["BN"]), rows * heads)]
        keys(q, k, v, grad, lse, delta, dk, dv, lo, hi, seed, *common, **settings)
        queries = _attention_backward_queries[lambda meta: (triton.cdiv(length, meta["BM"]), rows * heads)]
        queries(q, k, v, grad, lse, delta, dq, lo, hi, seed, *common, **settings)
        return dq, dk, dv, None, None, None, None, None


def document_flash(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    dropout: float = 0.0,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """(B, L, H, D) → (B, L, H, D), each token attending inside its document (its bounds ``lo``, ``hi``:
    ``document_mask.document_bounds``)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return DocumentFlash.apply(q, k, v, lo, hi, dropout, causal, scale)


def keep_mask(seed: torch.Tensor, rows: int, heads: int, length: int, dropout: float) -> torch.Tensor:
    """(rows, heads, L, L) bool: the pairs the kernels' dropout keeps with ``seed``."""
    out = torch.empty(rows, heads, length, length, device=seed.device, dtype=torch.int8)
    grid = (triton.cdiv(length, BLOCK), triton.cdiv(length, BLOCK), rows * heads)
    _keep_mask[grid](out, seed, dropout_threshold(dropout)[0], length, BM=BLOCK, BN=BLOCK)
    return out.bool()


def transformers_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    document_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature ((B, H, L, D) in, (B, L, H, D) out); the documents'
    bounds come as the keyword ``document_bounds`` that the model's call passes down to its layers."""
    if document_bounds is None or attention_mask is not None:
        raise ValueError(
            f"attention {BLOCKS} takes the rows' document bounds (document_bounds=document_bounds(...)) and "
            "no attention mask: call the model through attngeom.training.model.hidden_states"
        )
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    return document_flash(q, k, v, *document_bounds, dropout, module.is_causal, scaling), None


AttentionInterface.register(BLOCKS, transformers_attention)

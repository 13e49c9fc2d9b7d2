"""Lab 1 (issue 40), kept as the record of what was timed: variants of the block kernels (Philox or hash draws; dK/dV in the key × query frame), timed per kernel against the package's and SDPA's."""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _mix(x):
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    x ^= x >> 16
    return x


@triton.jit
def _hash_kept(key, offs_m, offs_n, length, threshold):
    """[M, N] keep of pairs (query offs_m, key offs_n)."""
    x = (offs_m[:, None] * length + offs_n[None, :]).to(tl.uint32)
    x = _mix(_mix(x) ^ key)
    return (x >> 16) >= threshold


@triton.jit
def _hash_kept_t(key, offs_n, offs_m, length, threshold):
    """[N, M] keep, transposed frame."""
    x = (offs_m[None, :] * length + offs_n[:, None]).to(tl.uint32)
    x = _mix(_mix(x) ^ key)
    return (x >> 16) >= threshold


@triton.jit
def _philox_kept(seed, row_head, offs_m, start, length, threshold, BM: tl.constexpr, BN: tl.constexpr):
    chunks = (length + 7) // 8
    columns = start // 8 + tl.arange(0, BN // 8)
    r0, r1, r2, r3 = tl.randint4x(
        seed + row_head, (offs_m[:, None] * chunks + columns[None, :]).to(tl.uint32)
    )
    pairs = tl.join(
        tl.join(tl.join(r0 & 0xFFFF, r0 >> 16), tl.join(r1 & 0xFFFF, r1 >> 16)),
        tl.join(tl.join(r2 & 0xFFFF, r2 >> 16), tl.join(r3 & 0xFFFF, r3 >> 16)),
    )
    return tl.reshape(pairs, [BM, BN]) >= threshold


@triton.jit
def _key(seed, row_head):
    return _mix(_mix(seed.to(tl.uint32)) ^ (row_head.to(tl.uint32) * 0x9E3779B9))


@triton.jit
def lab_forward(
    Q,
    K,
    V,
    O,
    LSE,
    LO,
    HI,
    SEED,
    threshold,
    keep_scale,
    scale,
    length,
    heads,
    s_b,
    s_l,
    s_h,
    BM: tl.constexpr,
    BN: tl.constexpr,
    D: tl.constexpr,
    DIM: tl.constexpr,
    DROPOUT: tl.constexpr,
    CAUSAL: tl.constexpr,
    RNG: tl.constexpr,
):
    block, row_head = tl.program_id(0), tl.program_id(1)
    row, head = row_head // heads, row_head % heads
    offs_m = block * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    in_d = offs_d < DIM
    inside = offs_m < length
    base = row * s_b + head * s_h
    q = tl.load(
        Q + base + offs_m[:, None] * s_l + offs_d[None, :], mask=inside[:, None] & in_d[None, :], other=0.0
    )
    lo_m = tl.load(LO + row * length + offs_m, mask=inside, other=length)
    hi_m = tl.load(HI + row * length + offs_m, mask=inside, other=0)
    first = tl.min(lo_m, axis=0)
    last = tl.max(hi_m, axis=0)
    if CAUSAL:
        last = tl.minimum(last, block * BM + BM)
    seed = tl.load(SEED)
    key = _key(seed, row_head)
    qk_scale = scale * 1.4426950408889634
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start in range((first // BN) * BN, last, BN):
        offs_n = start + tl.arange(0, BN)
        kv = base + offs_n[:, None] * s_l + offs_d[None, :]
        k = tl.load(K + kv, mask=(offs_n[:, None] < length) & in_d[None, :], other=0.0)
        s = (tl.dot(q, tl.trans(k)) * qk_scale).to(tl.float32)
        attend = (offs_n[None, :] >= lo_m[:, None]) & (offs_n[None, :] < hi_m[:, None])
        if CAUSAL:
            attend = attend & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(attend, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if DROPOUT:
            if RNG == 0:
                kept = _philox_kept(seed, row_head, offs_m, start, length, threshold, BM, BN)
            else:
                kept = _hash_kept(key, offs_m, offs_n, length, threshold)
            p = tl.where(kept, p, 0.0)
        v = tl.load(V + kv, mask=(offs_n[:, None] < length) & in_d[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if DROPOUT:
        out = acc * ((keep_scale / l_safe).to(tl.float32))[:, None]
    else:
        out = acc / l_safe[:, None]
    tl.store(
        O + base + offs_m[:, None] * s_l + offs_d[None, :],
        out.to(O.dtype.element_ty),
        mask=inside[:, None] & in_d[None, :],
    )
    tl.store(LSE + row_head * length + offs_m, m_i + tl.math.log2(l_safe), mask=inside)  # log2 units


@triton.jit
def lab_backward_keys(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    LO,
    HI,
    SEED,
    threshold,
    keep_scale,
    scale,
    length,
    heads,
    s_b,
    s_l,
    s_h,
    BM: tl.constexpr,
    BN: tl.constexpr,
    D: tl.constexpr,
    DIM: tl.constexpr,
    DROPOUT: tl.constexpr,
    CAUSAL: tl.constexpr,
    RNG: tl.constexpr,
):
    """Transposed frame: sT = K Qᵀ (BN × BM)."""
    block, row_head = tl.program_id(0), tl.program_id(1)
    row, head = row_head // heads, row_head % heads
    offs_n = block * BN + tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    in_d = offs_d < DIM
    inside = offs_n < length
    base = row * s_b + head * s_h
    kv = base + offs_n[:, None] * s_l + offs_d[None, :]
    k = tl.load(K + kv, mask=inside[:, None] & in_d[None, :], other=0.0)
    v = tl.load(V + kv, mask=inside[:, None] & in_d[None, :], other=0.0)
    lo_n = tl.load(LO + row * length + offs_n, mask=inside, other=length)
    hi_n = tl.load(HI + row * length + offs_n, mask=inside, other=0)
    first = tl.min(lo_n, axis=0)
    if CAUSAL:
        first = tl.maximum(first, block * BN)
    last = tl.max(hi_n, axis=0)
    seed = tl.load(SEED)
    key = _key(seed, row_head)
    qk_scale = scale * 1.4426950408889634
    ks = keep_scale
    dk = tl.zeros([BN, D], tl.float32)
    dv = tl.zeros([BN, D], tl.float32)
    for start in range((first // BM) * BM, last, BM):
        offs_m = start + tl.arange(0, BM)
        rows_in = offs_m < length
        qT = tl.load(
            Q + base + offs_m[None, :] * s_l + offs_d[:, None],
            mask=rows_in[None, :] & in_d[:, None],
            other=0.0,
        )
        lse = tl.load(LSE + row_head * length + offs_m, mask=rows_in, other=0.0)
        sT = (tl.dot(k, qT) * qk_scale).to(tl.float32)
        attend = (
            offs_n[:, None] >= tl.load(LO + row * length + offs_m, mask=rows_in, other=length)[None, :]
        ) & (offs_n[:, None] < tl.load(HI + row * length + offs_m, mask=rows_in, other=0)[None, :])
        if CAUSAL:
            attend = attend & (offs_n[:, None] <= offs_m[None, :])
        pT = tl.where(attend, tl.math.exp2(sT - lse[None, :]), 0.0)
        do = tl.load(
            DO + base + offs_m[:, None] * s_l + offs_d[None, :],
            mask=rows_in[:, None] & in_d[None, :],
            other=0.0,
        )
        dpT = tl.dot(v, tl.trans(do))
        if DROPOUT:
            if RNG == 0:
                keptT = tl.trans(_philox_kept(seed, row_head, offs_m, block * BN, length, threshold, BM, BN))
            else:
                keptT = _hash_kept_t(key, offs_n, offs_m, length, threshold)
            dv += tl.dot(tl.where(keptT, (pT * ks).to(tl.float32), 0.0).to(do.dtype), do)
            dpT = tl.where(keptT, (dpT * ks).to(tl.float32), 0.0)
        else:
            dv += tl.dot(pT.to(do.dtype), do)
        delta = tl.load(DELTA + row_head * length + offs_m, mask=rows_in, other=0.0)
        dsT = pT * (dpT - delta[None, :])
        dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT))
    tl.store(DK + kv, (dk * scale).to(DK.dtype.element_ty), mask=inside[:, None] & in_d[None, :])
    tl.store(DV + kv, dv.to(DV.dtype.element_ty), mask=inside[:, None] & in_d[None, :])


@triton.jit
def lab_backward_queries(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    LO,
    HI,
    SEED,
    threshold,
    keep_scale,
    scale,
    length,
    heads,
    s_b,
    s_l,
    s_h,
    BM: tl.constexpr,
    BN: tl.constexpr,
    D: tl.constexpr,
    DIM: tl.constexpr,
    DROPOUT: tl.constexpr,
    CAUSAL: tl.constexpr,
    RNG: tl.constexpr,
):
    block, row_head = tl.program_id(0), tl.program_id(1)
    row, head = row_head // heads, row_head % heads
    offs_m = block * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    in_d = offs_d < DIM
    inside = offs_m < length
    base = row * s_b + head * s_h
    q = tl.load(
        Q + base + offs_m[:, None] * s_l + offs_d[None, :], mask=inside[:, None] & in_d[None, :], other=0.0
    )
    do = tl.load(
        DO + base + offs_m[:, None] * s_l + offs_d[None, :], mask=inside[:, None] & in_d[None, :], other=0.0
    )
    lse = tl.load(LSE + row_head * length + offs_m, mask=inside, other=0.0)
    delta = tl.load(DELTA + row_head * length + offs_m, mask=inside, other=0.0)
    lo_m = tl.load(LO + row * length + offs_m, mask=inside, other=length)
    hi_m = tl.load(HI + row * length + offs_m, mask=inside, other=0)
    first = tl.min(lo_m, axis=0)
    last = tl.max(hi_m, axis=0)
    if CAUSAL:
        last = tl.minimum(last, block * BM + BM)
    seed = tl.load(SEED)
    key = _key(seed, row_head)
    qk_scale = scale * 1.4426950408889634
    ks = keep_scale
    dq = tl.zeros([BM, D], tl.float32)
    for start in range((first // BN) * BN, last, BN):
        offs_n = start + tl.arange(0, BN)
        kv = base + offs_n[:, None] * s_l + offs_d[None, :]
        k = tl.load(K + kv, mask=(offs_n[:, None] < length) & in_d[None, :], other=0.0)
        s = (tl.dot(q, tl.trans(k)) * qk_scale).to(tl.float32)
        attend = (offs_n[None, :] >= lo_m[:, None]) & (offs_n[None, :] < hi_m[:, None])
        if CAUSAL:
            attend = attend & (offs_n[None, :] <= offs_m[:, None])
        p = tl.where(attend, tl.math.exp2(s - lse[:, None]), 0.0)
        v = tl.load(V + kv, mask=(offs_n[:, None] < length) & in_d[None, :], other=0.0)
        dp = tl.dot(do, tl.trans(v))
        if DROPOUT:
            if RNG == 0:
                kept = _philox_kept(seed, row_head, offs_m, start, length, threshold, BM, BN)
            else:
                kept = _hash_kept(key, offs_m, offs_n, length, threshold)
            dp = tl.where(kept, (dp * ks).to(tl.float32), 0.0)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(
        DQ + base + offs_m[:, None] * s_l + offs_d[None, :],
        (dq * scale).to(DQ.dtype.element_ty),
        mask=inside[:, None] & in_d[None, :],
    )


@triton.jit
def lab_keep(OUT, SEED, threshold, length, heads, BM: tl.constexpr, BN: tl.constexpr, RNG: tl.constexpr):
    block_m, block_n, row_head = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = block_m * BM + tl.arange(0, BM)
    offs_n = block_n * BN + tl.arange(0, BN)
    seed = tl.load(SEED)
    if RNG == 0:
        keep = _philox_kept(seed, row_head, offs_m, block_n * BN, length, threshold, BM, BN)
    else:
        keep = _hash_kept(_key(seed, row_head), offs_m, offs_n, length, threshold)
    where = OUT + row_head * length * length + offs_m[:, None] * length + offs_n[None, :]
    tl.store(where, keep.to(tl.int8), mask=(offs_m[:, None] < length) & (offs_n[None, :] < length))


@triton.jit
def lab_delta(
    O, DO, DELTA, length, heads, s_b, s_l, s_h, BM: tl.constexpr, D: tl.constexpr, DIM: tl.constexpr
):
    block, row_head = tl.program_id(0), tl.program_id(1)
    offs_m = block * BM + tl.arange(0, BM)
    inside = offs_m < length
    offs_d = tl.arange(0, D)
    in_d = offs_d < DIM
    where = (row_head // heads) * s_b + (row_head % heads) * s_h + offs_m[:, None] * s_l + offs_d[None, :]
    o = tl.load(O + where, mask=inside[:, None] & in_d[None, :], other=0.0).to(tl.float32)
    do = tl.load(DO + where, mask=inside[:, None] & in_d[None, :], other=0.0).to(tl.float32)
    tl.store(DELTA + row_head * length + offs_m, tl.sum(o * do, axis=1), mask=inside)


def thresholds(p):
    t = round(p * 65536)
    return t, 1 / (1 - t / 65536)


class Lab:
    def __init__(self, fwd=(64, 64, 4, 2), keys=(64, 64, 4, 2), queries=(64, 64, 4, 2), rng=1):
        self.fwd, self.keysc, self.queriesc, self.rng = fwd, keys, queries, rng

    def forward(self, q, k, v, lo, hi, p, causal, seed):
        rows, length, heads, dim = q.shape
        out = torch.empty_like(q)
        lse = torch.empty(rows * heads, length, device=q.device, dtype=torch.float32)
        bm, bn, w, st = self.fwd
        lab_forward[(triton.cdiv(length, bm), rows * heads)](
            q,
            k,
            v,
            out,
            lse,
            lo,
            hi,
            seed,
            *thresholds(p),
            dim**-0.5,
            length,
            heads,
            *q.stride()[:3],
            BM=bm,
            BN=bn,
            D=max(16, triton.next_power_of_2(dim)),
            DIM=dim,
            DROPOUT=p > 0,
            CAUSAL=causal,
            RNG=self.rng,
            num_warps=w,
            num_stages=st,
        )
        return out, lse

    def delta(self, out, grad):
        rows, length, heads, dim = out.shape
        delta = torch.empty(rows * heads, length, device=out.device, dtype=torch.float32)
        lab_delta[(triton.cdiv(length, 64), rows * heads)](
            out,
            grad,
            delta,
            length,
            heads,
            *out.stride()[:3],
            BM=64,
            D=max(16, triton.next_power_of_2(dim)),
            DIM=dim,
        )
        return delta

    def backward_keys(self, q, k, v, grad, lse, delta, lo, hi, p, causal, seed):
        rows, length, heads, dim = q.shape
        dk, dv = torch.empty_like(q), torch.empty_like(q)
        bm, bn, w, st = self.keysc
        lab_backward_keys[(triton.cdiv(length, bn), rows * heads)](
            q,
            k,
            v,
            grad,
            lse,
            delta,
            dk,
            dv,
            lo,
            hi,
            seed,
            *thresholds(p),
            dim**-0.5,
            length,
            heads,
            *q.stride()[:3],
            BM=bm,
            BN=bn,
            D=max(16, triton.next_power_of_2(dim)),
            DIM=dim,
            DROPOUT=p > 0,
            CAUSAL=causal,
            RNG=self.rng,
            num_warps=w,
            num_stages=st,
        )
        return dk, dv

    def backward_queries(self, q, k, v, grad, lse, delta, lo, hi, p, causal, seed):
        rows, length, heads, dim = q.shape
        dq = torch.empty_like(q)
        bm, bn, w, st = self.queriesc
        lab_backward_queries[(triton.cdiv(length, bm), rows * heads)](
            q,
            k,
            v,
            grad,
            lse,
            delta,
            dq,
            lo,
            hi,
            seed,
            *thresholds(p),
            dim**-0.5,
            length,
            heads,
            *q.stride()[:3],
            BM=bm,
            BN=bn,
            D=max(16, triton.next_power_of_2(dim)),
            DIM=dim,
            DROPOUT=p > 0,
            CAUSAL=causal,
            RNG=self.rng,
            num_warps=w,
            num_stages=st,
        )
        return dq

    def keep(self, seed, rows, heads, length, p):
        out = torch.empty(rows, heads, length, length, device=seed.device, dtype=torch.int8)
        lab_keep[(triton.cdiv(length, 64), triton.cdiv(length, 64), rows * heads)](
            out, seed, thresholds(p)[0], length, heads, BM=64, BN=64, RNG=self.rng
        )
        return out.bool()

    def all(self, q, k, v, grad, lo, hi, p, causal, seed):
        out, lse = self.forward(q, k, v, lo, hi, p, causal, seed)
        delta = self.delta(out, grad)
        dk, dv = self.backward_keys(q, k, v, grad, lse, delta, lo, hi, p, causal, seed)
        dq = self.backward_queries(q, k, v, grad, lse, delta, lo, hi, p, causal, seed)
        return out, dq, dk, dv

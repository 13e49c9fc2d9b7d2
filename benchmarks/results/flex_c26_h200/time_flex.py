"""Forward + backward time of attention over packed SOTU documents (512-token rows, bf16, dropout 0.1):
SDPA with the dense boolean document mask against 2899f33's FlexAttention path (doubled keys for exact
dropout, block mask), CUDA events, median of 30 after 5. Run from a 2899f33 checkout, PYTHONPATH=src."""

import json
import random
import sys

import torch
import torch.nn.functional as F

from attngeom.training.document_attention import document_block_mask, document_flex_attention

ROW, DOCUMENTS, DIM, P = 512, 256, 64, 0.1


def packed(seed=0):
    counts = json.load(open("sotu_paragraph_lengths.json"))
    drawn = random.Random(seed).choices([int(n) for n in counts], weights=list(counts.values()), k=DOCUMENTS)
    free, rows = [], []
    for size in (min(n + 2, ROW) for n in drawn):
        row = next((i for i, room in enumerate(free) if room >= size), None)
        if row is None:
            free.append(ROW)
            rows.append([])
            row = len(rows) - 1
        free[row] -= size
        rows[row].append(size)
    out = torch.empty(len(rows), ROW, dtype=torch.int32)
    for r, sizes in enumerate(rows):
        out[r] = torch.repeat_interleave(
            torch.tensor([*range(len(sizes)), -1]), torch.tensor([*sizes, free[r]])
        )
    return out


def timed(fn, warmup=5, repeats=30):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def measure(documents, mask, heads):
    """Both kernels at ``heads`` heads of 64: (name, median ms) each, and the block mask's sparsity."""
    rows = documents.shape[0]
    shape = (rows, heads, ROW, DIM)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(rows, ROW, heads, DIM, device="cuda", dtype=torch.bfloat16)
    block = document_block_mask(documents, False, True)

    def dense():
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=P).transpose(1, 2)
        o.backward(grad)

    def flex():
        o, _ = document_flex_attention(torch.nn.Module(), q, k, v, block, dropout=P)
        o.backward(grad)

    return [("dense", timed(dense)), ("flex", timed(flex))], block.sparsity()


def main():
    documents = packed().cuda()
    rows = documents.shape[0]
    mask = documents[:, None, :, None] == documents[:, None, None, :]
    kept = float(mask.float().mean())
    out = []
    for heads in (4, 12):
        times, sparsity = measure(documents, mask, heads)
        for name, ms in times:
            out.append({"heads": heads, "kernel": name, "fwd_bwd_ms": ms, "rows": rows, "pairs_kept": kept})
            print(json.dumps(out[-1]), flush=True)
        print("block mask sparsity (doubled keys):", sparsity, flush=True)
    with open(sys.argv[1], "w") as file:
        json.dump(out, file, indent=1)


if __name__ == "__main__":
    main()

"""What the card's kernels reach on their own: the yardsticks for a training update's profile.

``profile_training.py`` gives each category's device time and, for matrix products and attention, its rate
from the update's shapes. This script measures, on the same card, what each kind of kernel reaches alone at
the shapes BERT trains with (``--layers 12``: BERT-base, 4: BERT-mini; rows of 512 as the paper's update
packs them):

- **matrix products**: the update's own products (the q/k/v/output projection, both FFN products, forward
  and both gradients' shapes) and one large square product, bf16 (TFLOP/s);
- **attention**: SDPA forward + backward over the rows with no mask and no dropout (the kernel's own best),
  with dropout 0.1, and with the dense document mask and dropout as training runs it; the rate counts
  14 d_h flops a query × key pair (4 forward, 10 backward: ``profile_training.update_flops``);
- **memory**: a copy of 1 GiB (bytes read + written per second), the bound of elementwise kernels.

CUDA events, median of 20 after 5. Usage (a CUDA GPU)::

    python benchmarks/kernel_ceilings.py [--layers 12] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from document_attention import DROPOUT, HEAD_DIM, ROW, packed_documents, timed

from attngeom.training.document_mask import document_attention_mask

PRESETS = {4: (256, 4), 12: (768, 12)}
"""Layers → (hidden size, heads) of the paper's presets (intermediate 4 × hidden)."""


def matrix_products(hidden: int, tokens: int) -> dict[str, float]:
    """TFLOP/s of bf16 products of the update's shapes (x Wᵀ forward, and the gradients' two products)."""
    out = {}
    for name, (n, d_in, d_out) in {
        "qkv/output projection": (tokens, hidden, hidden),
        "FFN up": (tokens, hidden, 4 * hidden),
        "FFN down": (tokens, 4 * hidden, hidden),
        "square 8192": (8192, 8192, 8192),
    }.items():
        x = torch.randn(n, d_in, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(d_out, d_in, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(n, d_out, device="cuda", dtype=torch.bfloat16)
        products: list[Callable[[], torch.Tensor]] = [
            lambda x=x, w=w: F.linear(x, w),
            lambda g=g, w=w: g @ w,  # the input's gradient
            lambda g=g, x=x: g.T @ x,  # the weight's gradient
        ]
        ms = sum(timed(p, warmup=5, repeats=20) for p in products)
        out[name] = 3 * 2 * n * d_in * d_out / (ms * 1e9)
    return out


def attention(heads: int) -> dict[str, dict[str, float]]:
    """Forward + backward ms and TFLOP/s (over every pair computed) of SDPA over the paper update's rows."""
    documents = packed_documents()[0].cuda()
    rows = len(documents)
    mask = document_attention_mask(documents, causal=False)
    kept = float((documents[:, :, None] == documents[:, None, :]).float().mean())
    q, k, v = (
        torch.randn(rows, ROW, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        .transpose(1, 2)
        .requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(rows, heads, ROW, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    flops = 14 * HEAD_DIM * heads * rows * ROW * ROW
    out = {}
    for name, (attn_mask, dropout) in {
        "no mask, no dropout": (None, 0.0),
        "no mask, dropout": (None, DROPOUT),
        "document mask, no dropout": (mask, 0.0),
        "document mask, dropout (training)": (mask, DROPOUT),
    }.items():

        def both(attn_mask=attn_mask, dropout=dropout):
            result = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)
            torch.autograd.grad(result, (q, k, v), grad)

        ms = timed(both, warmup=5, repeats=20)
        out[name] = {"ms": ms, "tflops": flops / (ms * 1e9), "kept_pairs": kept}
    return out


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB device-to-device copy, bytes read plus bytes written."""
    source = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    ms = timed(lambda: target.copy_(source), warmup=5, repeats=20)
    return 2 * 2**30 / (ms * 1e6)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--layers", type=int, choices=sorted(PRESETS), default=12, help="12: BERT-base, 4: BERT-mini"
    )
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("kernel_ceilings.py: needs a CUDA GPU (it times the card's own kernels)")
    hidden, heads = PRESETS[args.layers]
    rows = len(packed_documents()[0])
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "hidden": hidden,
        "heads": heads,
        "rows": rows,
        "matrix_products_tflops": matrix_products(hidden, rows * ROW),
        "attention": attention(heads),
        "copy_gbps": copy_bandwidth(),
    }
    print(
        f"{result['device']}, torch {result['torch']}, hidden {hidden}, {heads} heads, {rows} rows of {ROW}"
    )
    print("matrix products, bf16, forward + both gradients:")
    for name, tflops in result["matrix_products_tflops"].items():
        print(f"  {name:<34} {tflops:7.1f} TFLOP/s")
    print("attention, forward + backward (rate over every pair computed):")
    for name, figures in result["attention"].items():
        print(f"  {name:<34} {figures['ms']:7.3f} ms  {figures['tflops']:7.1f} TFLOP/s")
    print(f"memory: 1 GiB copy {result['copy_gbps']:,.0f} GB/s (read + written)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()

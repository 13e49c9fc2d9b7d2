"""Attention over packed documents, forward and backward, by kernel: what ``training.attention`` chooses from.

The rows are those of ``config/paper.yaml``'s defaults: documents with the State of the Union paragraphs'
token lengths (``sotu_paragraph_lengths.json``) packed first-fit into 512-token rows, bf16, attention
dropout 0.1, BERT-mini's (4 × 64) or BERT-base's (12 × 64) heads. Kernels:

- ``dense``: SDPA with the dense boolean document mask (what ``attention: dense`` runs; cuDNN on an H100);
- ``flash-varlen``: the flash kernel's variable-length form (``attention: varlen``);
- ``cudnn-varlen``: cuDNN's ragged form, given the same document starts.

Each is checked against ``dense`` without dropout before it is timed (CUDA events, median of 50 after
10). Usage (a CUDA GPU)::

    python benchmarks/document_attention.py [--heads 4 12] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from attngeom.training.document_attention import document_attention
from attngeom.training.document_mask import document_attention_mask, document_segments

LENGTHS = Path(__file__).with_name("sotu_paragraph_lengths.json")
ROW, DOCUMENTS, HEAD_DIM, DROPOUT = 512, 256, 64, 0.1


def packed_documents(seed: int = 0) -> torch.Tensor:
    """(rows, 512) document index of every place: 256 paragraph lengths (+2 for [CLS]/[SEP], cut to 512)
    packed first-fit, each row's rest one padding document (-1)."""
    counts = json.loads(LENGTHS.read_text())  # token length → paragraphs of that length
    drawn = random.Random(seed).choices([int(n) for n in counts], weights=list(counts.values()), k=DOCUMENTS)
    free: list[int] = []
    rows: list[list[int]] = []
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
        ids = torch.tensor([*range(len(sizes)), -1])  # -1: the row's padding
        out[r] = torch.repeat_interleave(ids, torch.tensor([*sizes, free[r]]))
    return out


def cudnn_varlen(q, k, v, segments, dropout):
    rows, heads, length, dim = q.shape

    def flat(t):
        return t.transpose(1, 2).reshape(rows * length, heads, dim)

    out = torch.ops.aten._cudnn_attention_forward(
        flat(q), flat(k), flat(v), None, segments, segments, length, length, True, dropout, False, False
    )[0]
    return out.view(rows, length, heads, dim)


def kernels(documents: torch.Tensor) -> dict[str, Callable]:
    mask = document_attention_mask(documents, causal=False)
    segments = document_segments(documents.cpu()).cuda()
    return {
        "dense": lambda q, k, v, p: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=p
        ).transpose(1, 2),
        "flash-varlen": lambda q, k, v, p: document_attention(q, k, v, segments, p, False),
        "cudnn-varlen": lambda q, k, v, p: cudnn_varlen(q, k, v, segments, p),
    }


def timed(function: Callable[[], None], warmup: int = 10, repeats: int = 50) -> float:
    """Median milliseconds of ``function`` on the GPU."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def measure(heads: int) -> dict:
    documents = packed_documents().cuda()
    rows = len(documents)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(
            rows, heads, ROW, HEAD_DIM, device="cuda", generator=gen, dtype=torch.bfloat16
        ).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(rows, ROW, heads, HEAD_DIM, device="cuda", generator=gen, dtype=torch.bfloat16)
    found = kernels(documents)
    reference = found["dense"](q, k, v, 0.0)
    same = documents[:, None, :, None] == documents[:, None, None, :]
    result = {"heads": heads, "rows": rows, "pairs_kept": float(same.float().mean()), "kernels": {}}
    for name, kernel in found.items():
        try:
            error = float((kernel(q, k, v, 0.0) - reference).abs().max())

            def forward(kernel=kernel):
                return kernel(q, k, v, DROPOUT)

            def both(kernel=kernel):
                torch.autograd.grad(kernel(q, k, v, DROPOUT), (q, k, v), grad)

            with torch.no_grad():
                fwd = timed(forward)
            result["kernels"][name] = {
                "max_abs_error": error,
                "forward_ms": fwd,
                "forward_backward_ms": timed(both),
            }
        except RuntimeError as err:
            result["kernels"][name] = {"error": str(err).splitlines()[0][:200]}
    return result


def main(argv: Sequence[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[4, 12], help="4: BERT-mini, 12: BERT-base")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("document_attention.py: needs a CUDA GPU (the kernels compared are CUDA kernels)")
    results = [measure(h) for h in args.heads]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, dropout {DROPOUT}, bf16")
    for r in results:
        print(
            f"\n{r['heads']} heads of {HEAD_DIM}, {r['rows']} rows of {ROW}, {r['pairs_kept']:.1%} of pairs kept"
        )
        for name, k in r["kernels"].items():
            if "error" in k:
                print(f"  {name:<14} failed: {k['error']}")
            else:
                print(
                    f"  {name:<14} forward {k['forward_ms']:7.3f} ms   forward+backward "
                    f"{k['forward_backward_ms']:7.3f} ms   max |Δ| vs dense {k['max_abs_error']:.2e}"
                )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()

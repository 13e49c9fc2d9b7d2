"""Attention over packed documents, forward and backward, by kernel: what ``training.attention`` chooses from.

The rows are those of ``config/paper.yaml``'s defaults: documents with the State of the Union paragraphs'
token lengths (``sotu_paragraph_lengths.json``) packed into 512-token rows as training packs them (first-fit
decreasing), bf16, attention dropout 0.1, BERT-mini's (4 × 64) or BERT-base's (12 × 64) heads. Kernels:

- ``dense``: SDPA with the dense boolean document mask (what ``attention: dense`` runs; cuDNN on an H100);
- ``flash-varlen``: the flash kernel's variable-length form (``attention: varlen``);
- ``cudnn-varlen``: cuDNN's ragged form, given the same document starts;
- ``slots``: a candidate layout (issue 40), the same documents in slots of their size class: each document
  over 256 tokens in a 512-token row, the room left there filled with shorter ones, then documents of
  129–256 tokens in 256-token slots (two a row), the rest in 128-token slots (four a row), every class one
  dense masked SDPA call over its slots, the rows viewed as slots without a copy;
- ``dense-no-dropout``: ``dense`` at dropout 0, what attention dropout costs;
- ``triton-blocks``: the Triton kernels of ``attention: blocks`` (``document_blocks.py``), which visit only
  the key blocks each query block's documents reach, dropout inside.

Each is checked against ``dense`` without dropout (output and gradients) before it is timed (CUDA events, median of 50 after
10); ``slots`` token by token, its rows being others. One forward + backward of each runs under the
profiler: its kernels' device time, to tell the attention kernels from the layout's copies. Usage (a CUDA GPU)::

    python benchmarks/document_attention.py [--heads 4 12] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from attngeom.training.document_attention import document_attention
from attngeom.training.document_batches import pack_first_fit
from attngeom.training.document_mask import document_attention_mask, document_bounds, document_segments

LENGTHS = Path(__file__).with_name("sotu_paragraph_lengths.json")
ROW, DOCUMENTS, HEAD_DIM, DROPOUT = 512, 256, 64, 0.1


def document_sizes(seed: int = 0) -> list[int]:
    """256 paragraph lengths drawn from the corpus' (+2 for [CLS]/[SEP], cut to 512)."""
    counts = json.loads(LENGTHS.read_text())  # token length → paragraphs of that length
    drawn = random.Random(seed).choices([int(n) for n in counts], weights=list(counts.values()), k=DOCUMENTS)
    return [min(n + 2, ROW) for n in drawn]


def first_fit(
    sizes: Sequence[int], members: Sequence[int], capacity: int, bins: list[list[int]], grow: bool = True
) -> list[int]:
    """Each of ``members`` (indices of ``sizes``) into the first of ``bins`` (of ``capacity``) with room,
    a new bin if none has (``grow``); the members left out."""
    free = [capacity - sum(sizes[i] for i in b) for b in bins]
    left = []
    for index in members:
        place = next((b for b, room in enumerate(free) if room >= sizes[index]), None)
        if place is None and grow:
            bins.append([])
            free.append(capacity)
            place = len(bins) - 1
        if place is None:
            left.append(index)
            continue
        bins[place].append(index)
        free[place] -= sizes[index]
    return left


def document_rows(
    sizes: Sequence[int], bins: list[list[int]], width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(bins, width) document index of every place, each bin's rest a padding document of its own
    (-1 − bin), and where each document's first token is in the flattened rows."""
    out = torch.empty(len(bins), width, dtype=torch.int64)
    starts = torch.empty(len(sizes), dtype=torch.int64)
    for b, members in enumerate(bins):
        lengths = [sizes[i] for i in members]
        out[b] = torch.repeat_interleave(
            torch.tensor([*members, -1 - b]), torch.tensor([*lengths, width - sum(lengths)])
        )
        if members:
            starts[members] = b * width + torch.tensor([0, *lengths[:-1]]).cumsum(0)
    return out, starts


def packed_documents(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows ``dense`` attends over: the documents packed as training packs them (first-fit decreasing,
    ``document_batches.pack_first_fit``) into 512-token rows, and each document's start in them."""
    sizes = document_sizes(seed)
    return document_rows(sizes, pack_first_fit(np.array(sizes), ROW), ROW)


def block_pairs(documents: torch.Tensor, query_block: int, key_block: int) -> torch.Tensor:
    """(R,) query × key pairs the block kernels compute in each row of ``documents`` ((R, L) document of
    every place): each block of ``query_block`` queries with every key block from its first query's document
    start to its last query's document end (``document_blocks``' loop). The same count holds for dK/dV's
    frame with the roles swapped, the mask being symmetric."""
    lo, hi = (b.long() for b in document_bounds(documents))
    rows = len(documents)
    first = lo.view(rows, -1, query_block).amin(2) // key_block * key_block
    last = hi.view(rows, -1, query_block).amax(2)
    return (query_block * ((last - first + key_block - 1) // key_block * key_block)).sum(1)


def best_row_orders(documents: torch.Tensor, query_block: int, key_block: int, tries: int = 5040) -> int:
    """The fewest ``block_pairs`` over orders of each row's documents (its padding left at the end): every
    order of a row of at most 7 documents, ``tries`` random ones of a longer row. An order changes nothing
    a document computes (positions count from its own start), only where it lies."""
    total, draw = 0, random.Random(0)
    for row in documents:
        ids, counts = (t.tolist() for t in torch.unique_consecutive(row, return_counts=True))
        members = [(i, n) for i, n in zip(ids, counts, strict=True) if i >= 0]
        pad = [(i, n) for i, n in zip(ids, counts, strict=True) if i < 0]
        if len(members) <= 7:
            orders = list(itertools.permutations(members))
        else:
            orders = [draw.sample(members, len(members)) for _ in range(tries)]
        laid = torch.stack(
            [torch.tensor([i for i, n in (*order, *pad) for _ in range(n)]) for order in orders]
        )
        total += int(block_pairs(laid, query_block, key_block).min())
    return total


TUNED_BLOCKS = (64, 32)
"""(queries, keys) of a block in the forward and dQ kernels, (keys, queries) in dK/dV: what the autotuner
chose on an H200 for BERT-base's 12 heads (for BERT-mini's 4 it chose 64 × 64 for the forward and dQ;
``results/document_blocks_h200/`` call 23)."""


def kept_pairs(documents: torch.Tensor) -> int:
    """Query × key pairs the document mask keeps in rows of ``documents``, padding's own pairs left out."""
    return int(((documents[:, :, None] == documents[:, None, :]) & (documents >= 0)[:, :, None]).sum())


def block_layout(seed: int = 0) -> dict[str, float]:
    """The pairs the block kernels compute per pair kept (``kept_pairs``), as the rows are packed and in
    each row's best order of its documents."""
    documents = packed_documents(seed)[0]
    kept = kept_pairs(documents)
    return {
        "computed_per_kept": int(block_pairs(documents, *TUNED_BLOCKS).sum()) / kept,
        "best_order_per_kept": best_row_orders(documents, *TUNED_BLOCKS) / kept,
    }


SLOT_CLASSES = (512, 256, 128)


def slot_bins(sizes: Sequence[int]) -> list[list[list[int]]]:
    """The documents (indices of ``sizes``) in slots of each of ``SLOT_CLASSES``, largest first: those too
    long for the next class each start or fill a slot of this one (longest first), then the shorter ones
    fill the room those slots left."""
    left = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    classes = []
    for width, smaller in zip(SLOT_CLASSES, (*SLOT_CLASSES[1:], 0), strict=True):
        bins: list[list[int]] = []
        first_fit(sizes, [i for i in left if sizes[i] > smaller], width, bins)
        left = first_fit(sizes, [i for i in left if sizes[i] <= smaller], width, bins, grow=False)
        classes.append(bins)
    return classes


def slotted_documents(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The same documents as ``packed_documents``, in rows of 512 made of slots (``slot_bins``): the
    classes' rows one after another, a row of class w holding 512 / w slots (a class's last row filled
    with empty slots); each document's start; how many rows each class takes."""
    sizes = document_sizes(seed)
    rows, starts, counts, offset = [], torch.empty(len(sizes), dtype=torch.int64), [], 0
    for width, bins in zip(SLOT_CLASSES, slot_bins(sizes), strict=True):
        per_row = ROW // width
        bins = bins + [[] for _ in range(-len(bins) % per_row)]
        ids, own = document_rows(sizes, bins, width)
        ids[ids < 0] -= offset  # padding documents stay distinct across classes
        placed = [i for b in bins for i in b]
        starts[placed] = own[placed] + offset
        rows.append(ids.reshape(-1, ROW))
        counts.append(len(bins) // per_row)
        offset += len(bins) * width
    return torch.cat(rows), starts, counts


def slot_attention(q, k, v, masks, counts, dropout):
    """Attention over rows of slots (``slotted_documents``): (R, H, 512, D) as BERT lays them out ((R, 512,
    H, D) in memory), split into the classes' rows (a split, whose gradient is one concatenation), each
    viewed as its slots, one masked SDPA call a class → (R, 512, H, D)."""
    heads, dim = q.shape[1], q.shape[-1]
    parts = (t.transpose(1, 2).split(counts) for t in (q, k, v))
    outputs = []
    for width, mask, *qkv in zip(SLOT_CLASSES, masks, *parts, strict=True):
        slots = (t.reshape(-1, width, heads, dim).transpose(1, 2) for t in qkv)
        out = F.scaled_dot_product_attention(*slots, attn_mask=mask, dropout_p=dropout)
        outputs.append(out.transpose(1, 2).reshape(-1, ROW, heads, dim))
    return torch.cat(outputs)


def cudnn_varlen(q, k, v, segments, dropout):
    rows, heads, length, dim = q.shape

    def flat(t):
        return t.transpose(1, 2).reshape(rows * length, heads, dim)

    out = torch.ops.aten._cudnn_attention_forward(
        flat(q), flat(k), flat(v), None, segments, segments, length, length, True, dropout, False, False
    )[0]
    return out.view(rows, length, heads, dim)


@dataclass(frozen=True)
class Layout:
    """Rows of documents (``documents``: (R, 512) document of every place), where each document starts in
    them, and the attention kernels that take rows so laid out."""

    documents: torch.Tensor
    starts: torch.Tensor
    kernels: dict[str, Callable]
    pairs: int  # query × key pairs a kernel over whole slots computes

    def places(self, sizes: Sequence[int]) -> torch.Tensor:
        """The flat place of every token, document after document."""
        return torch.cat(
            [start + torch.arange(size) for start, size in zip(self.starts.tolist(), sizes, strict=True)]
        )


def dense_layout(seed: int) -> Layout:
    documents, starts = packed_documents(seed)
    documents, starts = documents.cuda(), starts.cuda()
    mask = document_attention_mask(documents, causal=False)
    segments = document_segments(documents.cpu()).cuda()

    def dense(q, k, v, p):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p).transpose(1, 2)

    from attngeom.training.document_blocks import document_flash  # Triton: CUDA builds of torch

    lo, hi = document_bounds(documents)

    def blocks(q, k, v, p):
        return document_flash(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), lo, hi, p)

    kernels = {
        "dense": dense,
        "dense-no-dropout": lambda q, k, v, p: dense(q, k, v, 0.0),
        "flash-varlen": lambda q, k, v, p: document_attention(q, k, v, segments, p, False),
        "cudnn-varlen": lambda q, k, v, p: cudnn_varlen(q, k, v, segments, p),
        "triton-blocks": blocks,
    }
    return Layout(documents, starts, kernels, len(documents) * ROW * ROW)


def slot_masks(documents: torch.Tensor, counts: Sequence[int]) -> Iterator[torch.Tensor]:
    """Each class's document mask over its slots (rows of ``slotted_documents``)."""
    row = 0
    for width, count in zip(SLOT_CLASSES, counts, strict=True):
        yield document_attention_mask(documents[row : row + count].reshape(-1, width), causal=False)
        row += count


def slot_layout(seed: int) -> Layout:
    documents, starts, counts = slotted_documents(seed)
    documents, starts = documents.cuda(), starts.cuda()
    masks = list(slot_masks(documents, counts))
    pairs = sum(count * ROW * width for width, count in zip(SLOT_CLASSES, counts, strict=True))
    kernels = {"slots": lambda q, k, v, p: slot_attention(q, k, v, masks, counts, p)}
    return Layout(documents, starts, kernels, pairs)


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


def measure(heads: int, seed: int = 0) -> dict:
    """Every kernel over the same documents, each in its layout's rows: checked token by token against
    ``dense`` at dropout 0, then timed at ``DROPOUT``."""
    sizes = document_sizes(seed)
    gen = torch.Generator(device="cuda").manual_seed(0)
    tokens = sum(sizes)
    q_tokens, k_tokens, v_tokens, grad_tokens = (
        torch.randn(tokens, heads, HEAD_DIM, device="cuda", generator=gen, dtype=torch.bfloat16)
        for _ in range(4)
    )
    dense = dense_layout(seed)
    result = {
        "heads": heads,
        "documents": len(sizes),
        "tokens": tokens,
        "pairs_kept": kept_pairs(dense.documents),
        "kernels": {},
    }
    reference = None
    for layout in (dense, slot_layout(seed)):
        places = layout.places(sizes).cuda()
        rows = len(layout.documents)

        def in_rows(values: torch.Tensor, places=places, rows=rows) -> torch.Tensor:
            """(R, 512, H, D): each token's values at its place in this layout's rows, zeros elsewhere."""
            out = torch.zeros(rows * ROW, heads, HEAD_DIM, device="cuda", dtype=values.dtype)
            out[places] = values
            return out.view(rows, ROW, heads, HEAD_DIM)

        q, k, v = (in_rows(t).transpose(1, 2).requires_grad_() for t in (q_tokens, k_tokens, v_tokens))
        grad = in_rows(grad_tokens)  # the same gradient of each token's output in every layout
        for name, kernel in layout.kernels.items():
            try:
                out = kernel(q, k, v, 0.0)
                grads = torch.autograd.grad(out, (q, k, v), grad)
                got = [
                    t.reshape(rows * ROW, heads, HEAD_DIM)[places]
                    for t in (out, *(g.transpose(1, 2) for g in grads))
                ]
                reference = got if reference is None else reference
                error = float((got[0] - reference[0]).abs().max())
                grad_error = max(
                    float((a - b).abs().max()) for a, b in zip(got[1:], reference[1:], strict=True)
                )

                def forward(kernel=kernel, q=q, k=k, v=v):
                    return kernel(q, k, v, DROPOUT)

                def both(kernel=kernel, q=q, k=k, v=v, grad=grad):
                    torch.autograd.grad(kernel(q, k, v, DROPOUT), (q, k, v), grad)

                with torch.no_grad():
                    fwd = timed(forward)
                both()  # its backward's first call (an autotuner's search) outside the profile
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    both()
                    torch.cuda.synchronize()
                launched = prof.key_averages()
                result["kernels"][name] = {
                    "cuda_kernels_ms": {
                        e.key[:100]: e.device_time_total / 1e3 for e in launched if e.device_time_total > 0
                    },
                    "rows": rows,
                    "pairs_computed": layout.pairs,
                    "max_abs_error": error,
                    "max_abs_grad_error": grad_error,
                    "forward_ms": fwd,
                    "forward_backward_ms": timed(both),
                }
            except RuntimeError as err:
                result["kernels"][name] = {"error": str(err).splitlines()[0][:200]}
    if "triton-blocks" in result["kernels"]:
        from attngeom.training.document_blocks import tuned

        result["kernels"]["triton-blocks"]["tuned"] = tuned()  # the configuration timed last (dropout on)
    return result


def replayed(heads: int, dropout: float = DROPOUT) -> dict:
    """``cudnn-varlen`` recorded once as a CUDA graph (forward and backward) with one update's document
    starts, then replayed with another's written into the same buffer: does the replay compute the new
    documents' attention (against the dense mask, dropout 0), and at what device time (at ``dropout``)?
    Its per-call host planning would stay in the recording. A recording that fails is reported as such."""
    first = packed_documents(0)[0]
    second = packed_documents(1)[0][: len(first)]
    second = torch.cat([second, torch.full((len(first) - len(second), ROW), -1, dtype=second.dtype)])
    starts = [document_segments(d).tolist() for d in (first, second)]
    count = max(map(len, starts))
    starts = [torch.tensor(s + [s[-1]] * (count - len(s)), dtype=torch.int32, device="cuda") for s in starts]
    rows = len(first)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(rows, ROW, heads, HEAD_DIM, device="cuda", generator=gen, dtype=torch.bfloat16)
        .transpose(1, 2)
        .requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(rows, ROW, heads, HEAD_DIM, device="cuda", generator=gen, dtype=torch.bfloat16)
    segments = starts[0].clone()
    result = {"heads": heads}
    for p in (0.0, dropout):

        def step(p=p):
            out = cudnn_varlen(q, k, v, segments, p)
            return (out, *torch.autograd.grad(out, (q, k, v), grad))

        segments.copy_(starts[0])
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # warm-up outside the recording
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                recorded = step()
        except RuntimeError as err:  # on an H200 with torch 2.11 the recording was invalidated
            result["error"] = str(err).splitlines()[0][:200]
            return result
        segments.copy_(starts[1])
        graph.replay()
        torch.cuda.synchronize()
        if p == 0.0:
            mask = document_attention_mask(second.cuda(), causal=False)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)
            dense = (out, *(g.transpose(1, 2) for g in torch.autograd.grad(out, (q, k, v), grad)))
            got = (recorded[0], *(g.transpose(1, 2) for g in recorded[1:]))
            real = (second >= 0).cuda()  # (R, 512): padding attends otherwise in the two forms
            errors = [float((x - y)[real].abs().max()) for x, y in zip(got, dense, strict=True)]
            result["replay_max_abs_error_vs_dense"] = errors  # output, dq, dk, dv
        else:
            result["replay_forward_backward_ms"] = timed(graph.replay)
    return result


def main(argv: Sequence[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[4, 12], help="4: BERT-mini, 12: BERT-base")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument(
        "--replayed", action="store_true", help="also cudnn-varlen recorded as a CUDA graph and replayed"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("document_attention.py: needs a CUDA GPU (the kernels compared are CUDA kernels)")
    results = [measure(h) for h in args.heads]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, dropout {DROPOUT}, bf16")
    layout = block_layout()
    print(
        f"the block kernels' pairs at {TUNED_BLOCKS[0]} x {TUNED_BLOCKS[1]} blocks: {layout['computed_per_kept']:.3f} x"
        f" the pairs kept; with each row's documents in their best order: {layout['best_order_per_kept']:.3f} x"
    )
    for r in results:
        print(f"\n{r['heads']} heads of {HEAD_DIM}, {r['documents']} documents, {r['tokens']} tokens")
        for name, k in r["kernels"].items():
            if "error" in k:
                print(f"  {name:<16} failed: {k['error']}")
            else:
                print(
                    f"  {name:<16} {k['rows']:3d} rows, {r['pairs_kept'] / k['pairs_computed']:5.1%} of pairs kept"
                    f"   forward {k['forward_ms']:7.3f} ms   forward+backward {k['forward_backward_ms']:7.3f} ms"
                    f"   max |Δ| vs dense {k['max_abs_error']:.2e}, gradients {k['max_abs_grad_error']:.2e}"
                )
                kernels_ms = sorted(k["cuda_kernels_ms"].items(), key=lambda item: -item[1])
                print("    " + "; ".join(f"{ms:.3f} ms {kernel[:60]}" for kernel, ms in kernels_ms[:4]))
    if args.replayed:
        for r in results:
            r["cudnn_varlen_replayed"] = replayed(r["heads"])
            print(f"{r['heads']} heads, cudnn-varlen as a CUDA graph: {r['cudnn_varlen_replayed']}")
    if args.out:
        args.out.write_text(json.dumps({"runs": results, "block_layout": layout}, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()

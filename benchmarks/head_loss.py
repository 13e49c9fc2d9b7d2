"""The LM head's decoder + cross-entropy alone, forward and backward, three ways: as attngeom computes it
(``model.head_logits``: ``F.linear`` on the vocabulary padded to a multiple of 64, then ``F.cross_entropy``
in float32, weighted, autograd for the backward); a fused linear + cross-entropy whose gradients are taken
in the forward pass (the idea of Liger Kernel's, in torch operations for inductor to fuse, with per-position
weights and no host synchronisation); and, where it is installed, Liger Kernel's own (unweighted: every
weight equal, so the same arithmetic).

The fused form was tried as the training step's head and not kept: on an H100 it was slower here and in
the CLI (``results/head_loss_h100/``). The first two are compiled as the step compiles its loss
(``step.compile_loss``: CUDA graphs on a GPU, the positions' count marked dynamic) under bf16 autocast;
Liger runs eager (its Triton kernels, with a host synchronisation inside). The shapes are those of the paper
setting's update: hidden states from the head's transform (float32 under autocast), N loss positions, a
vocabulary of V words.

    python benchmarks/head_loss.py                       # on CUDA: d=256/768, V=8192/30522, N=6144
    python benchmarks/head_loss.py --positions 4096 8192 --out head_loss.json
    python benchmarks/head_loss.py --device cpu --positions 64 --hidden 32 --vocab 301 --repeats 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from attngeom.training.model import VOCABULARY_MULTIPLE, decoder_logits
from attngeom.training.step import compile_loss


class LinearCrossEntropy(torch.autograd.Function):
    """Σₙ weightsₙ·CE(x Wᵀ + b, targetsₙ) with its gradients taken in the forward pass (softmax − one-hot,
    times each position's weight, then the three products it feeds) and the logits let go; the backward pass
    only scales them. Padded words get a bias of −∞. Targets of -100 carry no loss."""

    @staticmethod
    def forward(ctx, x, weight, bias, targets, weights):  # noqa: ANN001, ANN205 (autograd's signature)
        words = weight.shape[-2]
        pad = -words % VOCABULARY_MULTIPLE
        padded = F.pad(weight, (0, 0, 0, pad))
        logits = x @ padded.mT  # the autocast dtype under autocast
        z = logits.float() + F.pad(bias.float(), (0, pad), value=-torch.inf).unsqueeze(-2)
        log_probs = z.log_softmax(dim=-1)
        share = torch.where(targets == -100, 0.0, weights.float()).unsqueeze(-1)
        hit = torch.arange(z.shape[-1], device=z.device) == targets.unsqueeze(-1)
        loss = -(torch.where(hit, log_probs, 0.0).sum(dim=-1, keepdim=True) * share).sum(dim=(-2, -1))
        grad = ((log_probs.exp() - hit.float()) * share).to(logits.dtype)
        grad_bias = grad.sum(dim=-2, dtype=torch.float32)[..., :words]
        grad_x = grad @ padded.to(logits.dtype)
        grad_weight = (grad.mT @ x.to(logits.dtype))[..., :words, :]
        ctx.save_for_backward(grad_x.to(x.dtype), grad_weight.to(weight.dtype), grad_bias.to(bias.dtype))
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):  # noqa: ANN001, ANN205
        grad_x, grad_weight, grad_bias = ctx.saved_tensors
        scale = grad_loss.unsqueeze(-1)
        return grad_x * scale.unsqueeze(-1), grad_weight * scale.unsqueeze(-1), grad_bias * scale, None, None


def fused_loss(x, weight, bias, targets, weights):  # noqa: ANN001, ANN201
    return LinearCrossEntropy.apply(x, weight, bias, targets, weights)


def autograd_loss(x, weight, bias, targets, weights):  # noqa: ANN001, ANN201
    """The head as autograd takes it: logits, float32 cross-entropy per position, weighted sum."""
    logits = decoder_logits(x, weight, bias)
    return (F.cross_entropy(logits.float(), targets, reduction="none") * weights).sum()


def liger_loss() -> Callable | None:
    """Liger Kernel's fused linear cross-entropy (sum over positions; it has no per-position weights)."""
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        return None
    fused = LigerFusedLinearCrossEntropyLoss(reduction="sum")

    def loss(x, weight, bias, targets, weights):  # noqa: ANN001, ANN202
        return fused(weight, x, targets, bias) * weights[0]

    return loss


def time_one(loss: Callable, inputs: tuple, device: torch.device, iterations: int, repeats: int) -> dict:
    """Median ms of forward + backward over ``repeats`` timings of ``iterations`` each, and peak memory."""
    x, weight, bias, targets, weights = inputs
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    )

    def once() -> None:
        for tensor in (x, weight, bias):  # as the step's zero_grad(set_to_none=True)
            tensor.grad = None
        torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            value = loss(x, weight, bias, targets, weights)
        value.backward()

    for _ in range(5):
        once()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(iterations):
            once()
        sync()
        times.append((time.perf_counter() - start) / iterations * 1e3)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else float("nan")
    return {"ms": statistics.median(times), "ms_all": times, "peak_mib": peak}


def inputs_for(n: int, hidden: int, vocab: int, device: torch.device) -> tuple:
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(n, hidden, generator=generator).to(device).requires_grad_()
    weight = (0.02 * torch.randn(vocab, hidden, generator=generator)).to(device).requires_grad_()
    bias = torch.zeros(vocab, device=device, requires_grad=True)
    targets = torch.randint(0, vocab, (n,), generator=generator).to(device)
    targets[torch.rand(n, generator=generator).to(device) < 0.1] = -100  # empty loss slots
    weights = torch.full((n,), 1.0 / n, device=device)
    torch._dynamo.maybe_mark_dynamic(x, 0)
    for tensor in (targets, weights):
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
    return x, weight, bias, targets, weights


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--positions", type=int, nargs="+", default=[6144])
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 768])
    parser.add_argument("--vocab", type=int, nargs="+", default=[8192, 30522])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    systems: dict[str, Callable] = {
        "autograd: F.linear + F.cross_entropy (attngeom's head), compiled": compile_loss(autograd_loss, mode),
        "fused linear + cross-entropy, gradients in the forward pass, compiled": compile_loss(
            fused_loss, mode
        ),
    }
    liger = liger_loss()
    if liger is not None and device.type == "cuda":
        systems["Liger Kernel fused linear cross-entropy, eager"] = liger
    rows = []
    for n in args.positions:
        for hidden in args.hidden:
            for vocab in args.vocab:
                inputs = inputs_for(n, hidden, vocab, device)
                for name, loss in systems.items():
                    result = time_one(loss, inputs, device, args.iterations, args.repeats)
                    rows.append({"positions": n, "hidden": hidden, "vocab": vocab, "system": name, **result})
                    print(
                        f"N={n:6d} d={hidden:4d} V={vocab:6d}  {result['ms']:8.3f} ms  "
                        f"{result['peak_mib']:8.0f} MiB  {name}",
                        flush=True,
                    )
    if args.out:
        device_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
        args.out.write_text(
            json.dumps({"device": device_name, "torch": torch.__version__, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()

"""Lab 3 (issue 40): the block kernels' backward with dQ computed inside the key-block kernel, added into a
float32 buffer by atomics (as FlashAttention 2's CUDA backward does; the package's default since this lab),
beside the order-fixed form (dK/dV per key block, then dQ per query block, each recomputing the scores, the
probabilities and dP; before, the only form, now what runs under torch's deterministic algorithms).

The package's backward makes 4 + 3 products a pair, this one 5; with the forward's 2, 9 against 7. The lab
measures what that is worth, and also the kernels' rate per pair they compute, on rows where every pair is
kept (one document a row) beside SDPA's flash kernel on the same rows, to tell the kernels' own rate from
the pairs the 64-token blocks compute beyond those the document mask keeps.

Usage (a CUDA GPU; or TRITON_INTERPRET=1 on a CPU for the check alone)::

    python lab_fused_backward.py OUT.json [--check-only]
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
import triton

from attngeom.training import document_blocks as db
from attngeom.training.document_mask import document_attention_mask, document_bounds

CUDA = torch.cuda.is_available()


def fused_flash(q, k, v, lo, hi, dropout=0.0, causal=False):
    """The package's kernels as they run by default: dQ added by atomics inside the key-block kernel."""
    return db.document_flash(q, k, v, lo, hi, dropout, causal)


def package_flash(q, k, v, lo, hi, dropout=0.0, causal=False):
    """The package's order-fixed backward, as before this change: dK/dV, then dQ in a kernel of its own."""
    return ordered.apply(q, k, v, lo, hi, dropout, causal, q.shape[-1] ** -0.5)


class ordered(db.DocumentFlash):
    """``DocumentFlash`` with torch's deterministic algorithms on in its backward, where the choice is made."""

    @staticmethod
    def backward(ctx, grad):
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            return db.DocumentFlash.backward(ctx, grad)
        finally:
            torch.use_deterministic_algorithms(False)


def check(device: str, dtype: torch.dtype) -> dict:
    """Both backwards against the dense mask in float64 (dropout 0), and against each other with dropout
    on the same seed: the largest differences, causal and not."""
    sizes = [[37, 50, 1, 12], [100], [3, 60, 37]]
    documents = torch.stack(
        [torch.repeat_interleave(torch.arange(len(s) + 1), torch.tensor([*s, 100 - sum(s)])) for s in sizes]
    ).to(device)
    lo, hi = document_bounds(documents)
    gen = torch.Generator(device).manual_seed(1)
    result = {}
    for causal in (False, True):
        q, k, v, g = (torch.randn(3, 100, 2, 24, device=device, generator=gen, dtype=dtype) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
        qh, kh, vh = (t.transpose(1, 2) for t in wide)
        mask = document_attention_mask(documents, causal)
        weights = ((qh @ kh.transpose(-1, -2)) * 24**-0.5).masked_fill(~mask, float("-inf")).softmax(-1)
        dense = (weights @ vh).transpose(1, 2)
        dense_grads = torch.autograd.grad(dense, wide, g.double())
        for name, kernel in (("ordered", package_flash), ("atomic", fused_flash)):
            grads = torch.autograd.grad(kernel(q, k, v, lo, hi, 0.0, causal), (q, k, v), g)
            result[f"{name} causal={causal} vs dense"] = max(
                float((a.double() - b).abs().max()) for a, b in zip(grads, dense_grads, strict=True)
            )
        state = torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()
        grads = []
        for kernel in (package_flash, fused_flash):
            (torch.cuda.set_rng_state if device == "cuda" else torch.set_rng_state)(state)
            grads.append(torch.autograd.grad(kernel(q, k, v, lo, hi, 0.3, causal), (q, k, v), g))
        result[f"atomic vs ordered, dropout 0.3, causal={causal}"] = max(
            float((a.double() - b.double()).abs().max()) for a, b in zip(*grads, strict=True)
        )
    return result


def device_ms(function) -> dict[str, float]:
    """Each kernel's device time in one call of ``function`` (after one untimed call: the autotuner)."""
    function()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        function()
        torch.cuda.synchronize()
    return {e.key[:60]: e.device_time_total / 1e3 for e in prof.key_averages() if e.device_time_total > 0}


def timings(heads: int) -> dict:
    """Forward + backward of both, on the packed rows of ``document_attention.py`` and on rows of one
    document each, with SDPA (flash, no mask) on the latter; dropout 0.1 throughout."""
    import document_attention as da

    documents, _ = da.packed_documents(0)
    documents = documents.cuda()
    full = torch.zeros_like(documents)
    gen = torch.Generator("cuda").manual_seed(0)
    shape = (len(documents), da.ROW, heads, da.HEAD_DIM)
    q, k, v = (
        torch.randn(shape, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
        for _ in range(3)
    )
    g = torch.randn(shape, device="cuda", generator=gen, dtype=torch.bfloat16)
    out: dict = {"heads": heads, "rows": len(documents)}
    for layout, docs in (("packed", documents), ("one document a row", full)):
        lo, hi = document_bounds(docs)
        for name, kernel in (("ordered", package_flash), ("atomic", fused_flash)):

            def both(kernel=kernel, lo=lo, hi=hi):
                torch.autograd.grad(kernel(q, k, v, lo, hi, da.DROPOUT), (q, k, v), g)

            kernels = device_ms(both)
            out[f"{layout} / {name}"] = {
                "device_ms": sum(kernels.values()),
                "kernels_ms": kernels,
                "events_ms": da.timed(both),
            }
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))

    def sdpa():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            torch.autograd.grad(
                F.scaled_dot_product_attention(qh, kh, vh, dropout_p=da.DROPOUT), (q, k, v), g.transpose(1, 2)
            )

    kernels = device_ms(sdpa)
    out["one document a row / sdpa flash"] = {
        "device_ms": sum(kernels.values()),
        "kernels_ms": kernels,
        "events_ms": da.timed(sdpa),
    }
    out["tuned"] = db.tuned()
    return out


def main(argv: list[str]) -> None:
    device, dtype = ("cuda", torch.bfloat16) if CUDA else ("cpu", torch.float32)
    result = {"check": check(device, dtype), "torch": torch.__version__, "triton": triton.__version__}
    print(json.dumps(result["check"], indent=1), flush=True)
    if CUDA and "--check-only" not in argv:
        result["timings"] = [timings(heads) for heads in (12, 4)]
        for t in result["timings"]:
            print(
                json.dumps(
                    {
                        key: value
                        if not isinstance(value, dict)
                        else {a: b for a, b in value.items() if a != "kernels_ms"}
                        for key, value in t.items()
                    }
                ),
                flush=True,
            )
    with open(argv[0], "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])

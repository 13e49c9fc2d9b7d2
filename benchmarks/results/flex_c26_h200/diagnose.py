"""Why the FlexAttention document path of commit 2899f33 (branch c26-flex) failed its CUDA comparison.

Run from a checkout of 2899f33 (``PYTHONPATH=src``) on a CUDA GPU. Each case prints the largest absolute
and relative (to the reference tensor's largest entry) difference of the output and of the gradients of
q, k and v, between the flex path and a dense reference in float64 on the same device:

1. dropout off: flex with the document BlockMask against softmax over the dense document mask;
2. dropout 0.1: the same, with the flex path's own draws applied densely (its ``dropped``);
3. both at a length that is not a multiple of the block size (40, as the tests use) and at 512;
4. flex compiled (as the module calls it on a GPU) and, for the tiny length, the model-level test's
   loss and parameter gradients against the SDPA model, with the largest difference per parameter.
"""

from __future__ import annotations

import json
import sys

import torch

from attngeom.training.document_attention import document_block_mask, document_flex_attention, dropped
from attngeom.training.document_mask import document_attention_mask

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def packed(rows: int, length: int, seed: int = 0, short: tuple[int, int] = (2, 14)) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    documents = torch.zeros(rows, length, dtype=torch.int32)
    number = 1
    for row in range(rows):
        at = 0
        while at < length - 4 - 8 * row:
            size = int(torch.randint(*short, (), generator=gen))
            documents[row, at : at + size] = number
            number, at = number + 1, at + size
    return documents


def reference(q, k, v, documents, causal, p, seed):
    rows, heads, length, dim = q.shape
    grid = (torch.arange(n, device=q.device) for n in (rows, heads, length, length))
    b, h, i, j = torch.meshgrid(*grid, indexing="ij")
    keep = ~dropped(seed, b, h, i, j, heads, length, p) if p > 0 else torch.ones((), dtype=torch.bool)
    mask = document_attention_mask(documents, causal)
    scores = (q @ k.mT) * dim**-0.5
    probs = torch.softmax(scores.masked_fill(~mask, -float("inf")), dim=-1)
    probs = torch.nan_to_num(probs)  # padding rows (document 0) see each other only: never all -inf
    return ((probs * keep / (1 - p)) @ v).transpose(1, 2)


def differences(got, want):
    scale = float(want.abs().max())
    diff = float((got.double() - want.double()).abs().max())
    return {"max_abs": diff, "max_rel": diff / scale if scale else float("nan")}


def case(length, heads, dim, causal, p, dtype, rows=3):
    device = DEVICE
    documents = packed(rows, length).to(device)
    gen = torch.Generator().manual_seed(1)
    base = [torch.randn(rows, heads, length, dim, generator=gen) for _ in range(3)]
    q, k, v = (t.to(device, dtype).requires_grad_() for t in base)
    torch.manual_seed(7)
    out, _ = document_flex_attention(
        torch.nn.Module(), q, k, v, document_block_mask(documents, causal, p > 0), dropout=p
    )
    torch.manual_seed(7)
    seed = torch.randint(2**62, (), device=device)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = reference(q64, k64, v64, documents, causal, p, seed)
    grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    wanted = torch.autograd.grad(want.square().sum(), (q64, k64, v64))
    row = {"length": length, "heads": heads, "causal": causal, "dropout": p, "dtype": str(dtype)}
    row["out"] = differences(out, want)
    for name, g, w in zip("qkv", grads, wanted, strict=True):
        row[f"grad_{name}"] = differences(g, w)
    row["nonfinite"] = int(sum((~torch.isfinite(t)).sum() for t in (out, *grads)))
    return row


def model_level(head_width: int = 16):
    """The branch's own model test (tests/test_document_attention.py) with the differences it hid, at
    heads of ``head_width`` (the test's own are 8, which FlexAttention's Triton kernel does not compile)."""
    sys.path.insert(0, "tests")
    import test_document_attention
    from test_document_attention import loss_and_gradients

    test_document_attention.TINY["hidden_size"] = head_width * test_document_attention.TINY["n_heads"]
    rows = []
    for objective in ("encoder", "decoder"):
        for dropout in (0.0,):
            sdpa_loss, sdpa = loss_and_gradients("sdpa", objective, DEVICE, dropout)
            flex_loss, flex = loss_and_gradients("flex", objective, DEVICE, dropout)
            worst = sorted(
                ((float((flex[n] - g).abs().max()), float(g.abs().max()), n) for n, g in sdpa.items()),
                reverse=True,
            )[:4]
            rows.append(
                {
                    "objective": objective,
                    "loss": [float(sdpa_loss), float(flex_loss)],
                    "worst_grads (abs diff, grad max, name)": worst,
                    "allclose_rtol5e-3_atol1e-6": {
                        n: bool(torch.allclose(flex[n], g, rtol=5e-3, atol=1e-6)) for n, g in sdpa.items()
                    },
                }
            )
    return rows


def main() -> None:
    """``diagnose.py OUT [--model-only]``: every case, then the model test; or the model test alone."""
    print(torch.__version__, DEVICE, torch.cuda.get_device_name() if DEVICE == "cuda" else "", flush=True)
    rows = []
    for length in () if "--model-only" in sys.argv else (40, 512):
        for causal in (False, True):
            for p in (0.0, 0.1):
                for dtype in (torch.float32, torch.bfloat16):
                    try:
                        rows.append(case(length, 4, 16 if length == 40 else 64, causal, p, dtype))
                    except Exception as err:  # noqa: BLE001 — the failure is the finding
                        rows.append(
                            {"length": length, "causal": causal, "dropout": p, "error": repr(err)[:400]}
                        )
                    print(json.dumps(rows[-1]), flush=True)
    model = model_level()
    for row in model:
        print(json.dumps({k: v for k, v in row.items() if k != "allclose_rtol5e-3_atol1e-6"}), flush=True)
        failing = [n for n, ok in row["allclose_rtol5e-3_atol1e-6"].items() if not ok]
        print("  not allclose:", failing, flush=True)
    with open(sys.argv[1] if len(sys.argv) > 1 else "diagnosis.json", "w") as f:
        json.dump({"cases": rows, "model": model}, f, indent=1)


if __name__ == "__main__":
    main()

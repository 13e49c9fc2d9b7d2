"""The Triton document-attention kernels (``attention: blocks``, training/document_blocks.py) compute what SDPA's dense
document mask computes, output and gradients, with and without causality, and its dropout is the mask its
own draw gives, the same in both passes. On a CUDA GPU it runs its kernels; elsewhere, where Triton is
installed, Triton's interpreter runs them on the CPU, in a child pytest started with TRITON_INTERPRET=1
(Triton reads it where it is first imported, which torch does before this file). Skipped where Triton is
not installed (CPU-only torch)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attngeom.training.document_mask import document_attention_mask, document_bounds

pytest.importorskip("triton")

CUDA = torch.cuda.is_available()
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
KERNELS = pytest.mark.skipif(
    not (CUDA or INTERPRETED), reason="run by test_the_kernels_under_tritons_interpreter in a child pytest"
)


@pytest.mark.skipif(CUDA or INTERPRETED, reason="on a GPU the kernels run here")
def test_the_kernels_under_tritons_interpreter():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__))],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"\b18 passed", result.stdout)  # every test below ran


@pytest.fixture(scope="module")
def kernels():
    """The module: its kernels compiled for the GPU or, without one, run by Triton's interpreter."""
    from attngeom.training import document_blocks

    return document_blocks


def dense(q, k, v, documents, causal, keep, keep_scale):
    """(B, L, H, D) attention through the dense document mask, dropout given as the pairs kept and the
    scale of a kept pair."""
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    scores = (qh @ kh.transpose(-1, -2)) * q.shape[-1] ** -0.5
    weights = scores.masked_fill(~document_attention_mask(documents, causal), float("-inf")).softmax(-1)
    if keep is not None:
        weights = torch.where(keep, weights * keep_scale, 0.0)
    return (weights @ vh).transpose(1, 2)


@KERNELS
@pytest.mark.parametrize("dropout", [0.1, 0.5])
def test_the_dropout_draws_keep_each_pair_independently_at_the_rate_asked(kernels, dropout):
    """The keyed hash's draws: the keep rate of every row and head, and no correlation between neighbouring
    keys, queries, heads or rows, nor between two seeds, each within 5 standard errors (the draws are fixed
    by the seeds, so the test is deterministic)."""
    device = "cuda" if CUDA else "cpu"
    rows, heads, length = 4, 4, 256
    masks = [
        kernels.keep_mask(torch.tensor([seed], device=device), rows, heads, length, dropout).double().cpu()
        for seed in (5, 6)
    ]
    keep = masks[0]
    rate = 1 - kernels.dropout_threshold(dropout)[0] / 65536
    error = (rate * (1 - rate) / length**2) ** 0.5  # of one row and head's keep rate
    assert ((keep.mean((-1, -2)) - rate).abs() < 5 * error).all()

    def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
        a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
        return float((a @ b) / (a.norm() * b.norm()))

    neighbours = {
        "keys": (keep[..., :-1], keep[..., 1:]),
        "queries": (keep[..., :-1, :], keep[..., 1:, :]),
        "heads": (keep[:, :-1], keep[:, 1:]),
        "rows": (keep[:-1], keep[1:]),
        "seeds": (masks[0], masks[1]),
    }
    for name, (a, b) in neighbours.items():
        assert abs(correlation(a, b)) < 5 / a.numel() ** 0.5, name


@KERNELS
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("dim", [16, 8, 24])  # 8, 24: padded to 16 and 32, the padding masked
def test_the_kernels_compute_the_dense_document_masks_attention_and_gradients(kernels, causal, dropout, dim):
    device = "cuda" if CUDA else "cpu"
    dtype = torch.bfloat16 if CUDA else torch.float32
    sizes = [[37, 50, 1, 12], [100], [3, 60, 37]]  # the rest of each 100-token row: its own padding run
    documents = torch.stack(
        [torch.repeat_interleave(torch.arange(len(s) + 1), torch.tensor([*s, 100 - sum(s)])) for s in sizes]
    ).to(device)
    rows, length, heads = len(sizes), 100, 2  # 100: a last block of the kernels' 64 cut short
    gen = torch.Generator(device).manual_seed(1)
    q, k, v = (
        torch.randn(rows, length, heads, dim, device=device, generator=gen, dtype=dtype).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(rows, length, heads, dim, device=device, generator=gen, dtype=dtype)
    lo, hi = document_bounds(documents)
    state = torch.cuda.get_rng_state() if CUDA else torch.get_rng_state()
    out = kernels.document_flash(q, k, v, lo, hi, dropout, causal)
    grads = torch.autograd.grad(out, (q, k, v), grad)
    keep = None
    if dropout:
        (torch.cuda.set_rng_state if CUDA else torch.set_rng_state)(state)  # the seed the call drew
        seed = torch.randint(0, 2**31 - 1, (1,), device=device, dtype=torch.int64)
        keep = kernels.keep_mask(seed, rows, heads, length, dropout)
        assert abs(float(keep.float().mean()) - (1 - dropout)) < 0.01
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = dense(*wide, documents, causal, keep, kernels.dropout_threshold(dropout)[1])
    expected_grads = torch.autograd.grad(expected, wide, grad.double())
    tolerance = dict(rtol=2e-2, atol=2e-2) if CUDA else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.double(), expected, **tolerance)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got.double(), want, **tolerance)


@KERNELS
@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_a_model_built_with_blocks_gives_the_dense_masks_loss_and_gradients(kernels, objective):
    """Through transformers' BERT: the bounds reach every layer, causality comes from the model."""
    from attngeom.training.config import make_config
    from attngeom.training.document_mask import document_ids
    from attngeom.training.model import LanguageModelLoss, build_model

    device = "cuda" if CUDA else "cpu"
    settings = dict(n_layers=2, hidden_size=32, n_heads=2, intermediate_size=64, seq_len=64, dropout=0.0)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 300, (3, 64), generator=gen)
    ids[torch.rand(3, 64, generator=gen) < 0.05] = 2  # [SEP]: documents end
    batch = [
        ids,
        torch.randint(0, 63, (3, 8), generator=gen),
        torch.randint(5, 300, (3, 8), generator=gen),
        torch.full((3, 8), 1 / 24),
        document_ids(ids, 2),
    ]
    results = []
    for attention in ("dense", "blocks"):
        torch.manual_seed(0)
        config = make_config({**settings, "objective": objective, "attention": attention})
        objective_ = LanguageModelLoss(build_model(config, 300).to(device))
        with torch.autocast(device, dtype=torch.bfloat16, enabled=CUDA):
            loss, _ = objective_(*(t.to(device) for t in batch))
        loss.backward()
        results.append((loss.detach().double(), [p.grad.double() for p in objective_.parameters()]))
    (dense_loss, dense_grads), (loss, grads) = results
    tolerance = dict(rtol=2e-2, atol=2e-2) if CUDA else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss, dense_loss, **tolerance)
    scale = torch.cat([g.flatten() for g in dense_grads]).norm()
    for a, b in zip(grads, dense_grads, strict=True):
        assert (a - b).norm() <= (0.05 if CUDA else 1e-4) * b.norm() + 1e-5 * scale


@KERNELS
@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_stacked_runs_through_blocks_give_each_runs_dense_loss_and_gradients(kernels, objective):
    """Two runs stacked (``StackedLoss`` of models built with blocks) against each run alone through the dense
    document mask: the stacked rows' bounds reach every layer, each run keeps to its own rows."""
    from attngeom.training.config import make_config
    from attngeom.training.document_mask import document_ids
    from attngeom.training.model import LanguageModelLoss, build_model
    from attngeom.training.stacked_model import StackedLoss

    device = "cuda" if CUDA else "cpu"
    settings = dict(n_layers=2, hidden_size=32, n_heads=2, intermediate_size=64, seq_len=64, dropout=0.0)
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(5, 300, (2, 3, 64), generator=gen)
    ids[torch.rand(2, 3, 64, generator=gen) < 0.05] = 2  # [SEP]: documents end
    batch = [
        ids,
        torch.randint(0, 63, (2, 3, 8), generator=gen),
        torch.randint(5, 300, (2, 3, 8), generator=gen),
        torch.full((2, 3, 8), 1 / 24),
        document_ids(ids.flatten(0, 1), 2).view_as(ids),
    ]
    batch = [t.to(device) for t in batch]
    runs, alone = [], []
    for seed in (0, 1):
        torch.manual_seed(seed)
        blocks = build_model(make_config({**settings, "objective": objective, "attention": "blocks"}), 300)
        dense = build_model(make_config({**settings, "objective": objective, "attention": "dense"}), 300)
        dense.load_state_dict(blocks.state_dict())
        runs.append(blocks.to(device))
        objective_ = LanguageModelLoss(dense.to(device))
        with torch.autocast(device, dtype=torch.bfloat16, enabled=CUDA):
            loss, _ = objective_(*(t[seed] for t in batch))
        loss.backward()
        alone.append((loss.detach().double(), {n: p.grad.double() for n, p in dense.named_parameters()}))
    stacked = StackedLoss(runs)
    assert stacked.flash is kernels.document_flash
    with torch.autocast(device, dtype=torch.bfloat16, enabled=CUDA):
        losses, _ = stacked(*batch)
    losses.sum().backward()
    tolerance = dict(rtol=2e-2, atol=2e-2) if CUDA else dict(rtol=1e-4, atol=1e-5)
    for run, (loss, grads) in enumerate(alone):
        torch.testing.assert_close(losses[run].detach().double(), loss, **tolerance)
        scale = torch.cat([g.flatten() for g in grads.values()]).norm()
        for name, want in grads.items():
            got = stacked.w(name).grad[run].double()
            assert (got - want).norm() <= (0.05 if CUDA else 1e-4) * want.norm() + 1e-5 * scale, name

"""FlexAttention with a document block mask computes what the dense-mask SDPA path computes: the model's
outputs and gradients with dropout off, and exact attention dropout (checked against the same draws applied
densely). Real tiny BERT models in float32 on the CPU, where FlexAttention runs its dense reference."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from attngeom.training.config import ConfigError, make_config
from attngeom.training.document_attention import FLEX, document_block_mask, document_flex_attention, dropped
from attngeom.training.document_mask import document_attention_mask
from attngeom.training.model import LanguageModelLoss, build_model
from attngeom.training.stacked import check_stackable

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")),
]
"""On a GPU host the same tests check the compiled (Triton) kernels."""
TOLERANCE = {"cpu": dict(rtol=1e-4, atol=1e-8), "cuda": dict(rtol=5e-3, atol=1e-6)}
"""float32 on both paths; on a GPU, other kernels (and their summation orders) on each side."""
TINY = dict(n_layers=2, hidden_size=32, n_heads=4, intermediate_size=64, seq_len=40, vocab_size=300)


def packed_batch(rows: int = 3, length: int = 40, vocab: int = 300, seed: int = 0):
    """Rows of several documents of uneven lengths, padding (document 0) at the end of some rows, and 6
    loss positions a row."""
    gen = torch.Generator().manual_seed(seed)
    documents = torch.zeros(rows, length, dtype=torch.int32)
    number = 1
    for row in range(rows):
        at = 0
        while at < length - 4 - 8 * row:
            size = int(torch.randint(2, 14, (), generator=gen))
            documents[row, at : at + size] = number
            number, at = number + 1, at + size
    ids = torch.randint(5, vocab, (rows, length), generator=gen)
    positions = torch.stack([torch.randperm(length, generator=gen)[:6].sort().values for _ in range(rows)])
    targets = torch.randint(5, vocab, positions.shape, generator=gen)
    weights = torch.full(positions.shape, 1 / positions.numel())
    return ids, positions, targets, weights, documents


def loss_and_gradients(attention: str, objective: str, device: str = "cpu", dropout: float = 0.0):
    config = make_config(TINY, {"attention": attention, "objective": objective, "dropout": dropout})
    torch.manual_seed(0)
    model = build_model(config, 300).to(device).train()
    loss, _ = LanguageModelLoss(model)(*(t.to(device) for t in packed_batch()))
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_flex_computes_the_dense_mask_path_s_loss_and_gradients(objective, device):
    sdpa_loss, sdpa_grads = loss_and_gradients("sdpa", objective, device)
    flex_loss, flex_grads = loss_and_gradients("flex", objective, device)
    assert torch.allclose(flex_loss, sdpa_loss, rtol=TOLERANCE[device]["rtol"] / 10, atol=1e-6)
    assert flex_grads.keys() == sdpa_grads.keys()
    for name, grad in sdpa_grads.items():  # a key bias's gradient is 0 up to rounding (~1e-12): atol
        assert torch.allclose(flex_grads[name], grad, **TOLERANCE[device]), name


def dense_dropout_reference(q, k, v, documents, causal: bool, p: float, seed: torch.Tensor) -> torch.Tensor:
    """SDPA's attention dropout written out: softmax over the document mask, then m / (1 − p), with m the
    draws of ``dropped`` evaluated for every (b, h, i, j)."""
    rows, heads, length, dim = q.shape
    grid = (torch.arange(n, device=q.device) for n in (rows, heads, length, length))
    b, h, i, j = torch.meshgrid(*grid, indexing="ij")
    keep = ~dropped(seed, b, h, i, j, heads, length, p)
    mask = document_attention_mask(documents, causal)
    probs = torch.softmax((q @ k.mT * dim**-0.5).masked_fill(~mask, -float("inf")), dim=-1)
    return ((probs * keep / (1 - p)) @ v).transpose(1, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_flex_attention_dropout_is_sdpa_s_dropout_exactly(causal, device):
    *_, documents = packed_batch()
    documents = documents.to(device)
    rows, length = documents.shape
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(rows, 4, length, 16, generator=gen).to(device).requires_grad_() for _ in range(3))
    module = torch.nn.Module()
    torch.manual_seed(7)
    out, _ = document_flex_attention(
        module, q, k, v, document_block_mask(documents, causal, True), dropout=0.1
    )
    torch.manual_seed(7)
    seed = torch.randint(2**62, (), device=device)
    reference = dense_dropout_reference(q, k, v, documents, causal, 0.1, seed)
    assert torch.allclose(out, reference, rtol=TOLERANCE[device]["rtol"], atol=1e-5)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(reference.square().sum(), (q, k, v))
    for got, want in zip(grads, expected, strict=True):
        assert torch.allclose(got, want, rtol=TOLERANCE[device]["rtol"], atol=1e-5 * float(want.abs().max()))
    without = dense_dropout_reference(q, k, v, documents, causal, 0.0, seed)
    assert not torch.allclose(out, without, rtol=1e-3, atol=1e-3)  # dropout did drop something


@pytest.mark.parametrize("causal", [False, True])
def test_flex_without_dropout_is_the_dense_mask_and_a_leaking_mask_is_caught(causal):
    """The comparison can fail: a block mask that lets document 2 see document 1 changes the output."""
    *_, documents = packed_batch()
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(*documents.shape[:1], 4, documents.shape[1], 8, generator=gen) for _ in range(3))
    module = torch.nn.Module()
    reference = dense_dropout_reference(q, k, v, documents, causal, 0.0, torch.tensor(0))
    out, _ = document_flex_attention(module, q, k, v, document_block_mask(documents, causal, False))
    assert torch.allclose(out, reference, rtol=1e-5, atol=1e-6)
    leaking = document_block_mask(documents.masked_fill(documents == 2, 1), causal, False)
    assert not torch.allclose(document_flex_attention(module, q, k, v, leaking)[0], reference, atol=1e-3)


def test_the_draws_are_bernoulli_p_and_change_with_the_seed():
    b, h, i, j = torch.meshgrid(*(torch.arange(n) for n in (4, 4, 64, 64)), indexing="ij")
    first = dropped(torch.tensor(12345), b, h, i, j, 4, 64, 0.1)
    second = dropped(torch.tensor(67890), b, h, i, j, 4, 64, 0.1)
    n = first.numel()
    assert abs(first.float().mean() - 0.1) < 4 * (0.1 * 0.9 / n) ** 0.5  # 4 standard errors
    both = (first & second).float().mean()  # independent seeds: P(both) = 0.01
    assert abs(both - 0.01) < 4 * (0.01 * 0.99 / n) ** 0.5
    neighbours = (first[..., 1:] & first[..., :-1]).float().mean()  # adjacent keys independent too
    assert abs(neighbours - 0.01) < 4 * (0.01 * 0.99 / first[..., 1:].numel()) ** 0.5


def test_the_flex_model_is_registered_with_transformers_and_the_setting_is_checked():
    model = build_model(make_config(TINY, {"attention": "flex"}), 300)
    assert model.config._attn_implementation == FLEX
    loss, _ = LanguageModelLoss(model.train())(*packed_batch())  # dropout 0.1: the doubled keys' path
    loss.backward()
    assert torch.isfinite(loss) and all(
        torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None
    )
    with pytest.raises(ConfigError, match="attention='triton'"):
        make_config(TINY, {"attention": "triton"})
    assert dataclasses.asdict(make_config(TINY))["attention"] == "sdpa"  # the default stays SDPA
    flex = make_config(TINY, {"attention": "flex"})
    with pytest.raises(ConfigError, match="stacked runs .* SDPA only"):
        check_stackable([flex, dataclasses.replace(flex, seed=1)], [Path("a"), Path("b")])
    with pytest.raises(ValueError, match="doubled=True"):  # dropout needs the doubled keys' mask
        *_, documents = packed_batch()
        q = torch.zeros(documents.shape[0], 4, documents.shape[1], 8)
        document_flex_attention(
            torch.nn.Module(), q, q, q, document_block_mask(documents, False, False), dropout=0.1
        )

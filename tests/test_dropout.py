"""The hidden dropout's hashed draws (``attngeom.training.dropout``): rate, independence, gradients, seeding,
and the models that use them."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from training_fixtures import TINY

from attngeom.training.config import make_config
from attngeom.training.dropout import HashedDropout, dropout_threshold, hashed_dropout
from attngeom.training.model import build_model


def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
    return float((a @ b) / (a.norm() * b.norm()))


def test_dropout_is_resolved_to_sixteen_bits_and_unbiased():
    threshold, scale = dropout_threshold(0.1)
    assert threshold == 6554 and abs(threshold / 65536 - 0.1) < 1e-5 and scale == 1 / (1 - 6554 / 65536)
    assert dropout_threshold(0.0) == (0, 1.0)
    with pytest.raises(ValueError, match="16-bit"):
        dropout_threshold(1e-6)
    with pytest.raises(ValueError, match="16-bit"):
        HashedDropout(1e-6)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_draws_keep_each_element_independently_at_the_rate_asked(p):
    """The keep rate of every row, and no correlation between neighbouring elements, rows or two calls, each
    within 5 standard errors (seeded: the test is deterministic)."""
    torch.manual_seed(0)
    x = torch.ones(64, 2048)
    keep, again = ((hashed_dropout(x, p) != 0).double() for _ in range(2))
    rate = 1 - dropout_threshold(p)[0] / 65536
    error = (rate * (1 - rate) / x.shape[1]) ** 0.5
    assert ((keep.mean(-1) - rate).abs() < 5 * error).all()
    neighbours = {
        "elements": (keep[:, :-1], keep[:, 1:]),
        "rows": (keep[:-1], keep[1:]),
        "calls": (keep, again),
    }
    for name, (a, b) in neighbours.items():
        assert abs(correlation(a, b)) < 5 / a.numel() ** 0.5, name


def test_kept_elements_are_scaled_and_their_gradient_is_the_same_mask():
    torch.manual_seed(1)
    x = torch.randn(8, 300, dtype=torch.float64, requires_grad=True)
    out = hashed_dropout(x, 0.25)
    kept = out != 0
    scale = dropout_threshold(0.25)[1]
    torch.testing.assert_close(out[kept], x[kept] * scale)
    out.sum().backward()
    torch.testing.assert_close(x.grad, kept.double() * scale)


def test_the_draws_follow_torchs_seed_and_keep_the_input_dtype():
    x = torch.ones(4, 512, dtype=torch.bfloat16)
    torch.manual_seed(3)
    first = hashed_dropout(x, 0.1)
    torch.manual_seed(3)
    assert torch.equal(hashed_dropout(x, 0.1), first) and first.dtype == torch.bfloat16
    assert not torch.equal(hashed_dropout(x, 0.1), first)  # the next call: other draws


def test_evaluation_and_zero_dropout_pass_the_input_through():
    x = torch.randn(3, 5)
    assert hashed_dropout(x, 0.1, training=False) is x and hashed_dropout(x, 0.0) is x
    module = HashedDropout(0.1).eval()
    assert module(x) is x


def test_a_tensor_beyond_int32_places_is_refused():
    with pytest.raises(ValueError, match="at most 2,147,483,648"):
        hashed_dropout(torch.empty(2**31 + 1, device="meta"), 0.1)


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_the_models_hidden_dropouts_draw_hashed_and_attentions_keeps_its_rate(objective):
    config = make_config(TINY, {"objective": objective, "dropout": 0.2})
    model = build_model(config, TINY["vocab_size"])
    hashed = [m for m in model.modules() if isinstance(m, HashedDropout)]
    torchs = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert len(hashed) == 1 + 2 * config.n_layers and {m.p for m in hashed} == {0.2}
    assert len(torchs) == config.n_layers and {m.p for m in torchs} == {0.2}  # attention's, read for its p
    assert all(
        m is layer.attention.self.dropout for m, layer in zip(torchs, model.bert.encoder.layer, strict=True)
    )

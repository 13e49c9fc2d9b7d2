"""The head-loss benchmark compares like with like: its fused candidate computes autograd's loss and
gradients (so its timings are of the same arithmetic), and the script runs end to end on the CPU."""

from __future__ import annotations

import sys

import head_loss  # benchmarks/, on the import path through tests/bench_support.py
import pytest
import torch


@pytest.mark.parametrize("words", [301, 320])  # padded to a multiple of 64, and already one
def test_the_fused_candidate_computes_autograds_loss_and_gradients(words):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(37, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(words, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(words, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, words, (37,), generator=generator)
    targets[::5] = -100
    weights = torch.rand(37, generator=generator, dtype=torch.float64)
    expected = head_loss.autograd_loss(x, weight, bias, targets, weights)
    expected_grads = torch.autograd.grad(expected, (x, weight, bias))
    fused = head_loss.fused_loss(x, weight, bias, targets, weights)
    torch.testing.assert_close(fused.double(), expected, rtol=1e-5, atol=1e-5)  # its softmax is in float32
    for got, want in zip(torch.autograd.grad(2.0 * fused, (x, weight, bias)), expected_grads, strict=True):
        torch.testing.assert_close(got, 2.0 * want, rtol=1e-5, atol=1e-6)


def test_the_script_times_each_system_on_the_cpu(tmp_path, monkeypatch, capsys):
    out = tmp_path / "head.json"
    argv = ["head_loss.py", "--device", "cpu", "--positions", "32", "--hidden", "16", "--vocab", "101"]
    monkeypatch.setattr(sys, "argv", [*argv, "--iterations", "1", "--repeats", "1", "--out", str(out)])
    head_loss.main()
    printed = capsys.readouterr().out
    assert "autograd" in printed and "fused linear + cross-entropy" in printed
    assert out.exists() and '"ms"' in out.read_text()

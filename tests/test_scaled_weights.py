"""A low-precision q/k weight with a scale tensor beside it and no quantization_config: the scale is applied
(per tensor, per row, or per block) or the model is refused in one line; never scored raw.

The references are float64 checkpoints of the dequantised values, computed here independently of attngeom.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hubserver import HubServer, pointed_at
from safetensors.torch import load_file
from test_quantised_weights import Q0, llama_dir, one_error, qk, scores, variant

__all__ = ["llama_dir"]  # the fixture, shared

FP8_MAX = 448.0


def per_row(w: torch.Tensor, shape: str) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 E4M3 values and the scales (``shape``: "rows", "rows,1", "()", "1") that bring them back."""
    w = w.double()
    if shape in ("()", "1"):
        scale = w.abs().max() / FP8_MAX
        values = (w / scale).to(torch.float8_e4m3fn)
        return values, scale.float().reshape(() if shape == "()" else (1,))
    scale = w.abs().amax(dim=1) / FP8_MAX
    values = (w / scale[:, None]).to(torch.float8_e4m3fn)
    return values, scale.float() if shape == "rows" else scale.float()[:, None]


def reference(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Float64 dequantisation by numpy broadcasting: a scale per tensor or per row."""
    v = values.to(torch.float64).numpy()
    s = scale.to(torch.float64).numpy()
    s = s.reshape(-1, 1) if s.size == v.shape[0] and s.size > 1 else s.reshape(())
    return torch.from_numpy(v * s)


@pytest.mark.parametrize("suffix", ["_scale", "_scale_inv"])
@pytest.mark.parametrize("shape", ["rows", "rows,1", "()", "1"])
def test_fp8_with_a_scale_beside_it_and_no_config_is_dequantised(llama_dir, tmp_path, suffix, shape):
    state = load_file(llama_dir / "model.safetensors")
    quantised, dequantised = dict(state), dict(state)
    for name in filter(qk, state):
        values, scale = per_row(state[name], shape)
        quantised[name], quantised[name + suffix] = values, scale
        dequantised[name] = reference(values, scale)
    raw = {
        n: t.float() if n in dequantised and qk(n) else t for n, t in quantised.items() if "scale" not in n
    }
    found, dtypes = scores(variant(llama_dir, tmp_path / "fp8", quantised))
    expected, _ = scores(variant(llama_dir, tmp_path / "ref", dequantised))
    unscaled, _ = scores(variant(llama_dir, tmp_path / "raw", raw))
    np.testing.assert_allclose(found, expected, rtol=1e-9, atol=1e-12)
    assert not np.allclose(unscaled, expected, rtol=1e-3)  # the scale matters: raw is wrong
    kind = "per tensor" if shape in ("()", "1") else "per row"
    assert dtypes == {f"float8_e4m3fn (fp8 {kind})"}


def test_a_scale_read_by_http_range_is_applied(llama_dir, tmp_path):
    state = load_file(llama_dir / "model.safetensors")
    quantised, dequantised = dict(state), dict(state)
    for name in filter(qk, state):
        values, scale = per_row(state[name], "rows,1")
        quantised[name], quantised[name + "_scale"] = values, scale
        dequantised[name] = reference(values, scale)
    model = variant(llama_dir, tmp_path / "fp8", quantised)
    expected, _ = scores(variant(llama_dir, tmp_path / "ref", dequantised))
    with HubServer({"org/fp8": model}).running() as server, pointed_at(server, tmp_path / "home"):
        np.testing.assert_allclose(scores("org/fp8")[0], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"_scale_2": torch.ones(())}, "_scale_2"),
        ({"input_scale": torch.ones(())}, "input_scale"),
        ({"_scale": torch.ones(()), "_scale_inv": torch.ones(())}, "_scale_inv"),
        ({"_scale": torch.ones(7)}, "(7,)"),
        ({"_scale": torch.ones(32, 2)}, "(32, 2)"),
        ({"_scale": torch.ones((), dtype=torch.int32)}, "int32"),
    ],
    ids=["weight_scale_2", "input_scale", "both", "7 scales", "32x2 scales", "int scale"],
)
def test_fp8_with_a_scale_it_cannot_apply_is_refused(llama_dir, tmp_path, capsys, extra, words):
    state = load_file(llama_dir / "model.safetensors")
    state[Q0] = state[Q0].to(torch.float8_e4m3fn)
    for key, tensor in extra.items():
        state[(Q0 + key) if key.startswith("_") else Q0.removesuffix("weight") + key] = tensor
    line = one_error(variant(llama_dir, tmp_path / "m", state), capsys)
    assert Q0 in line and words in line


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_float_weight_with_a_weight_scale_beside_it_is_refused(llama_dir, tmp_path, capsys, dtype):
    state = load_file(llama_dir / "model.safetensors")
    state[Q0] = state[Q0].to(dtype)
    state[Q0 + "_scale"] = torch.full((32, 1), 0.5)
    line = one_error(variant(llama_dir, tmp_path / "m", state), capsys)
    assert Q0 + "_scale" in line and "quantization_config" in line

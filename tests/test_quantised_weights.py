"""Quantised and non-float q/k weights: dequantised where the format says how, refused in one line where it does
not, and the stored dtype recorded in ``source_dtype``.

- bitsandbytes int8 (``quantization_config``, int8 weights with per-row ``SCB``): W = int8 · SCB / 127.
- FP8 (E4M3/E5M2) with block scales ``weight_scale_inv`` (block from ``weight_block_size``): each block times
  its scale; FP8 with no scale at all: an ordinary cast.
- GPTQ/AWQ, bitsandbytes 4-bit: refused, naming the method. int8/uint8/int64/bool/E8M0 without a scheme, and
  complex weights: refused, naming the tensor and dtype.
The references are float checkpoints holding the dequantised values, computed here independently.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from conformance import build, tiny_config
from hubserver import HubServer, pointed_at
from safetensors.torch import load_file, save_file
from test_sources_reliability import LLAMA  # the tiny Llama the source tests share

import attngeom
from attngeom.cli import main

METRICS = ["symmetry", "directionality", "norm"]
Q0 = "layers.0.self_attn.q_proj.weight"


def qk(name: str) -> bool:
    return name.endswith(("q_proj.weight", "k_proj.weight"))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("llama") / "tiny-llama"
    build(tiny_config("llama", **LLAMA)).save_pretrained(path)
    return path


def variant(llama_dir: Path, target: Path, state: dict, quantization: dict | None = None) -> Path:
    """A copy of the model with ``state`` as its weights and ``quantization`` as its quantization_config."""
    target.mkdir()
    config = json.loads((llama_dir / "config.json").read_text())
    if quantization is not None:
        config["quantization_config"] = quantization
    (target / "config.json").write_text(json.dumps(config))
    save_file(state, target / "model.safetensors", metadata={"format": "pt"})
    return target


def scores(model) -> tuple[np.ndarray, set]:
    frame = attngeom.score(model, progress=False)
    ordered = frame.sort_values(["layer", "head"], na_position="last")
    return ordered[METRICS].to_numpy(dtype=float), set(frame["source_dtype"])


def int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = w.float()
    scb = w.abs().amax(dim=1)
    return torch.round(w / scb[:, None] * 127).to(torch.int8), scb


def fp8_blocks(w: torch.Tensor, block: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    w = w.float()
    rows, cols = w.shape
    scale = torch.empty(-(-rows // block), -(-cols // block))
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            scale[i, j] = w[i * block : (i + 1) * block, j * block : (j + 1) * block].abs().max() / 448
    expanded = scale.repeat_interleave(block, 0)[:rows].repeat_interleave(block, 1)[:, :cols]
    return (w / expanded).to(dtype), scale


def test_bitsandbytes_int8_is_dequantised_by_its_row_scales(llama_dir, tmp_path):
    state = load_file(llama_dir / "model.safetensors")
    quantised, reference = dict(state), dict(state)
    for name in filter(qk, state):
        values, scb = int8_rows(state[name])
        quantised[name] = values
        quantised[name.removesuffix("weight") + "SCB"] = scb
        reference[name] = values.double() * scb.double()[:, None] / 127
    method = {"quant_method": "bitsandbytes", "load_in_8bit": True, "load_in_4bit": False}
    model = variant(llama_dir, tmp_path / "int8", quantised, method)
    expected, _ = scores(variant(llama_dir, tmp_path / "ref", reference))
    found, dtypes = scores(model)
    np.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-9)
    assert dtypes == {"int8 (bitsandbytes)"}
    with HubServer({"org/int8": model}).running() as server, pointed_at(server, tmp_path / "home"):
        np.testing.assert_allclose(scores("org/int8")[0], expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_with_block_scales_is_dequantised(llama_dir, tmp_path, dtype):
    state = load_file(llama_dir / "model.safetensors")
    quantised, reference = dict(state), dict(state)
    for name in filter(qk, state):
        values, scale = fp8_blocks(state[name], 16, dtype)
        quantised[name] = values
        quantised[name + "_scale_inv"] = scale
        expanded = scale.repeat_interleave(16, 0).repeat_interleave(16, 1)[
            : values.shape[0], : values.shape[1]
        ]
        reference[name] = values.double() * expanded.double()
    method = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [16, 16]}
    found, dtypes = scores(variant(llama_dir, tmp_path / "fp8", quantised, method))
    expected, _ = scores(variant(llama_dir, tmp_path / "ref", reference))
    np.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-9)
    assert dtypes == {f"{str(dtype).removeprefix('torch.')} (fp8 blocks)"}


def test_fp8_without_scales_is_a_cast_and_recorded(llama_dir, tmp_path):
    state = load_file(llama_dir / "model.safetensors")
    cast = {n: t.to(torch.float8_e4m3fn) if qk(n) else t for n, t in state.items()}
    reference = {n: t.float() if qk(n) else t for n, t in cast.items()}
    found, dtypes = scores(variant(llama_dir, tmp_path / "fp8", cast))
    expected, reference_dtypes = scores(variant(llama_dir, tmp_path / "ref", reference))
    np.testing.assert_allclose(found, expected, rtol=1e-9, atol=1e-12)
    assert dtypes == {"float8_e4m3fn"} and reference_dtypes == {"float32"}


def test_gguf_records_its_quantisation(tmp_path):
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", "llama")
    for add, value in (
        (writer.add_block_count, 1),
        (writer.add_embedding_length, 32),
        (writer.add_head_count, 4),
    ):
        add(value)
    rng = np.random.default_rng(0)
    q = gguf.quants.quantize(rng.standard_normal((32, 32), dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.0.attn_q.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.0.attn_k.weight", rng.standard_normal((32, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert set(attngeom.score(tmp_path / "m.gguf", progress=False)["source_dtype"]) == {"F32,Q8_0"}


def one_error(model: Path, capsys) -> str:
    code = main(["score", str(model), "-o", str(model.parent / "o.parquet"), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attngeom: error: "), lines
    assert not (model.parent / "o.parquet").exists()
    return lines[0]


@pytest.mark.parametrize(
    ("quantization", "words"),
    [
        ({"quant_method": "gptq", "bits": 4}, "gptq"),
        ({"quant_method": "awq", "bits": 4}, "awq"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "4-bit"),
    ],
)
def test_quantisation_methods_without_exact_dequantisation_are_refused(
    llama_dir, tmp_path, capsys, quantization, words
):
    model = variant(llama_dir, tmp_path / "m", load_file(llama_dir / "model.safetensors"), quantization)
    line = one_error(model, capsys)
    assert words in line and "quantization_config" in line


@pytest.mark.parametrize(
    ("dtype", "words"),
    [
        (torch.int8, "int8"),
        (torch.uint8, "uint8"),
        (torch.int64, "int64"),
        (torch.bool, "bool"),
        (torch.float8_e8m0fnu, "float8_e8m0fnu"),
        (torch.complex64, "complex64"),
    ],
)
def test_non_float_q_without_a_scheme_is_refused(llama_dir, tmp_path, capsys, dtype, words):
    state = load_file(llama_dir / "model.safetensors")
    state[Q0] = torch.ones(32, 32, dtype=torch.complex64) if dtype.is_complex else state[Q0].to(dtype)
    line = one_error(variant(llama_dir, tmp_path / "m", state), capsys)
    assert words in line and Q0 in line


def test_int8_with_a_missing_row_scale_is_refused(llama_dir, tmp_path, capsys):
    state = load_file(llama_dir / "model.safetensors")
    state[Q0] = int8_rows(state[Q0])[0]
    method = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    line = one_error(variant(llama_dir, tmp_path / "m", state, method), capsys)
    assert "SCB" in line and Q0 in line

"""Weights stored in a type the math cannot use as it is: dequantised where the format says exactly how,
refused in one line where it does not.

- bitsandbytes int8 (``quantization_config.quant_method == "bitsandbytes"``, 8-bit): an int8 weight with
  its per-row absmax ``SCB`` beside it, W = int8 · SCB / 127.
- FP8 (E4M3, E5M2) with a scale tensor beside it, ``<weight>_scale_inv`` (DeepSeek-V3's) or
  ``<weight>_scale`` (compressed-tensors', FBGEMM's), with or without ``quant_method == "fp8"``: the
  values times the scale, one per tensor, one per row, or one per block (``weight_block_size``, 128 × 128
  by default). FP8 with no scale and no quantization_config saying there is one is an ordinary cast.
- A scale beside a weight that none of these rules applies (``weight_scale_2``, ``input_scale``, both
  names at once, a shape that fits no rule), or a ``<weight>_scale`` beside a float weight: refused, naming
  it. A weight is never scored without the scale stored beside it.
- Any other quantisation method (GPTQ, AWQ, bitsandbytes 4-bit ...), and integer, boolean, E8M0 or
  complex weights without such a scheme: refused, naming the method, or the tensor and its dtype.
Dequantised weights are float64 (exact for every product of an int8 or FP8 value and a float32 scale).
A scored weight's stored type is recorded (``source_dtype``), so a table can tell them apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import InputError

FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
FP8 = frozenset({torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz})
DEFAULT_BLOCK = (128, 128)
"""``weight_block_size`` where an FP8 quantization_config leaves it out (DeepSeek-V3's)."""
WEIGHT_SCALES = ("_scale_inv", "_scale")
"""Suffixes of a weight's scale tensor; both multiply the stored values."""


@dataclass(frozen=True)
class Scheme:
    """What a config's ``quantization_config`` says about the stored weights (``method`` None: nothing)."""

    method: str | None = None
    block: tuple[int, int] = DEFAULT_BLOCK


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def scheme_of(config: Any, description: str) -> Scheme:
    """The quantisation scheme of ``config``; a method this module cannot undo exactly is an error."""
    settings = getattr(config, "quantization_config", None)
    if settings is None:
        return Scheme()
    if hasattr(settings, "to_dict"):
        settings = settings.to_dict()
    method = settings.get("quant_method") if isinstance(settings, dict) else None
    where = f"{description}: quantization_config"
    if method == "bitsandbytes" and not settings.get("load_in_4bit"):
        return Scheme("bitsandbytes")
    if method == "fp8":
        block = settings.get("weight_block_size") or list(DEFAULT_BLOCK)
        if not (
            isinstance(block, list | tuple)
            and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
        ):
            raise InputError(f"{where}: weight_block_size {block!r} is not two positive integers; fix it")
        return Scheme("fp8", (block[0], block[1]))
    name = "bitsandbytes 4-bit" if method == "bitsandbytes" else repr(method)
    raise InputError(
        f"{where} says the weights are quantised with {name}; only bitsandbytes int8 and block-scaled "
        "FP8 are dequantised exactly; score the unquantised model"
    )


def dequantise(
    name: str,
    tensor: torch.Tensor,
    scheme: Scheme,
    companion: Callable[[str], torch.Tensor | None],
    description: str,
    beside: Sequence[str] = (),
) -> tuple[torch.Tensor, str]:
    """``tensor`` (stored as ``name``) as floats, and what it was stored as; ``companion(name)`` reads a
    tensor stored beside it (its scales), or None where there is none; ``beside``: the names of the
    tensors of its module (``<module>.*``), whose scales must all be accounted for."""
    dtype = tensor.dtype
    where = f"{description}: tensor {name}"
    scales = _scales_of(name, beside)
    if dtype in FLOATS:
        if own := [n for n in scales if n.startswith(name + "_")]:
            raise InputError(
                f"{where} is {dtype_name(dtype)} with {own[0]} beside it, and no quantization_config says "
                "how they combine; score a checkpoint without scales, or one whose config states its method"
            )
        return tensor, dtype_name(dtype)
    if dtype == torch.int8 and scheme.method == "bitsandbytes":
        return _bitsandbytes(name, tensor, companion, where), "int8 (bitsandbytes)"
    if dtype in FP8:
        return _fp8(name, tensor, scheme, companion, scales, where)
    raise InputError(
        f"{where} is stored as {dtype_name(dtype)}, and no quantization_config here says how to "
        "dequantise it; score a floating-point checkpoint of the model"
    )


def _scales_of(name: str, beside: Sequence[str]) -> list[str]:
    """The scale tensors beside ``name`` that are not another tensor's own (``<bias>_scale``)."""
    scales = [n for n in beside if "scale" in n.rpartition(".")[2].lower() and n != name]
    others = [n for n in beside if n != name and n not in scales]
    return [n for n in scales if not any(n.startswith(m + "_") for m in others)]


def _fp8(
    name: str,
    tensor: torch.Tensor,
    scheme: Scheme,
    companion: Callable[[str], torch.Tensor | None],
    scales: list[str],
    where: str,
) -> tuple[torch.Tensor, str]:
    dtype = dtype_name(tensor.dtype)
    known = [name + suffix for suffix in WEIGHT_SCALES if name + suffix in scales]
    if unknown := [n for n in scales if n not in known]:
        raise InputError(
            f"{where} is {dtype} with {unknown[0]} beside it, a scale this tool cannot apply without a "
            "quantization_config saying how; score a floating-point checkpoint of the model"
        )
    if len(known) > 1:
        raise InputError(f"{where} is {dtype} with both {known[1]} and {known[0]}: which applies is unclear")
    scale = companion(known[0]) if known else None
    if scale is None and scheme.method == "fp8" and name.endswith("weight"):
        raise InputError(f"{where} is {dtype} without its {name}_scale_inv; re-download it")
    if scale is None:
        return tensor.to(torch.float32), dtype
    values, kind = _scaled(tensor, scale, scheme.block, f"{where}: its scales {known[0]}")
    return values, f"{dtype} (fp8 {kind})"


def _bitsandbytes(
    name: str, tensor: torch.Tensor, companion: Callable[[str], torch.Tensor | None], where: str
) -> torch.Tensor:
    scale_name = name.removesuffix("weight") + "SCB"
    scale = companion(scale_name)
    if scale is None:
        raise InputError(f"{where} is bitsandbytes int8 without its row scales {scale_name}; re-download it")
    if tensor.ndim != 2 or tuple(scale.shape) != (tensor.shape[0],) or scale.dtype not in FLOATS:
        raise InputError(
            f"{where}: row scales {scale_name} {tuple(scale.shape)} ({dtype_name(scale.dtype)}) do not fit "
            f"an int8 weight {tuple(tensor.shape)}; the checkpoint is damaged"
        )
    return tensor.to(torch.float64) * scale.to(torch.float64)[:, None] / 127


def _scaled(
    tensor: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], where: str
) -> tuple[torch.Tensor, str]:
    """``tensor`` times ``scale``: one per tensor, one per row, or one per block; and which it was."""
    if scale.dtype not in FLOATS:
        raise InputError(f"{where} are {dtype_name(scale.dtype)}, not floats; the checkpoint is damaged")
    values, scale = tensor.to(torch.float64), scale.to(torch.float64)
    if scale.numel() == 1:
        return values * scale.reshape(()), "per tensor"
    shape = tuple(scale.shape)
    if tensor.ndim == 2:
        rows, cols = tensor.shape
        if shape in ((rows,), (rows, 1)):
            return values * scale.reshape(rows, 1), "per row"
        if shape == (-(-rows // block[0]), -(-cols // block[1])):
            grown = scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
            return values * grown, "blocks"
    raise InputError(
        f"{where} {shape} fit {tuple(tensor.shape)} neither as one scale, one per row, nor one per "
        f"{block[0]} × {block[1]} block (weight_block_size); the checkpoint is damaged"
    )

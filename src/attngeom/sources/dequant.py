"""Weights stored in a type the math cannot use as it is: dequantised where the format says exactly how,
refused in one line where it does not.

- bitsandbytes int8 (``quantization_config.quant_method == "bitsandbytes"``, 8-bit): an int8 weight with
  its per-row absmax ``SCB`` beside it, W = int8 · SCB / 127.
- FP8 (E4M3, E5M2) with block scales ``weight_scale_inv`` (``quant_method == "fp8"``, block shape
  ``weight_block_size``, 128 × 128 by default): each block times its scale. FP8 with no scale and no
  quantization_config saying there is one is an ordinary cast.
- Any other quantisation method (GPTQ, AWQ, bitsandbytes 4-bit ...), and integer, boolean, E8M0 or
  complex weights without such a scheme: refused, naming the method, or the tensor and its dtype.
Dequantised weights are float64 (exact for every product of an int8 or FP8 value and a float32 scale).
A scored weight's stored type is recorded (``source_dtype``), so a table can tell them apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import InputError

FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
FP8 = frozenset({torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz})
DEFAULT_BLOCK = (128, 128)
"""``weight_block_size`` where an FP8 quantization_config leaves it out (DeepSeek-V3's)."""


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
) -> tuple[torch.Tensor, str]:
    """``tensor`` (stored as ``name``) as floats, and what it was stored as; ``companion(name)`` reads a
    tensor stored beside it (its scales), or None where there is none."""
    dtype = tensor.dtype
    if dtype in FLOATS:
        return tensor, dtype_name(dtype)
    where = f"{description}: tensor {name}"
    if dtype == torch.int8 and scheme.method == "bitsandbytes":
        return _bitsandbytes(name, tensor, companion, where), "int8 (bitsandbytes)"
    if dtype in FP8:
        scale = companion(name + "_scale_inv")
        if scale is None and scheme.method == "fp8" and name.endswith("weight"):
            raise InputError(f"{where} is {dtype_name(dtype)} without its {name}_scale_inv; re-download it")
        if scale is None:
            return tensor.to(torch.float32), dtype_name(dtype)
        return _fp8_blocks(tensor, scale, scheme.block, where), f"{dtype_name(dtype)} (fp8 blocks)"
    raise InputError(
        f"{where} is stored as {dtype_name(dtype)}, and no quantization_config here says how to "
        "dequantise it; score a floating-point checkpoint of the model"
    )


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


def _fp8_blocks(
    tensor: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], where: str
) -> torch.Tensor:
    values = tensor.to(torch.float64)
    if scale.dtype not in FLOATS:
        raise InputError(
            f"{where}: its scales are {dtype_name(scale.dtype)}, not floats; the checkpoint is damaged"
        )
    scale = scale.to(torch.float64)
    if scale.numel() == 1:
        return values * scale.reshape(())
    if tensor.ndim != 2:
        raise InputError(f"{where}: block scales for a {tensor.ndim}-d tensor; the checkpoint is damaged")
    rows, cols = tensor.shape
    expected = (-(-rows // block[0]), -(-cols // block[1]))
    if tuple(scale.shape) != expected:
        raise InputError(
            f"{where}: block scales {tuple(scale.shape)} do not fit {tuple(tensor.shape)} in blocks of "
            f"{block[0]} × {block[1]} (weight_block_size); the checkpoint is damaged"
        )
    expanded = scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return values * expanded

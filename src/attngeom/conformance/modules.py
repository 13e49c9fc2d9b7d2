"""The fallback of the conformance check: each discovered attention module driven through its own forward.

Where the whole tiny model cannot run (its forward needs inputs a generic driver does not make: image
grids, inference sessions, boxes, ...) or never reaches a module, the module is called on its own with
random hidden states of its q projection's input width (cross attention: random key/value states of its k
projection's input width), rotary position embeddings neutral (cos 1, sin 0), no mask or an all-visible
one, and ``None`` for any other argument its signature requires. The q and k it computes are captured
through the same projection hooks and attention interface as the whole forward pass and compared with
the same functions; a module whose forward does not run to its end is not validated.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import ExitStack

import torch

from ..architectures.discovery import Found
from .check import CAPTURE, _implementation, _interface, _register, _rotary_neutralised

BATCH, LENGTH, KV_LENGTH = 2, 7, 5
KEY_VALUE = ("encoder_hidden", "key_value", "context", "memory", "cross_attention", "encoder_states")
"""Argument names (parts) that take the key/value input of a cross attention."""
KEY_VALUE_EXACT = ("inputs", "key", "value", "keys", "values", "kv")


def drive(
    model: torch.nn.Module, items: list[Found]
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Exception]]:
    """The records (as ``check.capture`` makes them) of the modules of ``items`` whose own forward ran,
    and the error of each one whose forward did not run with any of the generic inputs."""
    records: dict[str, dict[str, torch.Tensor]] = {}
    failures: dict[str, Exception] = {}
    _register()
    with _implementation(model, CAPTURE):
        for item in items:
            module = model.get_submodule(item.path)
            error: Exception = TypeError("no input the module's forward accepts")
            for kwargs in _calls(model, module, item):
                try:
                    records[item.path] = _run(module, item, kwargs)
                    break
                except Exception as err:  # noqa: BLE001 — the next generic input, else this module's reason
                    error = err
            else:
                failures[item.path] = error
    return records, failures


def _run(module: torch.nn.Module, item: Found, kwargs: dict) -> dict[str, torch.Tensor]:
    """One call of ``module`` with ``kwargs``: the q/k projections' inputs and outputs and, where it goes
    through the attention interface, the q and k the attention function got."""
    record: dict[str, torch.Tensor] = {}

    def keep(role: str):
        def hook(projection, args, output):
            if f"x_{role}" not in record:
                record[f"x_{role}"], record[role] = args[0].detach(), output.detach()

        return hook

    _interface.pop(id(module), None)
    with ExitStack() as stack:
        for role, name in (("q", item.q), ("k", item.k)):
            handle = module.get_submodule(name.rsplit(".", 1)[-1]).register_forward_hook(keep(role))
            stack.callback(handle.remove)
        stack.enter_context(_rotary_neutralised([module]))
        with torch.no_grad():
            module(**kwargs)
    if not {"x_q", "q", "x_k", "k"} <= set(record):
        raise RuntimeError("the module's forward did not use its q and k projections")
    if id(module) in _interface:
        record["q_attn"], record["k_attn"] = _interface.pop(id(module))
    return record


def _width(projection: torch.nn.Module) -> int:
    return projection.in_features


def _calls(model: torch.nn.Module, module: torch.nn.Module, item: Found) -> Iterator[dict]:
    """Keyword arguments to try in turn: each generic reading of the module's signature."""
    params = [
        p
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not params:
        return
    q_in = _width(module.get_submodule(item.q.rsplit(".", 1)[-1]))
    k_in = _width(module.get_submodule(item.k.rsplit(".", 1)[-1]))
    cross = item.cross or q_in != k_in
    packed = any("cu_seqlens" in p.name for p in params)
    generator = torch.Generator().manual_seed(2)
    lead = (LENGTH,) if packed else (BATCH, LENGTH)
    kv_length = KV_LENGTH if cross else LENGTH
    hidden = torch.randn(*lead, q_in, generator=generator, dtype=torch.float64)
    states = (
        torch.randn(*lead[:-1], kv_length, k_in, generator=generator, dtype=torch.float64)
        if cross
        else hidden
    )
    for rotary in _rotary_widths(model, item):
        for mask in _masks(packed, kv_length):
            kwargs = {params[0].name: hidden}
            for p in params[1:]:
                value = _argument(p, rotary, mask, states, cross, lead)
                if value is not _DEFAULT:
                    kwargs[p.name] = value
            yield kwargs


_DEFAULT = object()


def _argument(p: inspect.Parameter, rotary, mask, states, cross: bool, lead: tuple[int, ...]):
    """The generic value of argument ``p`` (``_DEFAULT``: leave the module's default)."""
    name, required = p.name, p.default is inspect.Parameter.empty
    length = lead[-1]
    if name == "position_embeddings":
        if rotary is None:
            return _DEFAULT if not required else None
        shape = (*lead, rotary)
        return torch.ones(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
    if name in ("position_ids", "cache_position"):
        positions = torch.arange(length)
        return positions if name == "cache_position" or len(lead) == 1 else positions.expand(*lead)
    if "cu_seqlens" in name:
        return torch.tensor([0, length], dtype=torch.int32)
    if "max_seqlen" in name:
        return length
    if "mask" in name:
        return mask if (mask is not None or required) else _DEFAULT
    if name in KEY_VALUE_EXACT or any(part in name for part in KEY_VALUE):
        return states if (cross or required) else _DEFAULT
    return None if required else _DEFAULT


def _rotary_widths(model: torch.nn.Module, item: Found) -> list[int | None]:
    """Neutral rotary embeddings as wide as the head, as its rotary part, as half of it; then none."""
    config = getattr(model, "config", None)
    factor = getattr(config, "partial_rotary_factor", None) if config is not None else None
    widths = [item.head_dim, int(item.head_dim * factor) if factor else None, item.head_dim // 2]
    return [*dict.fromkeys(w for w in widths if w), None]


def _masks(packed: bool, kv_length: int) -> list[torch.Tensor | None]:
    """No mask, then an all-visible additive 4-D one, then an all-visible 2-D padding one."""
    if packed:
        return [None]
    return [
        None,
        torch.zeros(BATCH, 1, LENGTH, kv_length, dtype=torch.float64),
        torch.ones(BATCH, kv_length, dtype=torch.long),
    ]

"""What the conformance check neutralises in a forward pass, as the forms leave it out: rotary embeddings
(cos 1, sin 0, whether passed to the attention, as a pair or as RoFormer's one ``sinusoidal_pos`` tensor,
made by a rotary child of its own, or made from positions it is handed), a query temperature
(``Found.temperature``: q passed on unchanged) and an attention module's own up-casts to float32
(``float64_kept``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch.overrides import TorchFunctionMode

from ..architectures.discovery.attention import Found
from .running import track_running

POSITIONS = ("position_mask",)
"""Arguments of an attention module that hand it token positions to rotate q and k by itself."""


@contextmanager
def rotary_neutralised(modules: list[torch.nn.Module]):
    def neutral(cos_sin):
        if not isinstance(cos_sin, (tuple, list)) or len(cos_sin) != 2:  # MLCD passes a list
            return None
        cos, sin = cos_sin
        return torch.ones_like(cos), torch.zeros_like(sin)

    def pre_hook(module, args, kwargs):
        if isinstance(kwargs.get("sinusoidal_pos"), torch.Tensor):  # RoFormer's [sin | cos] in one tensor
            sin, cos = kwargs["sinusoidal_pos"].chunk(2, dim=-1)
            kwargs = kwargs | {"sinusoidal_pos": torch.cat([torch.zeros_like(sin), torch.ones_like(cos)], -1)}
            return args, kwargs
        if "position_embeddings" in kwargs:
            cos_sin = neutral(kwargs["position_embeddings"])
            return None if cos_sin is None else (args, {**kwargs, "position_embeddings": cos_sin})
        names = list(inspect.signature(module.forward).parameters)
        at = names.index("position_embeddings") if "position_embeddings" in names else len(args)
        cos_sin = neutral(args[at]) if at < len(args) else None  # passed by position (SAM 3's ViT)
        return None if cos_sin is None else ((*args[:at], cos_sin, *args[at + 1 :]), kwargs)

    def zero_positions(module, args, kwargs):  # position 0 for a rotary the module makes itself
        names = list(inspect.signature(module.forward).parameters)
        if "position_embeddings" in names or not (args or kwargs):
            return None
        for at, name in ((names.index(n), n) for n in POSITIONS if n in names):
            value = kwargs.get(name, args[at] if at < len(args) else None)
            if value is not None and (not isinstance(value, torch.Tensor) or value.is_floating_point()):
                continue
            shape = (args[0] if args else kwargs[names[0]]).shape[:-1] if value is None else value.shape
            zeros = torch.zeros(shape, dtype=torch.long)
            args, kwargs = (
                ((*args[:at], zeros, *args[at + 1 :]), kwargs)
                if at < len(args)
                else (args, kwargs | {name: zeros})
            )
        return args, kwargs

    def post_hook(module, args, output):  # a rotary module of the attention's own (RecurrentGemma)
        return neutral(output)

    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]
    handles += [m.register_forward_pre_hook(zero_positions, with_kwargs=True) for m in modules]
    inner = [c for m in modules for c in m.children() if "Rotary" in type(c).__name__]
    handles += [c.register_forward_hook(post_hook) for c in inner]
    with removed_after(handles):
        yield


@contextmanager
def temperature_neutralised(pairs: list[tuple[torch.nn.Module, Found]]):
    """A query temperature (``Found.temperature``) passes q on unchanged: the form leaves it out, as it
    does rotary, so the check compares what the form states."""

    def identity(child, args, kwargs, output):
        return args[0] if args else next(iter(kwargs.values()))

    children = [m.get_submodule(f.temperature) for m, f in pairs if f.temperature]
    with removed_after([c.register_forward_hook(identity, with_kwargs=True) for c in children]):
        yield


class _Float64Kept(TorchFunctionMode):
    """``Tensor.float()`` of a float64 tensor returns it unchanged while an attention module runs."""

    def __init__(self):
        super().__init__()
        self.active: list[str] = []

    def cut_short(self) -> None:
        """After a forward pass that raised: no module is running."""
        self.active.clear()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.float and self.active and args and args[0].dtype == torch.float64:
            return args[0]
        return func(*args, **(kwargs or {}))


@contextmanager
def float64_kept(modules: dict[str, torch.nn.Module]) -> Iterator[_Float64Kept]:
    """Within the block, an up-cast to float32 that a module of ``modules`` makes itself (``.float()``,
    meant for half-precision weights) keeps a float64 tensor float64: the tiny model runs in float64, and
    a cast of some of its operands only makes them disagree (Gemma 4's audio attention casts q and k to
    float32, then scales q by a float64 parameter: q·kᵀ mixes float64 with float32 and raises)."""
    mode = _Float64Kept()
    with ExitStack() as stack:
        track_running(stack, modules, mode.active)
        stack.enter_context(mode)
        yield mode


@contextmanager
def removed_after(handles: list) -> Iterator[None]:
    """Hook handles (or anything with ``remove()``) removed when the block ends, even on failure."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()

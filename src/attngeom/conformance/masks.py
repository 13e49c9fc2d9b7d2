"""Whether each attention module's attention was causal in the forward pass: as the attention interface's
call computed it (``interface``, by the module that called it: the discovered module or one around it,
Zaya's attention around its ``qkv_proj``), else, for a module that forms its scores outside the interface
(GPT-2's lineage, XGLM, TrOCR, CPM-Ant), from the probabilities of its first softmax over (…, queries, keys)
(or of the first ``scaled_dot_product_attention`` or ``nn.MultiheadAttention`` call in its forward, whose
softmax no function mode sees: their output for identity values, and the weights per head)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch.overrides import TorchFunctionMode

from .faults import observing
from .observe import causal
from .products import MULTIHEAD
from .running import track_running

SOFTMAX = {torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax}
SDPA = torch.nn.functional.scaled_dot_product_attention


class _Softmaxes(TorchFunctionMode):
    """Per attention path: whether its first attention probabilities were causal (``observe.causal``)."""

    def __init__(self):
        super().__init__()
        self.active: list[str] = []
        self.causal: dict[str, bool] = {}
        self.scores: dict[str, torch.Tensor] = {}
        """By path: its first softmax's input (``observe.scores_scoring`` reads how it was made)."""

    def cut_short(self, kept: set[str]) -> None:
        """After a forward pass that raised: no module is running, and only ``kept`` paths' finds stay."""
        self.active.clear()
        for path in set(self.causal) - kept:
            del self.causal[path]
            self.scores.pop(path, None)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        path = self.active[-1] if self.active else None
        if path is not None and path not in self.causal:
            with observing("the softmax watch"):
                self._watch(path, func, args, kwargs, result)
        return result

    def _watch(self, path: str, func, args: tuple, kwargs: dict, result) -> None:
        if func in SOFTMAX and args:
            scores = args[0]
            if isinstance(scores, torch.Tensor) and scores.dim() >= 2 and scores.shape[-2] > 1:
                self.causal[path] = causal(result)
                self.scores[path] = scores.detach()
        elif func is SDPA and len(args) >= 2:
            query, key = args[0], args[1]
            m = key.shape[-2]
            identity = torch.eye(m, dtype=query.dtype, device=query.device)
            identity = identity.expand(*key.shape[:-1], m).contiguous()
            rest = {k: v for k, v in kwargs.items() if k not in ("value", "dropout_p")}
            self.causal[path] = causal(func(query, key, identity, *args[3:], **rest))
        elif func is MULTIHEAD:
            bound = inspect.signature(func).bind(*args, **kwargs)
            bound.arguments |= {"need_weights": True, "average_attn_weights": False}
            self.causal[path] = causal(func(*bound.args, **bound.kwargs)[1])


def add_causal(
    model: torch.nn.Module, records: dict[str, dict], called: dict[int, bool], softmaxes: _Softmaxes
) -> None:
    """Each record's ``causal``: from ``called`` (module id → its interface call was causal), the nearest
    module at or around the record's path that called the interface, else its softmax's probabilities."""
    paths = {path: called[id(m)] for path, m in model.named_modules() if id(m) in called}
    for path, record in records.items():
        around = [p for p in paths if path == p or path.startswith(f"{p}.")]
        if around:
            record["causal"] = torch.tensor(paths[max(around, key=len)])
        elif path in softmaxes.causal:
            record["causal"] = torch.tensor(softmaxes.causal[path])


@contextmanager
def softmax_masks(modules: dict[str, torch.nn.Module]) -> Iterator[_Softmaxes]:
    """Within the block, by path, whether each module's first attention probabilities were causal."""
    mode = _Softmaxes()

    with ExitStack() as stack:
        track_running(stack, modules, mode.active)
        stack.enter_context(mode)
        yield mode

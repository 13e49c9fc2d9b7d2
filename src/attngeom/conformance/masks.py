"""Whether each attention module's mask was causal in the forward pass: as the attention interface got it
(``observe.causal``, by the module that called it: the discovered module or one around it, Zaya's
attention around its ``qkv_proj``), else, for a module that forms its scores outside the interface
(GPT-2's lineage, XGLM, TrOCR, CPM-Ant), at the first softmax of its forward, whose input is its scores
with the mask applied (added, or filled in), over (…, queries, keys)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch.overrides import TorchFunctionMode

from .observe import BLOCKED
from .running import track_running

SOFTMAX = {torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax}


class _Softmaxes(TorchFunctionMode):
    """Per attention path: whether its first softmax's input keeps the first query from every later key."""

    def __init__(self):
        super().__init__()
        self.active: list[str] = []
        self.causal: dict[str, bool] = {}
        self.scores: dict[str, torch.Tensor] = {}
        """By path: its first softmax's input (``observe.scores_scoring`` reads how it was made)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        path = self.active[-1] if self.active else None
        if path is not None and path not in self.causal and func in SOFTMAX and args:
            scores = args[0]
            if isinstance(scores, torch.Tensor) and scores.dim() >= 2 and scores.shape[-2] > 1:
                first = scores[..., 0, 1 : scores.shape[-2]]
                self.causal[path] = bool((first <= BLOCKED).all())
                self.scores[path] = scores.detach()
        return func(*args, **kwargs)


def add_causal(
    model: torch.nn.Module, records: dict[str, dict], called: dict[int, bool], softmaxes: _Softmaxes
) -> None:
    """Each record's ``causal``: from ``called`` (module id → its interface call's mask was causal), the
    nearest module at or around the record's path that called the interface, else its softmax's input."""
    paths = {path: called[id(m)] for path, m in model.named_modules() if id(m) in called}
    for path, record in records.items():
        around = [p for p in paths if path == p or path.startswith(f"{p}.")]
        if around:
            record["causal"] = torch.tensor(paths[max(around, key=len)])
        elif path in softmaxes.causal:
            record["causal"] = torch.tensor(softmaxes.causal[path])


@contextmanager
def softmax_masks(modules: dict[str, torch.nn.Module]) -> Iterator[_Softmaxes]:
    """Within the block, by path, whether each module's first softmax input was causally masked."""
    mode = _Softmaxes()

    with ExitStack() as stack:
        track_running(stack, modules, mode.active)
        stack.enter_context(mode)
        yield mode

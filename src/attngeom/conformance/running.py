"""Which attention module is running: the function modes that watch a forward pass (a module's first
softmax, its first score product) attribute what they see to the innermost module of theirs that runs."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack

import torch


def track_running(stack: ExitStack, modules: Mapping[str, torch.nn.Module], active: list[str]) -> None:
    """While a module of ``modules`` runs, its path is last in ``active``; the hooks go when ``stack``
    closes."""
    for path, module in modules.items():

        def opened(module, args, path=path):
            active.append(path)

        def closed(module, args, output, path=path):
            if active and active[-1] == path:
                active.pop()

        for handle in (module.register_forward_pre_hook(opened), module.register_forward_hook(closed)):
            stack.callback(handle.remove)

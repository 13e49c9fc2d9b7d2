"""A gated recurrence with queries and keys: xLSTM's mLSTM, a matrix memory updated token by token.

Its q·k products are weighted by exponential input and forget gates (``igate``/``fgate`` children of
the module) and normalised by the magnitude of their own weighted sum, never by a softmax over q·k: like
the delta-rule and lightning layers ``discovery.NOT_SOFTMAX`` names, it is not the softmax attention
whose bilinear forms attngeom scores.
"""

from __future__ import annotations

import torch

GATES = ("igate", "fgate")


def gated_recurrence(module: torch.nn.Module) -> bool:
    """Whether ``module`` has an input and a forget gate of its own (an mLSTM cell), besides q and k."""
    names = [name for name, _ in module.named_children()]
    return all(any(name.startswith(gate) for name in names) for gate in GATES)


def recurrence_reason(model: torch.nn.Module) -> str | None:
    """The no-attention reason of a model whose only q/k mixers are gated recurrences, else None."""
    found = next((m for m in model.modules() if gated_recurrence(m)), None)
    if found is None:
        return None
    return (
        f"no dot-product attention (gated recurrence {type(found).__name__}, xLSTM's mLSTM: q·k weighted "
        "by exponential input and forget gates and normalised by their sum, no softmax over q·k)"
    )

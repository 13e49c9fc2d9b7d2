"""A query temperature: a child of an attention that rescales q by the token's position, per head.

Mistral Large 4 multiplies each head's q by ``scale_h · log(pos + 1) + bias_h`` after the rotary part
(as Llama 4's NoPE layers do by a fixed rule): a positive per-token, per-head scalar in a trained model
(transformers' own init makes it 1), which no bilinear form of x states. It is left out of the form
(``query_temperature``) as rotary is, and the conformance check neutralises it as it does rotary.
"""

from __future__ import annotations

import inspect

import torch


def query_temperature(module: torch.nn.Module) -> str:
    """The name of ``module``'s child that rescales the query by position (its forward takes the query
    states first and the position ids), else ``""``."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            continue
        params = list(inspect.signature(child.forward).parameters)
        if params and params[0].startswith("query") and "position_ids" in params:
            return name
    return ""

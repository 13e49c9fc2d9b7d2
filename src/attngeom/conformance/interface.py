"""The attention function the conformance run registers in transformers' attention interface.

It runs the function the model would run itself (its configured implementation: the modeling file's own
eager function, or sdpa, as ``get_interface`` picks it for the model) and records, per calling module, its
first call: the q and k it got (the operands of the score product), what the call does to q·k besides the
form (``observe.scoring``) and whether the attention probabilities that function computed were causal
(``observe.causal``). The probabilities are the function's own: the weights an eager function returns, else
its output for values that are the identity over the keys (P·I = P). So a module's ``is_causal`` flag
counts only where the function it runs reads it (sdpa does, BridgeTower's eager function does not).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .faults import observing
from .observe import causal, scoring

CAPTURE = "attngeom_conformance"
calls: dict[int, dict[str, torch.Tensor]] = {}
"""By module id: ``q_attn``, ``k_attn``, ``causal`` and the ``scoring`` entries of its first call."""
_native: dict[int, str | None] = {}
"""By config id (0: the model's own config): the attention implementation it had before ``CAPTURE``."""


def _attention(module, query, key, value, attention_mask=None, **kwargs):
    function = _native_function(module)
    given = dict(kwargs)
    if function is _sdpa():
        given.pop("softcap", None)  # scores capped after q·k: no part of q or k, and sdpa refuses it
    output = function(module, query, key, value, attention_mask, **given)
    if id(module) not in calls:
        with observing("the capturing attention function"):
            record = {"q_attn": query.detach(), "k_attn": key.detach()} | scoring(attention_mask, kwargs)
            arguments = (query, key, value, attention_mask)
            probabilities = _probabilities(function, module, arguments, given, output)
            calls[id(module)] = record | {"causal": torch.tensor(causal(probabilities))}
    return output


def _sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def _native_function(module: torch.nn.Module):
    """The attention function the model would call from ``module`` without ``CAPTURE``: as its modeling
    file asks the interface (``ALL_ATTENTION_FUNCTIONS.get_interface(implementation, its eager function)``);
    sdpa where that file has no eager function or the implementation is not one this machine runs."""
    from transformers import AttentionInterface, PretrainedConfig

    config = getattr(module, "config", None)
    name = _native.get(id(config)) if isinstance(config, PretrainedConfig) else None
    name = name or _native.get(0) or "eager"
    source = sys.modules.get(type(module).__module__)
    eager = getattr(source, "eager_attention_forward", None)
    if name == "eager":
        return eager if callable(eager) else _sdpa()
    if name != "sdpa":  # flash, flex, paged kernels: not run on this machine's CPU
        return _sdpa()
    interfaces = getattr(source, "ALL_ATTENTION_FUNCTIONS", None) or AttentionInterface()
    return interfaces.get_interface("sdpa", _sdpa())


def _probabilities(function, module, arguments: tuple, kwargs: dict, output) -> torch.Tensor:
    """The attention probabilities (…, N, M) of the call: the weights the function returned, else its
    output for identity values."""
    query, key, _, mask = arguments
    n, m = query.shape[-2], key.shape[-2]
    weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
    if isinstance(weights, torch.Tensor) and weights.shape[-2:] == (n, m):
        return weights.detach()
    identity = torch.eye(m, dtype=query.dtype, device=query.device).expand(*key.shape[:-1], m).contiguous()
    with torch.no_grad():
        out = function(module, query, key, identity, mask, **kwargs)[0]
    if out.dim() != 4 or out.shape[1] != n or out.shape[-1] != m:
        raise ValueError(f"the attention function's output {tuple(out.shape)} for identity values")
    return out.transpose(1, 2)


def register() -> None:
    """The capturing attention function, with eager attention's masks (always a 4-D tensor: some families
    index the mask they are given)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(CAPTURE, _attention)
    AttentionMaskInterface.register(CAPTURE, eager_mask)


@contextmanager
def capturing(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, the model and every sub-model's config ask the interface for ``CAPTURE``; the
    implementation each had is what ``_attention`` runs."""
    from transformers import PretrainedConfig

    register()
    configs = {id(model.config): model.config}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig):
            configs[id(config)] = config
    before = {key: c._attn_implementation_internal for key, c in configs.items()}
    native = dict(_native)
    for key, name in before.items():
        if name != CAPTURE:  # a block within another keeps the outer one's
            _native[key] = name
    if model.config._attn_implementation_internal != CAPTURE:
        _native[0] = model.config._attn_implementation_internal
    for config in configs.values():
        config._attn_implementation_internal = CAPTURE
    try:
        yield
    finally:
        for key, config in configs.items():
            config._attn_implementation_internal = before[key]
        _native.clear()
        _native.update(native)

"""What a module named as an attention computes when it forms no softmax(q·k) scores between tokens.

Read off the module's parameters, not its family: a learned decay over time (RWKV's WKV recurrence), a
learned vector scoring each token on its own (additive attention: SLANet's GRU cell, SwiftFormer's
efficient additive attention), a softmax over one token's own features (PatchTSMixer's gated attention),
or a class named linear attention (MobileViTv2's separable one). And two dot-product attentions whose
q·k has no single pair of projections to read: query heads from routed experts (JetMoE), a query
projection without a key projection (a layer reusing another model's keys).
"""

from __future__ import annotations

import re

import torch

LINEAR = re.compile(r"Linear\w*Attention$")
"""A linear (separable, kernel) attention's class: it never forms the per-pair scores a form describes."""


def mechanism(module: torch.nn.Module) -> str | None:
    """What ``module`` computes instead of softmax(q·k) between tokens, or None where it is not known."""
    name = type(module).__name__
    params = dict(module.named_parameters())
    if LINEAR.search(name):
        return f"linear attention ({name}): no softmax over q·k scores, no per-head bilinear form"
    if any(p.rsplit(".", 1)[-1] == "time_decay" for p in params):
        return (
            f"a recurrence with a learned time decay ({name}): keys weight values through the decay, no q·k"
        )
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    vectors = [p for p in params.values() if p.dim() == 2 and p.shape[-1] == 1]  # features → a score
    if any(m.out_features == 1 for m in linears) or vectors:
        return f"additive attention ({name}): a learned vector scores each token on its own, no q·k between tokens"
    softmax = any(isinstance(m, torch.nn.Softmax) for m in module.children())
    if softmax and len(linears) == 1 and linears[0].in_features == linears[0].out_features:
        return f"gated attention ({name}): a softmax over one token's own features gates them, no q·k between tokens"
    return None


def no_attention(model: torch.nn.Module) -> str | None:
    """``no dot-product attention (...)`` where every outermost module named as an attention has a
    ``mechanism`` (the first one's said); else None."""
    found: list[str] = []
    inside: list[str] = []
    for path, module in model.named_modules():
        if "Attention" not in type(module).__name__ or any(path.startswith(p + ".") for p in inside):
            continue
        if not any(True for _ in module.parameters()):
            continue
        inside.append(path)
        what = mechanism(module)
        if what is None:
            return None
        found.append(what)
    return f"no dot-product attention ({found[0]})" if found else None


def routed_queries(module) -> str | None:
    """The path of the routed experts that hold ``module``'s query projection (JetMoE's ``experts``,
    beside a key/value projection and with a ``router``), or None."""
    if not any(hasattr(module, k) for k in ("kv_proj", "k_proj", "key")):
        return None
    for path, child in module.named_children():
        if hasattr(child, "router") and not any(hasattr(module, q) for q in ("q_proj", "query", "q")):
            return path
    return None


def query_only(module) -> bool:
    """Whether ``module`` has a query projection and no key projection (a KV-sharing layer's)."""
    from ..architectures.discovery import PAIRS
    from ..architectures.projections import projection

    return any(projection(module, q) for q, _ in PAIRS) and not any(hasattr(module, k) for _, k in PAIRS)

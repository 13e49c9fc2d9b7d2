"""What a module named as an attention computes when it forms no softmax(q·k) scores between tokens.

Read off the module's parameters, not its family: a learned decay over time (RWKV's WKV recurrence), a
learned vector scoring each token on its own (additive attention: SLANet's GRU cell, SwiftFormer's
efficient additive attention), a softmax over one token's own features (PatchTSMixer's gated attention),
or a class named linear attention (MobileViTv2's separable one); ``no_attention_reason`` says why a
built model has no discovered attention at all. And a dot-product attention whose q·k
has no single pair of projections to read: query heads from routed experts (JetMoE).
"""

from __future__ import annotations

import re

import torch

from ..architectures.discovery.projections import token_convolution

FUSED = ("qkv_proj", "query_key_value", "c_attn", "Wqkv", "qkv", "W_pack", "qkv_linear", "to_qkv", "att_proj")
FUSED += ("queries_keys_values",)
"""Child names of a fused q/k/v projection (a layout discovery did not read, where one is left)."""
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


def no_attention_reason(model) -> str:
    """Why a built model has no discovered attention: a fused projection, q or k convolved over tokens,
    another mechanism than q·k (``mechanisms``), or none."""
    import torch

    from ..architectures.discovery.recurrence import recurrence_reason
    from .refusals import queries_only_attention

    if recurrent := recurrence_reason(model):
        return recurrent
    if other := no_attention(model):
        return other
    for path, module in model.named_modules():
        name = path.rsplit(".", 1)[-1]
        if name in FUSED or isinstance(module, torch.nn.MultiheadAttention):
            return f"fused q/k/v projection ({type(module).__name__} `{name}`): layout not discovered"
    for module in model.modules():
        if "Attention" in type(module).__name__ and (conv := token_convolution(module)):
            return (
                f"{type(module).__name__}: q or k passes through a convolution over tokens (`{conv}`), "
                "so it is not a bilinear form of one token's input"
            )
    for module in model.modules():
        if "Attention" in type(module).__name__ and (routed := routed_queries(module)):
            return (
                f"{type(module).__name__}: a mixture of attention heads (its query heads come from the experts "
                f"a router picks per token, `{routed}`), so a head has no single W_q; per-expert forms not scored"
            )
    classes = sorted({type(m).__name__ for m in model.modules() if "Attention" in type(m).__name__})
    queries_only = sorted({type(m).__name__ for m in model.modules() if queries_only_attention(m)})
    if queries_only and set(queries_only) == set(classes):
        return (
            f"attention without key projections of its own ({queries_only[0]} has a query projection only: "
            "its keys are another model's or layer's, shared): no W_qk within this model"
        )
    if classes:
        return f"attention without separate q/k projections ({', '.join(classes[:2])}): layout not discovered"
    return "no dot-product attention (convolutional, state-space or other token mixing)"

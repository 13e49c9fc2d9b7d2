"""The specific refusal of a model type whose tiny model cannot be built (an optional package the
environment cannot hold, no model class at all, a base class transformers names but does not define), or
whose attention has no key projection of its own."""

from __future__ import annotations

import re

FUSED = ("qkv_proj", "query_key_value", "c_attn", "Wqkv", "qkv", "W_pack", "qkv_linear", "to_qkv")
"""Child names of a fused q/k/v projection discovery reads only in a layout the run chose."""
LINEAR = re.compile(r"Linear\w*Attention$")
"""A linear (separable, kernel) attention's class: it never forms the per-pair scores a form describes."""
UNAVAILABLE = {
    "timm": "whose torchvision dependency is built on PyPI against torch's CUDA libraries and does not load "
    "with the CPU torch installed here",
    "torchaudio": "whose newest PyPI build (2.11) is for torch 2.11 and does not load with torch 2.13",
    "detectron2": "which is not on PyPI (it installs from its source repository)",
    "natten": "which PyPI has only as source to compile against torch (no wheel)",
}
"""Optional packages some models import, and why the test environment cannot hold them."""
NEEDS = re.compile(r"requires the ([\w.-]+) library")


def build_refusal(err: BaseException) -> str | None:
    """The specific refusal of a type whose tiny model could not be built, where ``err`` says it: a
    missing optional package, or no model class (discovery's own error); else None."""
    from ..architectures.base import ArchitectureError

    if isinstance(err, ArchitectureError):
        return str(err)
    found = NEEDS.search(str(err)) if isinstance(err, ImportError) else None
    name = found.group(1) if found else getattr(err, "name", None)
    if not isinstance(err, ImportError) or not name:
        return None
    package = name.split(".")[0]
    why = UNAVAILABLE.get(package, "which is not installed")
    return f"needs the {package} package, {why}"


QUERY = re.compile(r"^(q|query|q_proj|to_q)$")
KEY = re.compile(r"(^|_)(k|key|kv|qkv|keys)(_|$)|^(Wqkv|c_attn|query_key_value|W_pack|to_k)$")


def queries_only_attention(module) -> bool:
    """Whether ``module`` is an attention with a query projection and no key projection (Gemma 4's
    assistant: every layer reads the target model's shared keys)."""
    names = [name for name, _ in module.named_children()]
    return (
        "Attention" in type(module).__name__
        and any(QUERY.search(n) for n in names)
        and not any(KEY.search(n) for n in names)
    )


def undefined_base(model_type: str) -> bool:
    """Whether the base model class transformers' auto mapping names for ``model_type`` is one transformers
    does not define (Voxtral Realtime's text model: built only inside its parent)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    name = name[0] if isinstance(name, (list, tuple)) else name
    return name is not None and not hasattr(transformers, name)


def no_attention_reason(model) -> str:
    """Why a built model has no discovered attention: a fused projection, another attention, or none."""
    import torch

    from ..architectures.recurrence import recurrence_reason

    if recurrent := recurrence_reason(model):
        return recurrent
    linear = sorted({type(m).__name__ for m in model.modules() if LINEAR.search(type(m).__name__)})
    if linear:
        return f"linear attention ({linear[0]}): no softmax over q·k scores, no per-head bilinear form"
    for path, module in model.named_modules():
        name = path.rsplit(".", 1)[-1]
        if name in FUSED or isinstance(module, torch.nn.MultiheadAttention):
            return f"fused q/k/v projection ({type(module).__name__} `{name}`): layout not discovered"
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

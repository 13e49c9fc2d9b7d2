"""The specific refusal of a model type whose tiny model cannot be built (an optional package the
environment cannot hold, no model class at all, a base class transformers names but does not define), or
whose attention has no key projection of its own or is no dot-product attention."""

from __future__ import annotations

import re

UNAVAILABLE = {
    "timm": "whose torchvision dependency is built on PyPI against torch's CUDA libraries and does not load "
    "with the CPU torch installed here",
    "torchaudio": "whose newest PyPI build (2.11) is for torch 2.11 and does not load with torch 2.13",
    "detectron2": "which is not on PyPI (it installs from its source repository)",
    "natten": "which PyPI has only as source to compile against torch (no wheel)",
}
"""Optional packages some models import, and why the test environment cannot hold them."""
NEEDS = re.compile(r"requires the ([\w.-]+) library")
FFT_QK = re.compile(r"fft\.\w*fft\(\s*(query|key)")
"""An FFT of q or k in an attention's forward: a correlation over time lags, not per-pair scores."""


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


def correlation_of(skeleton, config) -> str | None:
    """The refusal of a model whose every attention module takes the FFT of its q and k (Autoformer's
    auto-correlation, read off its forward's code), else None."""
    import inspect

    from ..architectures.base import ArchitectureError
    from ..architectures.discovery.attention import Found, find_attention

    try:
        found = find_attention(skeleton, config)
        classes = {type(skeleton.get_submodule(i.path)) for i in found if isinstance(i, Found)}
        sources = [inspect.getsource(cls.forward) for cls in classes]
    except (ArchitectureError, OSError, TypeError):  # a layout refused: the full attempt says why
        return None
    if classes and all(FFT_QK.search(source) for source in sources):
        return (
            f"no dot-product attention ({sorted(c.__name__ for c in classes)[0]} auto-correlation: q and k "
            "are correlated over time lags by FFT and a softmax over the top lags weights shifted values; "
            "no per-pair q·k score)"
        )
    return None


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


def sub_config_class(model_type: str) -> str | None:
    """The refusal of a config with no model whose modular source extends another type's config
    (``config_base_of``): its checkpoints are that type's models."""
    from ..architectures.discovery.model_classes import config_base_of

    base = config_base_of(model_type)
    return base and (
        f"a sub-config class (its config extends `{base}`'s; transformers defines no model for it): "
        f"its checkpoints are `{base}` models, scored through `{base}`"
    )

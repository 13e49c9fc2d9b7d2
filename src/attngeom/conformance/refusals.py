"""The specific refusal of a model type whose tiny model cannot be built (an optional package the
environment cannot hold, or no model class at all), or whose attention is no dot-product attention."""

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
    """The attention class when every attention module takes the FFT of its q and k (Autoformer's
    auto-correlation, read off its forward's code), else None."""
    import inspect

    from ..architectures.discovery import Found, find_attention

    classes = {
        type(skeleton.get_submodule(i.path)) for i in find_attention(skeleton, config) if isinstance(i, Found)
    }
    try:
        sources = [inspect.getsource(cls.forward) for cls in classes]
    except (OSError, TypeError):
        return None
    if classes and all(FFT_QK.search(source) for source in sources):
        return sorted(cls.__name__ for cls in classes)[0]
    return None

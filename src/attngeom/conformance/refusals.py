"""The specific refusal of a model type whose tiny model cannot be built: an optional package the
environment cannot hold, or no model class at all."""

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

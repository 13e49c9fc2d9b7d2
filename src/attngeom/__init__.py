"""attngeom: symmetry and directionality of the self-attention bilinear form W_qk = W_q W_kᵀ."""

from .version import __version__

__all__ = ["Form", "Results", "__version__", "load_results", "plots", "score", "summarize"]

LAZY = {
    "Form": "scores",
    "score": "engine",
    "summarize": "report.summary",
    "load_results": "report.results_folder",
    "Results": "report.results_folder",
}
"""Name → the module that defines it, imported on first use: tables and figures need neither torch nor
transformers, and ``import attngeom`` needs none of them."""


def __getattr__(name: str):
    import importlib

    if name in LAZY:
        return getattr(importlib.import_module(f".{LAZY[name]}", __name__), name)
    if name == "plots":  # matplotlib
        return importlib.import_module(".report.plots", __name__)
    raise AttributeError(f"module 'attngeom' has no attribute {name!r}")

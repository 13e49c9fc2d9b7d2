"""attngeom: symmetry and directionality of the self-attention bilinear form W_qk = W_q W_kᵀ."""

from .version import __version__

__all__ = ["__version__", "score"]


def __getattr__(name: str):
    # Imported on first use: tables and figures need neither torch nor transformers.
    if name == "score":
        from .engine import score

        return score
    raise AttributeError(f"module 'attngeom' has no attribute {name!r}")

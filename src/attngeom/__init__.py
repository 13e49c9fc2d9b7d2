"""attngeom: symmetry and directionality of the self-attention bilinear form W_qk = W_q W_kᵀ."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attngeom")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__", "score"]


def __getattr__(name: str):
    # Imported on first use: tables and figures need neither torch nor transformers.
    if name == "score":
        from .engine import score

        return score
    raise AttributeError(f"module 'attngeom' has no attribute {name!r}")

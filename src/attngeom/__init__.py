"""attngeom: symmetry and directionality of the self-attention bilinear form W_qk = W_q W_kᵀ."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attngeom")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

from .engine import score  # noqa: E402

__all__ = ["__version__", "score"]

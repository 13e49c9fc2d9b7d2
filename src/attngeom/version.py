"""The installed package's version, recorded with every result (a leaf module: anything may import it)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attngeom")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

"""Session fixtures shared by several test files."""

from conformance_sweep import fresh_conformance  # noqa: F401 - one fresh conformance run per session
from pipeline_support import tiny_run  # noqa: F401 - the tiny pipeline run, once per session

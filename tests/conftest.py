"""Session fixtures shared by several test files."""

from pipeline_support import tiny_run  # noqa: F401 - the tiny pipeline run, once per session

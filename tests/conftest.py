"""Session fixtures shared by several test files, and the suite's one thread for torch's math."""

import os

# One thread for torch's math in the test process and every process it starts, set before torch is
# imported (it reads this once): the suite's models are tiny, and a second thread only adds handing work
# over; on a busy 2-core machine that handing over costs hundreds of times the math itself (a loop of tiny
# Linear forward+backward passes took 24 s on 2 threads, 0.04 s on 1). A value already set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
from bench_support import bench_cache  # noqa: E402, F401 - the benchmarks' corpus, once per module
from browser import FAILED  # noqa: E402
from conformance_sweep import fresh_conformance  # noqa: E402, F401 - one fresh conformance run per session
from hypothesis import settings  # noqa: E402
from pipeline_support import tiny_run  # noqa: E402, F401 - the tiny pipeline run, once per session

# The property tests draw new examples at every run by hand, to find what nobody wrote down; under CI
# (``CI`` set, as .ci/run does) the same ones every time, so that whether a commit passes depends on the
# commit. A counter-example found by hand becomes an example of its own (``@example``).
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test is marked on its item, so that its browser page is kept as a screenshot (browser.py)."""
    report = yield
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report

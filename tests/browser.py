"""Headless Chromium for the tests, driven by Playwright: the system's Chromium (Debian's, which CI installs:
.ci/run), never a browser Playwright would download. Locators and ``expect`` wait for what they look for
(a report's frame, a sorted column) instead of sleeping, and a test that fails leaves a screenshot of its
page (``keep_screenshot``, its path printed with the failure)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = next(
    (path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))), None
)
"""The browser, or None (tests that need it skip; CI installs Debian's chromium: .ci/run)."""
FAILED = pytest.StashKey[bool]()
"""Set on a test's item when its call failed (tests/conftest.py), so its page fixture keeps a screenshot."""
TIMEOUT_MS = 60_000
"""How long a locator or ``expect`` waits: generous, for a loaded 2-core machine."""


@contextlib.contextmanager
def chromium() -> Iterator:
    """A headless Chromium (``playwright.sync_api.Browser``), closed when the block ends."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-quic"]
        )
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser, url: str):
    """A page of its own (a fresh context: no state shared with other tests) at ``url``, loaded."""
    page = browser.new_context().new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    return page


def keep_screenshot(request: pytest.FixtureRequest, page, folder: Path) -> None:
    """If the test of ``request`` failed: a full-page screenshot of ``page`` in ``folder``, its path printed
    (pytest shows it with the failure)."""
    if request.node.stash.get(FAILED, False):
        path = folder / f"{request.node.name}.png"
        page.screenshot(path=path, full_page=True)
        print(f"screenshot of the page when the test failed: {path}")

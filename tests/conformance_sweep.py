"""One fresh conformance run per session for the tests that read it (a session fixture, through
tests/conftest.py): each test names its model types with ``@pytest.mark.conformance(*types)``, and the
selected tests' types are checked together, each once, in two processes. Where the slow test of every
model type is selected (CI's slow step), this is that run, and the other tests read from it."""

from __future__ import annotations

import pytest

from attngeom.conformance.run import run_all


@pytest.fixture(scope="session")
def fresh_conformance(request) -> dict[str, dict]:
    """model type → its entry from a fresh run, for every type a selected test marks."""
    items = request.session.items
    types = {t for item in items for mark in item.iter_markers("conformance") for t in mark.args}
    return run_all(sorted(types), jobs=2)

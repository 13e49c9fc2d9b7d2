"""The code is formatted and linted as the project's linters, at the versions pyproject.toml pins, say:
ruff for the Python, snakefmt for the workflow. CI runs them here, with the rest of the tests."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def pins() -> dict[str, str]:
    test = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    return {r.name: str(r.specifier) for r in map(Requirement, test) if r.name in ("ruff", "snakefmt")}


def test_the_linters_are_pinned_and_installed_at_their_pins():
    assert pins() == {"ruff": f"=={version('ruff')}", "snakefmt": f"=={version('snakefmt')}"}


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["snakefmt", "--check", "Snakefile", "workflow"],
    ],
    ids=" ".join,
)
def test_linter_is_clean(command):
    done = subprocess.run([str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

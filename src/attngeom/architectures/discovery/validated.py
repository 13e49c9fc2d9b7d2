"""The committed result of the generated conformance run: which discovered model types are validated.

``support.json`` (written by ``python -m attngeom.conformance.run``) holds, per ``model_type`` of the
transformers it was run with, ``status`` (``table``, ``validated`` or ``refused``), the reason and the
stacks. A leaf module: the registry asks it before it uses a discovered layout.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

SUPPORT_FILE = Path(__file__).parents[1] / "support.json"
"""Beside the architecture package's modules, where the package data puts it (pyproject.toml)."""


@cache
def conformance() -> dict[str, dict]:
    """``model_type`` → its entry (empty when the file is absent)."""
    if not SUPPORT_FILE.exists():
        return {}
    return json.loads(SUPPORT_FILE.read_text())["types"]

"""The architecture maps by mechanism: every hand-written table is registered in ``registry.TABLES`` under
each type it names, carries its reason (``why``, one line), and is imported only when a type of it is asked
for; discovery imports no table module (the latent-attention helpers it shares with a table are in
``architectures.mla``)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

from test_imports import import_graph

from attngeom.architectures import tables
from attngeom.architectures.registry import TABLES


def table_modules() -> dict[str, list]:
    """Module name → the architectures its ``ARCHITECTURES`` lists, for every module of ``tables``."""
    found = {}
    for info in pkgutil.iter_modules(tables.__path__):
        module = importlib.import_module(f"{tables.__name__}.{info.name}")
        if hasattr(module, "ARCHITECTURES"):
            found[info.name] = module.ARCHITECTURES
    return found


def test_every_table_is_registered_under_each_of_its_types_with_its_reason():
    registered = {}
    for name, architectures in table_modules().items():
        for architecture in architectures:
            assert architecture.why and "\n" not in architecture.why, architecture.model_types
            for model_type in architecture.model_types:
                assert model_type not in registered, f"{model_type} has a table in two places"
                registered[model_type] = name
    assert registered == TABLES


def test_importing_the_maps_imports_no_table_until_a_type_is_asked_for():
    code = (
        "import json, sys; from attngeom.architectures import REGISTRY; "
        "before = [m for m in sys.modules if '.architectures.tables.' in m]; 'llama' in REGISTRY; "
        "REGISTRY['deepseek_v2']; print(json.dumps([before, sorted(m for m in sys.modules if '.architectures.tables.' in m)]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = json.loads(done.stdout)
    assert before == [] and after == ["attngeom.architectures.tables.latent"]


def test_discovery_imports_no_table_module():
    graph = import_graph()
    discovery = [m for m in graph if m.startswith("attngeom.architectures.discovery")]
    assert len(discovery) > 5
    assert [
        (m, t) for m in discovery for t in graph[m] if t.startswith("attngeom.architectures.tables")
    ] == []

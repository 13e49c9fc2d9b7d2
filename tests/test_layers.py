"""The layer rules docs/architecture.md states hold in the code: its table of layers, read from the page,
from the ground floor up; every module of the package on one floor; no import climbs to a higher floor
(so no circle between floors); and the rules it names: nothing of runstats or pipeline imports the
report, the pipeline imports nothing from the CLI. (No circle between modules: tests/test_imports.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_imports import SRC, import_graph, module_names

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
PACKAGE = SRC / "attngeom"


def floors() -> list[tuple[str, list[str]]]:
    """The rows of the page's table of layers: (layer, its modules and folders as the page names them)."""
    text = DOC.read_text()
    table = text[text.index("## The layers, from the ground floor up") :].split("\n## ")[0]
    rows = [line.split("|")[1:4] for line in table.splitlines() if re.match(r"\| \d+ \|", line)]
    return [(layer.strip(), re.findall(r"`([^`]+)`", modules)) for _, layer, modules in rows]


def floor_of() -> dict[str, int]:
    """Module → the number of its floor (0: the ground)."""
    paths = {name: path.relative_to(PACKAGE).as_posix() for name, path in module_names().items()}
    found: dict[str, int] = {}
    for number, (_, names) in enumerate(floors()):
        for name in names:
            matched = [
                m for m, p in paths.items() if p == name or (name.endswith("/") and p.startswith(name))
            ]
            assert matched, f"docs/architecture.md names {name}, which src/attngeom lacks"
            for module in matched:
                assert module not in found, f"{module} is on two floors of docs/architecture.md"
                found[module] = number
    return found


def test_every_module_stands_on_one_floor_of_the_page():
    assert sorted(set(module_names()) - set(floor_of())) == []


def test_no_import_climbs_to_a_higher_floor():
    floor = floor_of()
    climbing = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if floor[target] > floor[module]
    ]
    assert climbing == []


@pytest.mark.parametrize(
    ("importers", "imported"),
    [
        (("attngeom.runstats", "attngeom.pipeline"), "attngeom.report"),
        (("attngeom.pipeline",), "attngeom.cli"),
    ],
)
def test_the_named_rules_hold(importers, imported):
    """The page's named rules, and its floors put them so (a reordered table cannot drop them)."""
    floor, graph = floor_of(), import_graph()
    below = [m for m in graph if m.startswith(importers)]
    assert all(floor[m] < floor[imported] for m in below)
    assert [f"{m} -> {t}" for m in below for t in graph[m] if t.startswith(imported)] == []

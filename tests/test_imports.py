"""The package's shape: no import cycle between its modules. (Modules hold one idea at whatever length it
takes: a line quota cut files by number, not by idea, and is retired; DESIGN's house rules.)

Every module of ``src/attngeom`` is parsed with ``ast`` (nothing is imported); every import counts, at
module level or inside a function, relative or absolute. ``from X import name`` is an edge to ``X.name``
where that is a module, else to ``X``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "attngeom"


def module_names(src: Path = SRC) -> dict[str, Path]:
    names = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(module: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of the package that ``module`` imports, anywhere in its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {t for t in targets if t in modules and t != module}


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = module_names(src)
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles_through_function_level_and_relative_imports(tmp_path):
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from . import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from attngeom.sub.c import g\n")
    (package / "sub" / "c.py").write_text("def g():\n    from .. import sub\n    from .a import x\n")
    assert find_cycle(import_graph(tmp_path)) == [
        "attngeom.sub.a",
        "attngeom.sub.b",
        "attngeom.sub.c",
        "attngeom.sub.a",
    ]

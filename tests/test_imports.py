"""The package's shape: no import cycle between its modules, and no private name (``_name``) imported from
one module into another. (Modules hold one idea at whatever length it takes: a line quota cut files by
number, not by idea, and is retired; a private name used across modules is the seam that says where: it
wants a public name, or the two modules are one idea. DESIGN's house rules.)

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


def imported_from(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute name of the module a ``from ... import`` statement of ``module`` (at ``path``) reads."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = node.module or ""
    if not node.level:
        return base
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(anchor + ([base] if base else []))


def imports_of(module: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of the package that ``module`` imports, anywhere in its code."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, module, path)
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {t for t in targets if t in modules and t != module}


def private_imports(module: str, path: Path, modules: set[str]) -> list[str]:
    """``module``'s uses of another package module's private names: ``from X import _name`` and
    ``X._name`` on a module it imported, as "line: X._name"."""
    tree = ast.parse(path.read_text(), str(path))
    found, imported = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {
                alias.asname or alias.name: alias.name for alias in node.names if alias.name in modules
            }
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, module, path)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    imported[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif base in modules and base != module and private(alias.name):
                    found.append(f"{node.lineno}: {base}.{alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and private(node.attr):
            target = imported.get(node.value.id)
            if target is not None and target != module:
                found.append(f"{node.lineno}: {target}.{node.attr}")
    return found


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


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


def test_no_module_imports_a_private_name_of_another():
    modules = module_names()
    found = [
        f"{path.relative_to(SRC)}:{use}"
        for name, path in modules.items()
        for use in private_imports(name, path, set(modules))
    ]
    assert not found, (
        "private names used across modules (make them public, or join the modules): " + ", ".join(found)
    )


def test_the_private_import_finder_sees_from_imports_and_attributes(tmp_path):
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("_hidden = 1\npublic = 2\n")
    (package / "b.py").write_text("from .a import _hidden, public\n")
    (package / "c.py").write_text("from . import a\n\ndef f():\n    return a._hidden + a.public\n")
    (package / "d.py").write_text(
        "import attngeom.a as alias\n_own = alias.public\n\ndef g():\n    return _own\n"
    )
    modules = module_names(tmp_path)
    found = {name: private_imports(name, path, set(modules)) for name, path in modules.items()}
    assert found == {
        "attngeom": [],
        "attngeom.a": [],
        "attngeom.b": ["1: attngeom.a._hidden"],
        "attngeom.c": ["4: attngeom.a._hidden"],
        "attngeom.d": [],
    }


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

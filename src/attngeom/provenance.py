"""Which code made a result: a hash of the package modules a part of attngeom can run (a leaf module).

A part (``scores``, ``training``) is its entry modules and every package module they import, found by
reading the sources with ``ast`` (nothing is imported, so building the workflow's DAG stays light). The
hash covers what those files mean, not their bytes or timestamps: each file's syntax tree without its
docstrings and other bare string statements (comments, blank lines and layout never reach the tree). The
records carry it, and the workflow's rules take it as a parameter, so a changed statement reruns the jobs
it can affect, while a comment, a docstring, a reformatting or a touched file reruns nothing.

A name the package resolves when it is first used (``attngeom.score``, ``attngeom.__init__``'s ``LAZY``)
is not followed. The training part relies on it: the scores a run records as it trains come through
``attngeom.score`` and carry the scoring part's hash in their rows, so the training hash covers what makes
the weights and the loss log (the loop, the model, the data, the regulariser's ``form_traces``), and a
change to the scoring code rescores trained models without training them again.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PARTS = {
    "scores": ("attngeom.cli", "attngeom.pipeline.outcome", "attngeom.pipeline.batches"),
    "training": ("attngeom.training.cli", "attngeom.training.loop", "attngeom.training.launch"),
}
"""Each part's entry modules: what rule score/score_zoo_* and rule train run."""


@functools.cache
def _modules(package_dir: Path) -> dict[str, Path]:
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = ["attngeom", *path.relative_to(package_dir).with_suffix("").parts]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports anywhere in its code, and the packages above them."""
    return _imports_cached(module, path, frozenset(modules))


@functools.cache
def _imports_cached(module: str, path: Path, modules: frozenset[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    with_parents = {".".join(name.split(".")[:i]) for name in found for i in range(1, name.count(".") + 2)}
    return {name for name in with_parents if name in modules}


def _closure(entries: set[str], modules: dict[str, Path]) -> list[str]:
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += _imports(name, modules[name], modules) - seen
    return sorted(seen)


@functools.cache
def normalised(path: Path) -> bytes:
    """The code of ``path`` as it runs: its syntax tree, less the string statements that do nothing
    (docstrings of the module, classes and functions, and the attribute docstrings beside assignments),
    dumped without line numbers."""
    tree = ast.parse(path.read_bytes(), str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [s for s in body if not _is_bare_string(s)]  # type: ignore[attr-defined]
    return ast.dump(tree).encode()


def _is_bare_string(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _digest(names: list[str], modules: dict[str, Path], head: bytes = b"") -> str:
    digest = hashlib.sha256(head)
    for name in names:
        digest.update(f"{name}\0".encode() + normalised(modules[name]) + b"\0")
    return digest.hexdigest()[:16]


def part_modules(part: str, package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The modules of ``part``: its entry modules and everything they import, sorted."""
    return _closure(set(PARTS[part]), _modules(package_dir))


@functools.cache
def code_hash(part: str, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (16 hex digits) of the names and normalised code of the modules of ``part`` ("scores",
    "training"): what the records carry."""
    return _digest(part_modules(part, package_dir), _modules(package_dir))


@functools.cache
def script_hash(script: Path, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (16 hex digits) of a rule's script and of the package modules it can run (those it
    imports, and theirs): a rule's ``code`` parameter, so the rule reruns when any of them changes."""
    modules = _modules(package_dir)
    entries = _imports("", script, modules)
    return _digest(_closure(entries, modules), modules, head=normalised(script) + b"\0")

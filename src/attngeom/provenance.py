"""Which code made a result: a hash of the package modules a part of attngeom can run (a leaf module).

A part (``scores``, ``training``) is its entry modules and every package module they import, found by
reading the sources with ``ast`` (nothing is imported, so building the workflow's DAG stays light). The
hash covers those files' bytes, not their timestamps: the records carry it, and the workflow's rules
take it as a parameter, so a changed module reruns the jobs it can affect and a touched file does not.
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


def _modules(package_dir: Path) -> dict[str, Path]:
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = ["attngeom", *path.relative_to(package_dir).with_suffix("").parts]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports anywhere in its code, and the packages above them."""
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


def part_modules(part: str, package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The modules of ``part``: its entry modules and everything they import, sorted."""
    modules = _modules(package_dir)
    seen: set[str] = set()
    todo = list(PARTS[part])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += _imports(name, modules[name], modules) - seen
    return sorted(seen)


@functools.cache
def code_hash(part: str, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (16 hex digits) of the paths and bytes of the modules of ``part`` ("scores", "training")."""
    modules = _modules(package_dir)
    digest = hashlib.sha256()
    for name in part_modules(part, package_dir):
        digest.update(f"{name}\0".encode() + modules[name].read_bytes() + b"\0")
    return digest.hexdigest()[:16]

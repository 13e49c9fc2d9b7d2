"""Which code made a result: the hash of a wing of the package, a declared set of folders and files (a leaf
module).

A wing is what decides a kind of result: ``scoring`` (where weights come from, the architecture maps with
the conformance run's ``support.json``, the score mathematics, the engine, the records), ``training`` (the
training package and the mathematics its regulariser differentiates), ``report`` (what turns records and
run logs into tables and figures) and ``random controls`` (how a random-initialised model is built). Every
file inside a wing's folders is hashed, whatever imports it; nothing outside reruns a job (the console
summary, GPU locks, the job's status file, the CLI). The hash covers what files mean, not their bytes or
timestamps: a Python file's syntax tree without its docstrings and other bare string statements
(comments, blank lines and layout never reach the tree), a data file's content. The records carry the
scoring wing's hash, a training run's folder the training wing's, and each rule of the workflow the hash
of its script and of its wings (``rule_hash``), so a changed statement or data file reruns the jobs of
its wing, while a comment, a docstring, a reformatting or a touched file reruns nothing.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
WINGS: dict[str, tuple[str, ...]] = {
    "scoring": ("sources/", "architectures/", "scores.py", "engine.py", "records.py"),
    "training": ("training/", "scores.py"),
    "report": (
        "report/",
        "runstats/",
        "tables/",
        "artifacts.py",
        "training/inits.py",
        "records.py",
        "pipeline/captions.py",
    ),
    "random controls": ("pipeline/random_models.py",),
}
"""Each wing's folders (ending in ``/``: every file below them) and files, relative to the package."""


def wing_files(wing: str, package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The files of ``wing``, sorted: its files, and every file below its folders but caches and hidden
    files (an editor's swap file). A declared path that is not there is an error: the declaration is
    stale."""
    files: set[Path] = set()
    for entry in WINGS[wing]:
        path = package_dir / entry
        if entry.endswith("/") and path.is_dir():
            files.update(p for p in path.rglob("*") if p.is_file() and _kept(p.relative_to(path)))
        elif not entry.endswith("/") and path.is_file():
            files.add(path)
        else:
            raise FileNotFoundError(f"provenance wing {wing!r} names {entry}, which {package_dir} lacks")
    return sorted(files)


def _kept(relative: Path) -> bool:
    return not any(part == "__pycache__" or part.startswith(".") for part in relative.parts) and (
        relative.suffix != ".pyc"
    )


@functools.cache
def normalised(path: Path) -> bytes:
    """The code of ``path`` as it runs: its syntax tree, less the string statements that do nothing
    (docstrings of the module, classes and functions, and the attribute docstrings beside assignments),
    dumped without line numbers and without empty fields (``dump``)."""
    tree = ast.parse(path.read_bytes(), str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [s for s in body if not _is_bare_string(s)]  # type: ignore[attr-defined]
    return dump(tree).encode()


def dump(node: object) -> str:
    """``ast.dump`` less the fields that are None or empty. A Python release may add a field to a node
    (3.12: ``type_params`` on every function and class) and ``ast.dump`` prints it even when empty, so its
    text, and a hash of it, would differ between a cluster's Python and a laptop's for the same file."""
    if isinstance(node, ast.AST):
        fields = ((name, getattr(node, name, None)) for name in node._fields)
        shown = ", ".join(
            f"{name}={dump(value)}" for name, value in fields if value is not None and value != []
        )
        return f"{type(node).__name__}({shown})"
    if isinstance(node, list):
        return f"[{', '.join(dump(item) for item in node)}]"
    return repr(node)


def _is_bare_string(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _meaning(path: Path) -> bytes:
    """A Python file's normalised code; any other file's bytes."""
    return normalised(path) if path.suffix == ".py" else path.read_bytes()


@functools.cache
def code_hash(wing: str, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (16 hex digits) of the paths and meaning of the files of ``wing`` ("scoring", "training",
    ...): what the records and a run's folder carry."""
    digest = hashlib.sha256()
    for path in wing_files(wing, package_dir):
        digest.update(f"{path.relative_to(package_dir).as_posix()}\0".encode() + _meaning(path) + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def rule_hash(script: Path, wings: tuple[str, ...], package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (16 hex digits) of a rule's script and of the wings it runs: the rule's ``code``
    parameter, so the rule reruns when the script or a file of those wings changes, and only then."""
    digest = hashlib.sha256(normalised(script) + b"\0")
    for wing in sorted(set(wings)):
        digest.update(f"{wing}\0{code_hash(wing, package_dir)}\0".encode())
    return digest.hexdigest()[:16]

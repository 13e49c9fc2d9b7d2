"""A zoo's pinned list (``config/zoo/<name>.yaml``): read and checked entry by entry, and the only kind
of file ``attngeom zoo resolve --update`` may replace.

The list is written by ``attngeom zoo resolve`` but may be edited by hand, so every value is checked
before the DAG uses it: a hand-typed ``n_params: lots`` is one line naming the entry and the key, not a
traceback from the registry.

It is YAML whose ``models:`` are one JSON mapping a line (``- {"id": ..., "revision": ...}``, JSON being
YAML's flow style): every DAG build reads the list, and a YAML parser takes 37 s over 100,000 entries
where ``json`` takes 0.2 s (benchmarks/README.md). A list edited into other YAML is read as YAML.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ..errors import InputError

SHA = re.compile(r"[0-9a-f]{40}")
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID = re.compile(rf"(?:{_PART}/)?{_PART}", re.ASCII)
"""A Hub repository id (``name`` or ``owner/name``), as the Hub allows them."""
GGUF_NAME = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.+-]*/)*[A-Za-z0-9_][A-Za-z0-9_.+-]*\.gguf", re.ASCII)
WEIGHTS = ("safetensors", "bin", "gguf", "none")
RESOLVE = "run `attngeom zoo resolve CONFIG` (in this folder) to list the models"
MODELS_KEY = "\nmodels:\n"


def _optional(kind: type, what: str):
    def check(value) -> str | None:
        return None if value is None or isinstance(value, kind) else f"must be {what} (or left out)"

    return check


def _count(value) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return None
    return "must be a whole number ≥ 0 (or left out)"


def _repo_id(value) -> str | None:
    if isinstance(value, str) and REPO_ID.fullmatch(value) and ".." not in value and "--" not in value:
        return None
    return "must be a Hub id such as owner/name"


def _revision(value) -> str | None:
    return None if isinstance(value, str) and SHA.fullmatch(value) else "must be a 40-digit commit sha"


def _weights(value) -> str | None:
    return None if value is None or value in WEIGHTS else f"must be one of {', '.join(WEIGHTS)}"


def _file(value) -> str | None:
    if value is None or (
        isinstance(value, str) and GGUF_NAME.fullmatch(value) and ".." not in value.split("/")
    ):
        return None
    return "must be the repository's .gguf file name (a relative path without '..')"


def _gated(value) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


CHECKS = {
    "id": _repo_id,
    "revision": _revision,
    "model_type": _optional(str, "a model_type name such as bert"),
    "weights": _weights,
    "file": _file,
    "pipeline_tag": _optional(str, "a pipeline tag such as text-generation"),
    "library": _optional(str, "a library name such as transformers"),
    "downloads": _count,
    "n_params": _count,
    "gated": _gated,
}
"""Each key of a pinned entry and its check (None: fine; else what is wrong with the value)."""
REQUIRED = ("id", "revision")


def check_entry(where: str, index: int, model) -> dict:
    """``model`` (entry ``index`` of the list ``where``) if every key is known and its value fits."""
    if not isinstance(model, dict):
        raise InputError(
            f"{where}: models[{index}] is {model!r}, not a mapping of id, revision, ...; {RESOLVE}"
        )
    name = _name(model.get("id"), index)
    for key in model:
        if key not in CHECKS:
            raise InputError(f"{where}: {name}: unknown key {key!r}; known: {', '.join(CHECKS)}")
    for key in REQUIRED:
        if key not in model:
            raise InputError(f"{where}: {name}: no {key!r}; {RESOLVE} again")
    for key, value in model.items():
        problem = CHECKS[key](value)
        if problem:
            raise InputError(f"{where}: {name}: {key}: {_short(value)} {problem}")
    return model


def _name(repo_id, index: int) -> str:
    """How an entry is named in a message: its id as written, quoted where it would break the line
    (a newline or another unprintable character), else its place in the list."""
    if not isinstance(repo_id, str):
        return f"models[{index}]"
    return repo_id if repo_id.isprintable() else _short(repo_id)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_list(name: str, path: Path, query: dict) -> list[dict]:
    """The models of zoo ``name``'s pinned list ``path``, checked: the file exists, was resolved for
    ``query``, and every entry holds known keys with values of their kind (each id once, pinned to a
    commit sha)."""
    where = f"config: zoo {name!r}: {path}"
    if not path.is_file():
        raise InputError(f"config: zoo {name!r}: no pinned list {path}; {RESOLVE}")
    document = _load(path, where)
    if not isinstance(document, dict) or not isinstance(document.get("models"), list):
        raise InputError(f"{where} holds no `models:` list; {RESOLVE}")
    if document.get("query") != query:
        pinned_query = document.get("query") if isinstance(document.get("query"), dict) else {}
        changed = sorted(
            str(key) for key in set(query) | set(pinned_query) if query.get(key) != pinned_query.get(key)
        )
        raise InputError(
            f"{where} was resolved for another query (differs in {', '.join(changed) or 'query'}); run "
            "`attngeom zoo resolve CONFIG --update` to list it again"
        )
    models = [check_entry(where, i, model) for i, model in enumerate(document["models"])]
    seen: set[str] = set()
    for model in models:
        if model["id"] in seen:
            raise InputError(f"{where}: {model['id']} is listed twice; remove one entry")
        seen.add(model["id"])
    return models


def list_text(head: dict, models: list[dict]) -> str:
    """A pinned list's YAML: ``head`` (name, query, ...) as YAML, then ``models:``, one JSON line each."""
    lines = "".join(f"- {json.dumps(model)}\n" for model in models)
    body = yaml.safe_dump(head, sort_keys=False, default_flow_style=None, width=1000)
    return body + (f"models:\n{lines}" if models else "models: []\n")


def parse_list(text: str):
    """The document of a pinned list's ``text``: as ``list_text`` wrote it, its model lines read as JSON;
    otherwise (a list edited into other YAML) the whole text as YAML."""
    head, found, tail = text.partition(MODELS_KEY)
    lines = tail.splitlines()
    if found and all(line.startswith("- {") for line in lines):
        try:
            models = [json.loads(line[2:]) for line in lines]
            document = yaml.safe_load(head + "\n")
        except (json.JSONDecodeError, yaml.YAMLError):
            pass
        else:
            if isinstance(document, dict) and "models" not in document:
                return {**document, "models": models}
    return yaml.safe_load(text)


def _load(path: Path, where: str):
    try:
        return parse_list(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"{where} is not YAML ({first}); {RESOLVE}") from None
    except OSError as err:
        raise InputError(f"{where}: {err.strerror}") from None


def check_target(pinned: Path, config: Path) -> None:
    """``pinned`` may be (re)written by ``zoo resolve``: it is not the config, and it does not exist or
    holds a pinned list (``name``, ``query`` and ``models``), so a mistyped ``pinned:`` cannot replace
    another file."""
    if pinned.resolve() == config.resolve() or (
        pinned.exists() and config.exists() and pinned.samefile(config)
    ):
        raise InputError(
            f"zoo: pinned: {pinned} is the config itself; name another file, such as config/zoo/<name>.yaml"
        )
    if not pinned.exists():
        return
    if not pinned.is_file():
        raise InputError(
            f"zoo: pinned: {pinned} is not a file; name a pinned list such as config/zoo/<name>.yaml"
        )
    try:
        document = parse_list(pinned.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError, OSError):
        document = None
    if not isinstance(document, dict) or not {"name", "query", "models"} <= set(document):
        raise InputError(
            f"zoo: pinned: {pinned} exists and is not a pinned list written by `attngeom zoo resolve`; "
            "name another file or move it away"
        )

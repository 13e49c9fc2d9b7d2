"""A misspelt key of a workflow config, found before the JSON schema's own report (hundreds of lines).

The schema (workflow/schemas/config.schema.yaml) closes every mapping; this walks the config beside it
and names the first key the schema does not know, with the nearest key it does (``difflib``).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import yaml


def _load(path: str | os.PathLike) -> dict:
    return yaml.safe_load(Path(path).read_text())


def _resolve(schema: dict, root: dict, folder: Path) -> dict:
    """``schema`` with its ``$ref`` (to ``#/$defs/...`` or to a file beside it) merged in."""
    ref = schema.get("$ref")
    if ref is None:
        return schema
    if ref.startswith("#/"):
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
    else:
        target = _resolve(_load(folder / ref), root, folder)
    merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    merged["properties"] = {**target.get("properties", {}), **schema.get("properties", {})}
    return merged


def _closed(schema: dict) -> bool:
    return schema.get("additionalProperties") is False or schema.get("unevaluatedProperties") is False


def _walk(value: object, schema: dict, root: dict, folder: Path, where: str) -> str | None:
    schema = _resolve(schema, root, folder)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            name = f" ({item['id']})" if isinstance(item, dict) and isinstance(item.get("id"), str) else ""
            if problem := _walk(item, schema["items"], root, folder, f"{where}[{index}]{name}"):
                return problem
    if not isinstance(value, dict):
        return None
    known = schema.get("properties", {})
    for key, item in value.items():
        if key in known:
            if problem := _walk(item, known[key], root, folder, f"{where}.{key}" if where else str(key)):
                return problem
        elif _closed(schema) and known:
            near = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}?" if near else f"valid keys: {', '.join(known)}"
            place = f"config: {where}:" if where else "config:"
            return f"{place} unknown key {key!r} ({hint}); config/README.md explains every key"
    return None


def misspelt_key(config: dict, schema_path: str | os.PathLike) -> str | None:
    """One line naming the first key of ``config`` that the schema at ``schema_path`` does not allow, and
    the nearest key it does; None when every key is known."""
    schema = _load(schema_path)
    return _walk(config, schema, schema, Path(schema_path).parent, "")

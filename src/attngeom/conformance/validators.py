"""Tiny entries repaired by what a config's own validator says is wrong with them.

A config class checks its entries (``validate_architecture``) and says, in its error, which value it
needs: ``x must be 0, got 256`` (Gemma 4's assistant), ``requires x=1`` (Qwen4-Exp's indexer),
``x must equal y + z`` (Dots 3's sliding head width), ``x must match y``, ``missing required fields: [x, y]``. Each such
message names the entry and its value (or the entries it is made of), so the repair follows the message,
not the model type."""

from __future__ import annotations

import re
from typing import Any

from .relations import tiny_value

MUST_BE = re.compile(r"\b(\w+) must be (-?\d+|True|False), got\b")
REQUIRES = re.compile(r"\brequires (\w+)=(-?\d+|True|False)\b")
MUST_EQUAL_SUM = re.compile(r"\b(\w+) must equal (\w+) \+ (\w+)$", re.MULTILINE)
MUST_MATCH = re.compile(r"(?<!\+ )\b(\w+) must (?:match|equal) (\w+)$", re.MULTILINE)  # not a sum's last term
MISSING = re.compile(r"missing required fields: \[([^\]]*)\]")


def repaired(entries: dict[str, Any], message: str) -> dict[str, Any] | None:
    """``entries`` changed as ``message`` (a validator's error) asks, or None when it asks nothing this
    module reads (or nothing would change)."""
    out = entries
    for found in (*MUST_BE.finditer(message), *REQUIRES.finditer(message)):
        out = _set(out, found[1], _literal(found[2]))
    for found in MUST_EQUAL_SUM.finditer(message):
        holder = _holder(out, found[2])  # the sum is set where its parts are
        parts = [holder.get(found[2]), holder.get(found[3])] if holder is not None else []
        if parts and all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            out = _set(out, found[1], sum(parts), holder)
    for found in MUST_MATCH.finditer(message):
        holder = _holder(out, found[2], found[1])
        if holder is not None:
            out = _set(out, found[1], holder[found[2]], holder)
    for found in MISSING.finditer(message):
        for name in re.findall(r"\w+", found[1]):
            if (value := tiny_value(name)) is not None:
                out = _set(out, name, value)
    return out if out != entries else None


def _literal(text: str) -> Any:
    return {"True": True, "False": False}.get(text, None) if not text.lstrip("-").isdigit() else int(text)


def _holder(entries: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    """The dict that holds ``keys``: ``entries`` itself, else its first sub-config dict that has them."""
    if all(key in entries for key in keys):
        return entries
    return next((v for v in entries.values() if isinstance(v, dict) and all(k in v for k in keys)), None)


def _set(
    entries: dict[str, Any], key: str, value: Any, holder: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``entries`` with ``key`` set in ``holder`` (default: the config itself if it has ``key``, else
    each of its sub-configs that has it)."""
    if holder is entries or (holder is None and key in entries):
        return entries | {key: value}
    return {
        k: v | {key: value} if isinstance(v, dict) and (v is holder or holder is None and key in v) else v
        for k, v in entries.items()
    }

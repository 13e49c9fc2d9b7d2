"""The table of supported model types (docs/models.md), rendered from the registry so the two cannot drift."""

from __future__ import annotations

from .base import Architecture
from .registry import REGISTRY

START = "<!-- support-table:start -->"
END = "<!-- support-table:end -->"


def _stacks(architecture: Architecture) -> str:
    named = []
    for stack in architecture.stacks:
        modality = architecture.stack_modality.get(stack)
        named.append(f"`{stack}` ({modality})" if modality else f"`{stack}`")
    return ", ".join(named)


def support_table() -> str:
    """One Markdown row per supported ``model_type``: modality, objective, stacks, notes."""
    lines = [
        "| model_type | modality | objective | stacks | notes |",
        "|---|---|---|---|---|",
    ]
    for model_type in sorted(REGISTRY):
        arch = REGISTRY[model_type]
        notes = arch.notes.replace("|", "\\|")
        lines.append(f"| `{model_type}` | {arch.modality} | {arch.objective} | {_stacks(arch)} | {notes} |")
    return "\n".join(lines)


def with_support_table(readme: str) -> str:
    """``readme`` with the section between the markers replaced by the current table; a text without
    them is not attngeom's README (``ValueError``: the command checks first and says so in one line)."""
    section = f"{START}\n{support_table()}\n{END}"
    if START not in readme or END not in readme.partition(START)[2]:
        raise ValueError(f"no {START} ... {END} section")
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return head + section + tail

"""The support table and counts of the documentation site (docs/support.md), generated from the conformance run (``support.json``) and the
registry, so the page, the run and the tables cannot drift.

Every ``model_type`` of the transformers the run used is one row: ``table`` (a hand-written map),
``discovered`` (validated against a tiny model's forward pass), ``discovered (modules)`` (some of its
stacks validated on their attention modules' own forward, where the whole tiny model's forward pass did not
run or reach them: the weaker check) or ``refused`` with its reason; model types only the registry knows
(remote-code families) are rows too.
"""

from __future__ import annotations

from .base import Architecture
from .discovery.validated import conformance
from .registry import REGISTRY

START = "<!-- support-table:start -->"
END = "<!-- support-table:end -->"
NO_ATTENTION = "no dot-product attention"
SUB_CONFIG = "a sub-config"


def _stacks(architecture: Architecture) -> str:
    named = []
    for stack in architecture.stacks:
        modality = architecture.stack_modality.get(stack)
        named.append(f"`{stack}` ({modality})" if modality else f"`{stack}`")
    return ", ".join(named)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(model_type: str, entry: dict | None) -> str:
    if model_type in REGISTRY:
        arch = REGISTRY[model_type]
        notes = arch.why + (f" ({arch.notes})" if arch.notes else "")
        return (
            f"| `{model_type}` | table | {arch.modality} | {arch.objective} | {_stacks(arch)} "
            f"| {_cell(notes)} |"
        )
    assert entry is not None
    if entry["status"] == "validated":
        causal = set(entry.get("causal_stacks", ()))  # what each stack's attention did
        stacks = ", ".join(f"`{s}` (causal)" if s in causal else f"`{s}`" for s in entry["stacks"])
        how = "discovered (modules)" if entry.get("own_forward") else "discovered"
        return (
            f"| `{model_type}` | {how} | {entry.get('modality', '')} | {entry.get('objective', '')} "
            f"| {stacks} | {_cell(entry['reason'])} |"
        )
    return f"| `{model_type}` | refused | | | | {_cell(entry['reason'])} |"


def counts() -> dict[str, int]:
    """Scored (by table or validated discovery; ``modules``: discovered types with stacks validated on
    their attention modules' own forward), with dot-product attention, and all model types."""
    entries = conformance()
    types = set(entries) | set(REGISTRY)
    scored = {t for t in types if t in REGISTRY or entries[t]["status"] == "validated"}
    without = {t for t in types - scored if entries[t]["reason"].startswith((NO_ATTENTION, SUB_CONFIG))}
    return {
        "scored": len(scored),
        "table": len(set(REGISTRY)),
        "discovered": len(scored - set(REGISTRY)),
        "modules": sum(bool(entries[t].get("own_forward")) for t in scored - set(REGISTRY)),
        "attention": len(types - without),
        "total": len(types),
    }


def summary() -> str:
    """The counts as docs/support.md states them."""
    c = counts()
    share = 100 * c["scored"] / c["attention"] if c["attention"] else 0.0
    modules = (
        f" ({c['modules']} of them with stacks validated on their attention modules' own forward, "
        "`discovered (modules)`: the whole tiny model's forward pass did not run or reach them)"
        if c["modules"]
        else ""
    )
    return (
        f"**{c['scored']} of the {c['attention']} model types with dot-product attention are scored and "
        f"validated ({share:.1f}%)**: {c['table']} by a hand-written table, {c['discovered']} discovered{modules}; "
        f"{c['total']} model types in all (those without dot-product attention, and sub-configs scored "
        "through their parent, are outside the denominator)."
    )


def support_table() -> str:
    """The counts, then one Markdown row per ``model_type``: how, modality, objective, stacks, notes."""
    entries = conformance()
    lines = [
        summary(),
        "",
        "| model_type | scored by | modality | objective | stacks | notes or reason |",
        "|---|---|---|---|---|---|",
    ]
    for model_type in sorted(set(entries) | set(REGISTRY)):
        lines.append(_row(model_type, entries.get(model_type)))
    return "\n".join(lines)


def with_support_table(page: str) -> str:
    """``page`` with the section between the markers replaced by the current table; a text without
    them is not attngeom's docs/support.md (``ValueError``: the command checks first and says so in one line)."""
    section = f"{START}\n{support_table()}\n{END}"
    if START not in page or END not in page.partition(START)[2]:
        raise ValueError(f"no {START} ... {END} section")
    head, _, rest = page.partition(START)
    _, _, tail = rest.partition(END)
    return head + section + tail

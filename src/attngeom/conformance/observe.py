"""What a tiny model's forward pass shows about each attention module besides its numbers: whether its
queries and keys read one input at the same positions (a self form, with a symmetry) or not (a cross form,
whatever the module is called), and whether the mask its attention gets is causal; from these, the kinds
of ``Observed`` and the type's objective.

q and k read one input when the key projection's input is the query projection's, value for value: the
same tokens (``SELF``); ``MERGED`` where other tokens come before or after them, in one attention over both
(T5Gemma 2's decoder adds the encoder's tokens after its own; a perceiver resampler's latents attend to the
image features and themselves): a self form over the queries' own tokens. A mask is causal when the first token sees no later one (a vision-language decoder's image tokens
may see each other); with no mask, where the call or the module says ``is_causal`` (a module that does
not say is not causal, though ``scaled_dot_product_attention`` would take it as causal).
"""

from __future__ import annotations

import torch

from ..architectures.discovery import Found
from ..architectures.observed import Observed, kind
from ..architectures.stacks import NUMBER, template

BLOCKED = -1e4
"""An additive mask entry at or below this blocks its key (transformers uses the dtype's minimum or -inf;
older families -10000)."""


SELF, MERGED, OTHER = "self", "merged", "other"
"""What the keys read: the queries' input, that and more tokens after it, or another input."""


def reading(x_q: torch.Tensor, x_k: torch.Tensor) -> str:
    """What the key projection's input ``x_k`` is to the query projection's ``x_q`` (``SELF``, ``MERGED``
    or ``OTHER``)."""
    if x_q.dim() != x_k.dim() or x_q.shape[:-2] != x_k.shape[:-2] or x_q.shape[-1] != x_k.shape[-1]:
        return OTHER
    n, m = x_q.shape[-2], x_k.shape[-2]
    if m == n:
        return SELF if torch.equal(x_k, x_q) else OTHER
    if m > n and (torch.equal(x_k[..., :n, :], x_q) or torch.equal(x_k[..., m - n :, :], x_q)):
        return MERGED
    return OTHER


def causal(module: torch.nn.Module, query: torch.Tensor, mask: torch.Tensor | None, is_causal) -> bool:
    """Whether the attention of ``query`` (…, N, d) under ``mask`` lets no token see a later one."""
    n = query.shape[-2]
    if n < 2:
        return False
    if mask is None:  # none built: causal only where the call or the module says so
        return bool(is_causal if is_causal is not None else getattr(module, "is_causal", False))
    first = mask[..., 0, 1:n] if mask.dim() >= 2 else mask[..., 1:n]
    blocked = ~first if first.dtype == torch.bool else first <= BLOCKED
    return bool(blocked.all())


def observed(
    model: torch.nn.Module, items: list[Found], records: dict[str, dict], reads: dict[str, str | None]
) -> Observed:
    """The kinds whose keys read another input, by ``reads`` (path → ``reading``; None: not seen, taken
    as another input), and the objective seen in ``records``' masks."""
    verdicts: dict[str, dict[str, list[bool]]] = {}
    for item in items:  # by template, then kind: whether each module's keys read another input
        t = template(item.path)
        kinds = verdicts.setdefault(t, {})
        kinds.setdefault(kind(t, model.get_submodule(item.path)), []).append(
            reads.get(item.path) in (OTHER, None)
        )
    cross: set[str] = set()
    self_kinds: set[str] = set()
    for t, kinds in verdicts.items():
        every = [v for votes in kinds.values() for v in votes]
        if all(every):
            cross.add(t)
        elif any(every):  # seen both ways: by kind; a kind seen both ways has no symmetry
            cross |= {k for k, votes in kinds.items() if any(votes)}
            self_kinds |= {k for k, votes in kinds.items() if not any(votes)}
    return Observed(frozenset(cross), frozenset(self_kinds), objective(items, records, reads))


def objective(items: list[Found], records: dict[str, dict], reads: dict[str, str | None]) -> str:
    """``encoder-decoder`` where the layers of a stack with causal masks read another stack's tokens too
    (a cross form beside its self-attention, or keys merged from both) and a stack is bidirectional; else
    ``autoregressive`` where a stack's masks are causal; else ``bidirectional``."""
    masks: dict[str, list[bool]] = {}  # by stack of self forms: each mask causal (not seen: not causal)
    for item in items:
        seen = records.get(item.path, {}).get("causal")
        if reads.get(item.path) in (SELF, MERGED):
            masks.setdefault(item.stack, []).append(seen is not None and bool(seen))
    causal_stacks = {s for s, flags in masks.items() if all(flags)}
    if not causal_stacks:
        return "bidirectional"
    decoder = [i for i in items if i.stack in causal_stacks and reads.get(i.path) in (SELF, MERGED)]
    lists = {_layer_list(i.path) for i in decoder}
    others = any(_layer_list(i.path) in lists for i in items if reads.get(i.path) in (OTHER, None))
    merged = any(reads.get(i.path) == MERGED for i in decoder)
    return "encoder-decoder" if (others or merged) and set(masks) - causal_stacks else "autoregressive"


def _layer_list(path: str) -> str:
    """The path before ``path``'s first number: the layer list its layer is an item of."""
    match = NUMBER.search(path)
    return path[: match.start()] if match else path

"""What a tiny model's forward pass shows about each attention module besides its numbers: whether its
queries and keys read one input at the same positions (a self form, with a symmetry) or not (a cross form,
whatever the module is called), and whether its attention is causal; from these, the kinds of ``Observed``
and the type's objective.

q and k read one input when the key projection's input is the query projection's, value for value: the
same tokens (``SELF``); ``MERGED`` where other tokens come before or after them, in one attention over both
(T5Gemma 2's decoder adds the encoder's tokens after its own; a perceiver resampler's latents attend to the
image features and themselves): a self form over the queries' own tokens. Attention is causal where
the probabilities the forward pass computed put none on a later token for the first query (a
vision-language decoder's image tokens may see each other): what the attention does, not what a mask
or an ``is_causal`` flag says it should (BridgeTower's eager attention ignores its flag; LightGlue's
modules are causal alone, but the model passes them a mask that is not).
"""

from __future__ import annotations

import torch

from ..architectures.discovery.attention import Found
from ..architectures.discovery.observed import Observed, kind
from ..architectures.discovery.stacks import NUMBER, template

BLOCKED = -1e4
"""An additive mask entry at or below this blocks its key (transformers uses the dtype's minimum or -inf;
older families -10000)."""


CLOSED = 1e-12
"""A probability at or below this is a key the query does not see (a blocked key's is exactly 0, or
e^-(10^4) with older families' additive -10000)."""
ROUNDING = 1e-5
"""Scores a family forms in float32 (GPT-Neo's, MPT's) agree with the float64 products this closely."""

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


def causal(probabilities: torch.Tensor) -> bool:
    """Whether attention probabilities (…, N, M) are causal: the first query puts no probability on a
    later one of the queries' own tokens (the first N keys), so the upper triangle over them is empty in
    its first row (image tokens after causal text may see each other further down)."""
    n = probabilities.shape[-2]
    if n < 2 or probabilities.shape[-1] < n:
        return False
    later = probabilities[..., 0, 1:n].double()
    return bool(later.abs().max() <= CLOSED)


def scoring(mask: torch.Tensor | None, kwargs: dict) -> dict[str, torch.Tensor]:
    """What one attention call does to q·k besides the form: its ``scaling`` (NaN: none given, 1/√d_h),
    whether it adds a score bias that depends on the token pair (a float mask or ``position_bias`` whose
    unblocked entries differ: T5's, Swin's relative positions, ALiBi) and whether it soft-caps the scores."""
    scaling = kwargs.get("scaling")
    biases = [t for t in (mask, kwargs.get("position_bias")) if isinstance(t, torch.Tensor)]
    return {
        "scaling": torch.tensor(float("nan") if scaling is None else float(scaling)),
        "score_bias": torch.tensor(any(t.is_floating_point() and _varies(t) for t in biases)),
        "softcap": torch.tensor(kwargs.get("softcap") is not None),
    }


def scores_scoring(q: torch.Tensor, k: torch.Tensor, scores: torch.Tensor) -> dict[str, torch.Tensor]:
    """``scoring`` of a module that forms its scores itself, from its softmax's input: scores = c·q·kᵀ + B
    (+ the mask), B a bias of the positions alone, so c is fitted on the differences between batch items
    (``scaling`` c, NaN where no single c explains them) and B is what remains over the open entries."""
    product = q.double() @ k.double().repeat_interleave(q.shape[1] // k.shape[1], 1).mT
    seen = {
        "scaling": torch.tensor(float("nan")),
        "score_bias": torch.tensor(False),
        "softcap": torch.tensor(False),
    }
    if scores.numel() != product.numel() or product.shape[0] < 2:
        return seen
    s = scores.double().reshape(product.shape)
    open_ = (s > BLOCKED).all(0)
    ds, dp = (s[1:] - s[:1])[:, open_], (product[1:] - product[:1])[:, open_]
    c = (ds * dp).sum() / (dp * dp).sum().clamp_min(1e-300)
    if ds.numel() == 0 or (ds - c * dp).abs().max() > ROUNDING * ds.abs().max().clamp_min(1e-300):
        return seen
    bias = (s - c * product)[:, open_]
    return seen | {"scaling": c, "score_bias": torch.tensor(_spread(bias, s[:, open_]))}


def _varies(bias: torch.Tensor) -> bool:
    open_ = bias[bias > BLOCKED].double()
    return _spread(open_, open_)


def _spread(values: torch.Tensor, scores: torch.Tensor) -> bool:
    """Whether ``values`` differ beyond the rounding of ``scores``."""
    return values.numel() > 1 and bool(
        values.max() - values.min() > ROUNDING * scores.abs().max().clamp_min(1)
    )


def _unscaled(record: dict) -> bool:
    """The attention function got the projections' own q and k (equal norms) and a scaling of 1."""
    scaling = record.get("scaling", torch.tensor(float("nan"))).double()
    if not torch.isclose(scaling, torch.tensor(1.0, dtype=torch.float64), rtol=1e-6):
        return False
    return all(
        f"{r}_attn" not in record  # the scores were fitted to the projections' outputs themselves
        or torch.isclose(
            record[f"{r}_attn"].double().norm(),
            record[r].double().norm(),
            rtol=_rounding(record[f"{r}_attn"]),
            atol=0,
        )
        for r in ("q", "k")
    )


def _rounding(tensor: torch.Tensor) -> float:
    """The relative difference a cast to ``tensor``'s precision can make to a norm (GPT-Neo's attention
    casts q and k to float32 before q·kᵀ; the model itself runs in float64 here)."""
    return max(1e-9, 16 * torch.finfo(tensor.dtype).eps) if tensor.is_floating_point() else 1e-9


def observed(
    model: torch.nn.Module, items: list[Found], records: dict[str, dict], reads: dict[str, str | None]
) -> Observed:
    """The kinds whose keys read another input, by ``reads`` (path → ``reading``; None: not seen, taken
    as another input), the templates whose attention calls scale, bias or cap q·k otherwise than the
    form's ``scale`` says (``scoring``, seen in the whole forward pass), and the objective seen in
    ``records``' masks."""
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
    terms: dict[str, dict[str, list[bool]]] = {"unscaled": {}, "score_bias": {}, "softcap": {}}
    for item in items:
        record = records.get(item.path, {})
        if "scaling" in record:  # seen at the interface in the whole forward pass
            for name, seen in (
                ("unscaled", _unscaled(record)),
                ("score_bias", bool(record["score_bias"])),
                ("softcap", bool(record["softcap"])),
            ):
                terms[name].setdefault(template(item.path), []).append(seen)
    return Observed(
        frozenset(cross),
        frozenset(self_kinds),
        model_objective(model, objective(items, records, reads)),
        unscaled=frozenset(t for t, votes in terms["unscaled"].items() if all(votes)),
        score_bias=frozenset(t for t, votes in terms["score_bias"].items() if any(votes)),
        softcap=frozenset(t for t, votes in terms["softcap"].items() if any(votes)),
        templates=frozenset(verdicts),
    )


def model_objective(model: torch.nn.Module, observed: str) -> str:
    """The model's objective: ``observed`` (``objective``) where its documented tasks agree
    (``documented.objective``: a dual encoder with a causal text tower is ``bidirectional``)."""
    from ..architectures.discovery import documented

    model_type = model.config.model_type
    return documented.objective(model_type, observed, documented.parent_of(model_type))


def causal_stacks(items: list[Found], records: dict[str, dict], reads: dict[str, str | None]) -> list[str]:
    """The stacks of self forms whose every module's attention was seen causal: what each stack does."""
    flags: dict[str, list[bool]] = {}
    for item in items:
        if reads.get(item.path) in (SELF, MERGED):
            seen = records.get(item.path, {}).get("causal")
            flags.setdefault(item.stack, []).append(seen is not None and bool(seen))
    return [stack for stack, seen in flags.items() if all(seen)]


def objective(items: list[Found], records: dict[str, dict], reads: dict[str, str | None]) -> str:
    """``encoder-decoder`` where the layers of a stack with causal masks read another stack's tokens too
    (a cross form beside its self-attention, or keys merged from both) and a stack is bidirectional; else
    ``autoregressive`` where a stack's masks are causal; else ``bidirectional``."""
    stacks = {item.stack for item in items if reads.get(item.path) in (SELF, MERGED)}
    causal = set(causal_stacks(items, records, reads))  # not seen: not causal
    if not causal:
        return "bidirectional"
    decoder = [i for i in items if i.stack in causal and reads.get(i.path) in (SELF, MERGED)]
    lists = {_layer_list(i.path) for i in decoder}
    others = any(_layer_list(i.path) in lists for i in items if reads.get(i.path) in (OTHER, None))
    merged = any(reads.get(i.path) == MERGED for i in decoder)
    return "encoder-decoder" if (others or merged) and stacks - causal else "autoregressive"


def _layer_list(path: str) -> str:
    """The path before ``path``'s first number: the layer list its layer is an item of."""
    match = NUMBER.search(path)
    return path[: match.start()] if match else path

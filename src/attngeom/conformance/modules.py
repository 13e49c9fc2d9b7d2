"""The fallback of the conformance check: each discovered attention module driven through its own forward.

Where the whole tiny model cannot run (its forward needs inputs a generic driver does not make: image
grids, inference sessions, boxes, ...) or never reaches a module, the module is called on its own with
random hidden states of its q projection's input width, (batch, tokens) and then (batch, 1, tokens) for a
module that folds a batch-like axis into its attention batch (SAM's point batch) (cross attention: random
key/value states of its k projection's input width), rotary position embeddings neutral (cos 1, sin 0;
the keys' own too), relative ones zero, no mask or an all-visible one, packed sequences as one
(``cu_seqlens``), a count left at 0 by default then at 1, and ``None`` for any other argument its
signature requires; the readings its signature leaves open are tried in turn and the first that runs is
kept (never one picked for agreeing), unless the attention function's q holds more values than the q
projection gave (broadcast against an argument of another shape: a wrong reading). The q and k it
computes are captured through the same projection hooks and attention interface as the whole forward
pass and compared with the same functions; a module whose forward does not run to its end is not
validated."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import islice, product

import torch

from ..architectures.discovery.attention import Found
from ..architectures.discovery.projections import inputs
from .faults import ObservationError, observing
from .interface import calls, capturing
from .masks import softmax_masks
from .neutral import float64_kept, rotary_neutralised, temperature_neutralised
from .products import as_heads, first_output, score_products, tokens_last

BATCH, LENGTH, KV_LENGTH = 2, 7, 5
KEY_VALUE = ("encoder_hidden", "key_value", "context", "memory", "cross_attention", "encoder_states")
"""Argument names (parts) that take the key/value input of a cross attention."""
KEY_VALUE_EXACT = ("inputs", "key", "value", "keys", "values", "kv", "to_tensor")
"""Exact argument names of the key/value input (CANINE names its two inputs from_tensor and to_tensor)."""
ROUTES = 64
"""Generic readings tried per module around an attention whose inputs its signature leaves open."""


def drive(
    model: torch.nn.Module, items: list[Found]
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Exception]]:
    """The records (as ``check.capture`` makes them) of the modules of ``items`` whose own forward ran,
    and the error of each one whose forward did not run with any of the generic inputs."""
    records: dict[str, dict[str, torch.Tensor]] = {}
    failures: dict[str, Exception] = {}
    with capturing(model):
        for item in items:
            module = model.get_submodule(item.path)
            errors: list[Exception] = []
            for kwargs in _calls(model, module, item):
                try:
                    records[item.path] = _run(module, item, kwargs)
                    break
                except ObservationError:
                    raise
                except Exception as err:  # noqa: BLE001 — the next generic input, else this module's reason
                    errors.append(err)
            else:  # the most ordinary input's error says most
                failures[item.path] = errors[0] if errors else TypeError("its forward takes no input")
    return records, failures


def _run(
    module: torch.nn.Module, item: Found, kwargs: dict, attention: torch.nn.Module | None = None
) -> dict[str, torch.Tensor]:
    """One call of ``module`` (the attention, else ``attention`` inside it) with ``kwargs``: the q/k
    projections' inputs and outputs, the q and k of the score product (the attention function's, else the
    module's own product) and, where the call was given no mask, whether its attention was causal (what
    the module does by itself; a mask made up here says nothing of the model's)."""
    record: dict[str, torch.Tensor] = {}
    outer, module = module, attention if attention is not None else module

    def keep(role: str):
        @observing("the projection hook")
        def hook(projection, args, output):
            if f"x_{role}" not in record:
                record[f"x_{role}"], record[role] = tokens_last(
                    projection, args[0].detach(), first_output(output).detach()
                )

        return hook

    calls.pop(id(module), None)
    with ExitStack() as stack:
        for role, name in (("q", item.q), ("k", item.k)):
            handle = module.get_submodule(item.local(name)).register_forward_hook(keep(role))
            stack.callback(handle.remove)
        stack.enter_context(rotary_neutralised([module]))
        stack.enter_context(temperature_neutralised([(module, item)]))
        products = stack.enter_context(score_products({item.path: module}, [item]))
        softmaxes = stack.enter_context(softmax_masks({item.path: module}))
        stack.enter_context(float64_kept({item.path: module}))
        with torch.no_grad():
            outer(**kwargs)
    if not {"x_q", "q", "x_k", "k"} <= set(record):
        raise RuntimeError("the module's forward did not use its q and k projections")
    # evidence of causality only without a mask, from a module that says is_causal itself: sdpa takes a
    # module without the flag as causal, which is the interface's default, not the module's (Mllama's
    # vision attention is always given a mask)
    masked = any("mask" in name and value is not None for name, value in kwargs.items())
    masked = masked or not isinstance(getattr(module, "is_causal", None), bool)
    call = calls.pop(id(module), None)  # arguments made up for a module alone say nothing of its scoring
    if call is not None:
        record["q_attn"], record["k_attn"] = call["q_attn"], call["k_attn"]
        if not masked:
            record["causal"] = call["causal"]
        if not item.latent and record["q_attn"].numel() > record["q"].numel():  # a latent q grows
            raise RuntimeError("its q was broadcast against an argument of another shape")
    elif item.path in products.found:
        q, k = products.found[item.path]
        record["q_attn"], record["k_attn"] = as_heads(q, item.n_heads), as_heads(k, item.n_kv_heads)
    if "causal" not in record and not masked and item.path in softmaxes.causal:
        record["causal"] = torch.tensor(softmaxes.causal[item.path])
    return record


def reading_as_called(model: torch.nn.Module, item: Found) -> str | None:
    """What the module's keys read beside its queries' input (``observe.reading``) as its callers call it,
    where its own signature leaves that open (key/value states it may be given or not): seen by calling
    the outermost module around it whose forward runs on generic inputs, every key/value argument given
    states of its own; None where none runs and reaches it."""
    from .observe import reading

    parts = item.path.split(".")
    with capturing(model):
        for depth in range(1, len(parts)):
            outer = model.get_submodule(".".join(parts[:depth]))
            if isinstance(outer, (torch.nn.ModuleList, torch.nn.ModuleDict)):
                continue
            for kwargs in islice(_calls(model, outer, item, route=True), ROUTES):
                try:
                    record = _run(outer, item, kwargs, model.get_submodule(item.path))
                except ObservationError:
                    raise
                except Exception:  # noqa: BLE001 — the next reading, else the next module inside
                    continue
                return reading(record["x_q"], record["x_k"])
    return None


def takes_states(module: torch.nn.Module) -> bool:
    """Whether ``module``'s forward takes key/value states beside its first input."""
    params = list(inspect.signature(module.forward).parameters.values())[1:]
    return any(_kind(p) == "states" for p in params)


def _calls(
    model: torch.nn.Module, module: torch.nn.Module, item: Found, route: bool = False
) -> Iterator[dict]:
    """Keyword arguments to try in turn: each generic reading of the module's signature (the most
    ordinary first), as the product of the choices its arguments leave open; ``route``: for a module
    around the attention, every key/value argument given states and every embedding it must be given
    zeros."""
    params = [
        p
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not params:
        return
    attention = model.get_submodule(item.path) if route else module
    q_in = inputs(attention.get_submodule(item.local(item.q)))
    k_in = inputs(attention.get_submodule(item.local(item.k)))
    cross = route or item.cross or q_in != k_in
    packed = any("cu_seqlens" in p.name for p in params)
    generator = torch.Generator().manual_seed(2)
    # packed tokens; else a batch, then one with a second leading axis (SAM's point batch, a 1 × N grid)
    leads = [(LENGTH,), (1, LENGTH)] if packed else [(BATCH, LENGTH), (BATCH, 1, LENGTH)]
    for lead, kv_length in product(leads, (KV_LENGTH, LENGTH) if cross else (LENGTH,)):
        hidden = torch.randn(*lead, q_in, generator=generator, dtype=torch.float64)
        kv = torch.randn(*lead[:-1], kv_length, k_in, generator=generator, dtype=torch.float64)
        rotary, relative = _rotary(model, item, lead), _relative(lead, q_in)
        options = {
            "states": [kv] if cross else [None, kv],
            "rotary": rotary + relative[1:],
            "position": relative + rotary[:-1],
            "relative": relative,
            "mask": _masks(lead, kv_length),
        }
        kinds = {_kind(p) for p in params[1:]}
        options = {kind: values for kind, values in options.items() if kind in kinds}
        # a count left at 0 by default, then 1 (EdgeTAM's ``rope_k_repeat`` divides by it)
        options |= {p.name: [_DEFAULT, 1] for p in params[1:] if type(p.default) is int and p.default == 0}
        for chosen in product(*options.values()):
            choice = dict(zip(options, chosen, strict=True))
            kwargs = {params[0].name: hidden}
            for p in params[1:]:
                value = _argument(p, choice, lead)
                if route and value is None and "embedding" in p.name:  # added to an input (SAM's point
                    value = torch.zeros_like(kv if p.name.startswith("key") else hidden)  # embeddings)
                if value is not _DEFAULT:
                    kwargs[p.name] = value
            yield kwargs


_DEFAULT = object()


def _kind(p: inspect.Parameter) -> str:
    """Which generic input argument ``p`` takes."""
    name = p.name
    if (
        name == "position_embeddings"
        or name.startswith("position_embeddings_")
        and "tuple" in str(p.annotation)
    ):
        # rotary (cos, sin) or relative, whatever the annotation says; the keys' own (EdgeTAM's ``_k``)
        return "rotary" if p.annotation is p.empty or "tuple" in str(p.annotation) else "position"
    if "pos" in name and "emb" in name:
        return "relative"
    if "mask" in name:
        return "mask"
    if name in KEY_VALUE_EXACT or any(part in name for part in KEY_VALUE):
        return "states"
    return name


def _argument(p: inspect.Parameter, choice: dict, lead: tuple[int, ...]):
    """The generic value of argument ``p`` (``_DEFAULT``: leave the module's default)."""
    kind, required = _kind(p), p.default is inspect.Parameter.empty
    length = lead[-1]
    if kind in choice:
        return choice[kind] if (choice[kind] is not None or required) else _DEFAULT
    if kind in ("position_ids", "cache_position"):
        positions = torch.arange(length)
        return positions if kind == "cache_position" or len(lead) == 1 else positions.expand(*lead)
    if "cu_seqlens" in kind:
        return torch.tensor([0, length], dtype=torch.int32)
    if "max_seqlen" in kind:
        return length
    return None if required else _DEFAULT


def _rotary(model: torch.nn.Module, item: Found, lead: tuple[int, ...]) -> list:
    """Neutral rotary embeddings (cos 1, sin 0) as wide as the head, as its rotary part, as half of it,
    per sequence or for all; then none."""
    config = getattr(model, "config", None)
    factor = getattr(config, "partial_rotary_factor", None) if config is not None else None
    widths = [item.head_dim, int(item.head_dim * factor) if factor else None, item.head_dim // 2]
    leads = dict.fromkeys([lead, lead[-1:]])  # batched, or one for the whole batch
    shapes = [(*at, w) for w in dict.fromkeys(w for w in widths if w) for at in leads]
    return [(torch.ones(s, dtype=torch.float64), torch.zeros(s, dtype=torch.float64)) for s in shapes] + [
        None
    ]


def _relative(lead: tuple[int, ...], width: int) -> list[torch.Tensor | None]:
    """None, then zero relative position embeddings (their score term is no part of q and k) for the
    2N - 1 relative offsets, then for the N positions."""
    *batch, length = lead
    return [None] + [torch.zeros(*batch, n, width, dtype=torch.float64) for n in (2 * length - 1, length)]


def _masks(lead: tuple[int, ...], kv_length: int) -> list[torch.Tensor | None]:
    """No mask, then an all-visible one: additive 4-D, boolean 4-D, 2-D padding (integer, boolean)."""
    if len(lead) != 2:
        return [None]
    batch, length = lead
    return [
        None,
        torch.zeros(batch, 1, length, kv_length, dtype=torch.float64),
        torch.ones(batch, 1, length, kv_length, dtype=torch.bool),
        torch.ones(batch, kv_length, dtype=torch.long),
        torch.ones(batch, kv_length, dtype=torch.bool),
    ]

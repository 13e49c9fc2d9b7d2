"""Stacks and layer indices of discovered attention modules, unique by construction.

Attention modules whose paths differ only in numbers share a template (``encoder.layer.{}.attention``);
a template's modules whose keys read another input than their queries (``Observed``) form a stack apart,
named with ``_cross``. A stack is named by the words of its template before the first number (where there
is one template: ``encoder`` or ``decoder`` by the objective the run saw, as the tables name them, else
``self``), made distinct by the parts that tell the templates apart and then by a count. A module's
layer is the one number that varies between its template's modules (T5's ``block.{i}.layer.0``: i); where
several vary (stages and their blocks, Emu3's ``down.{i}.attn.{j}``), their tuples in order are counted.
So no two layers share a (stack, layer) key. A layer list that holds attention in some items only has its
other items recorded as unscored layers (``gaps``) of a stack whose layers are items of that list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

NUMBER = re.compile(r"\.(\d+)(?=\.|$)")
"""A path component that is a number (an item of a layer list)."""
PLAIN = ("layers", "layer", "blocks", "block", "h", "model")
"""Path words that say nothing about which stack a module is in."""


def template(path: str) -> str:
    """``path`` with every numeric component as ``{}``."""
    return NUMBER.sub(".{}", path)


@dataclass(frozen=True)
class Placed:
    """Where one attention module goes: its stack and layer."""

    stack: str
    layer: int


@dataclass(frozen=True)
class Gap:
    """An item of a layer list with no attention module in it: an unscored layer of ``stack``."""

    stack: str
    layer: int
    block: torch.nn.Module


LONE = {"autoregressive": "decoder", "bidirectional": "encoder", "encoder-decoder": "encoder"}
"""The name of a model's one self-attention template's stack, by its objective (else ``self``): as the
tables name it; of an encoder-decoder type, one template is its encoder's (a ``T5EncoderModel``)."""


def place(
    model: torch.nn.Module,
    paths: list[str],
    cross: list[bool],
    objective: str = "",
    causal: frozenset[str] = frozenset(),
) -> tuple[list[Placed], list[Gap], list[str]]:
    """The stack and layer of each path (``cross``: whether its keys read another input), the unscored
    items of their layer lists, and the stacks in the order of their first module. A lone stack whose
    template the run saw causal (``causal``) is a ``decoder`` whatever the model's objective (CLIP's text
    tower alone: a causal stack of a bidirectional dual encoder)."""
    templates = list(dict.fromkeys(template(p) for p in paths))
    groups = list(dict.fromkeys(zip((template(p) for p in paths), cross, strict=True)))
    lone = "decoder" if set(templates) <= causal and len(templates) == 1 else LONE.get(objective, "self")
    names = dict(zip(groups, _names(templates, groups, lone), strict=True))
    layers: dict[str, int] = {}
    for t in templates:
        members = [p for p in paths if template(p) == t]
        layers |= dict(zip(members, _indices(members), strict=True))
    placed = [Placed(names[(template(p), c)], layers[p]) for p, c in zip(paths, cross, strict=True)]
    first = {t: names[next(g for g in groups if g[0] == t)] for t in templates}
    return placed, _gaps(model, paths, templates, first, layers), list(dict.fromkeys(names.values()))


def _words(t: str) -> str:
    head = t.split(".{}", 1)[0]
    return "_".join(w for w in head.split(".") if w not in PLAIN) or "self"


def _names(templates: list[str], groups: list[tuple[str, bool]], lone: str) -> list[str]:
    """One distinct name per (template, cross) group (``lone``: the name where there is one template)."""
    if len(templates) == 1:
        names = [f"{lone}_cross" if c else lone for _, c in groups]
    else:
        names = [_words(t) + ("_cross" if c else "") for t, c in groups]
        for name in {n for n in names if names.count(n) > 1}:
            at = [i for i, n in enumerate(names) if n == name]
            for i, part in zip(at, _distinct_parts([groups[i][0] for i in at]), strict=True):
                names[i] = f"{name.removesuffix('_cross')}_{part}" + ("_cross" if groups[i][1] else "")
    distinct: list[str] = []
    for name in names:
        count, unique = 1, name
        while unique in distinct or unique in names[len(distinct) + 1 :]:
            count += 1
            unique = f"{name}_{count}"
        distinct.append(unique)
    return distinct


def _distinct_parts(templates: list[str]) -> list[str]:
    """What tells ``templates`` apart: the words of each between their common beginning and end
    (``self_attention`` of ``layers.{}.self_attention.attention``), else its last word."""
    parts = [t.split(".") for t in templates]
    start = 0
    while all(len(p) > start and p[start] == parts[0][start] for p in parts):
        start += 1
    end = 0
    while all(len(p) - end > start and p[-1 - end] == parts[0][-1 - end] for p in parts):
        end += 1
    middles = ["_".join(w for w in p[start : len(p) - end] if w not in ("{}", *PLAIN)) for p in parts]
    return [m or p[-1] for m, p in zip(middles, parts, strict=True)]


def _numbers(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in NUMBER.findall(path))


def _varying(paths: list[str]) -> list[int]:
    """The positions of the numbers that differ between ``paths`` (of one template)."""
    numbers = [_numbers(p) for p in paths]
    return [i for i in range(len(numbers[0])) if len({n[i] for n in numbers}) > 1]


def _indices(paths: list[str]) -> list[int]:
    """The layer of each path of one template: the number that varies (a lone module: its first number),
    else the rank of the varying numbers' tuple."""
    numbers = [_numbers(p) for p in paths]
    varying = _varying(paths)
    if len(varying) <= 1:
        at = varying[0] if varying else 0
        return [n[at] if n else 0 for n in numbers]
    keys = [tuple(n[i] for i in varying) for n in numbers]
    order = sorted(set(keys))
    return [order.index(key) for key in keys]


def _container(path: str, paths: list[str]) -> str | None:
    """The path of the layer list that the varying number of ``path``'s template indexes (a lone module's
    first number), where one number varies."""
    varying = _varying(paths) if len(paths) > 1 else [0]
    matches = list(NUMBER.finditer(path))
    if len(varying) != 1 or not matches:
        return None
    return path[: matches[varying[0]].start()]


def _gaps(
    model: torch.nn.Module,
    paths: list[str],
    templates: list[str],
    first: dict[str, str],
    layers: dict[str, int],
) -> list[Gap]:
    """The items of each layer list that hold no attention module: one unscored layer each, in the first
    stack of the list's first template (``first``), whose layers are all items of that list."""
    gaps: list[Gap] = []
    lists: dict[str, str] = {}  # layer list path → the stack its gaps go in
    used: dict[str, set[int]] = {}
    for t in templates:
        members = [p for p in paths if template(p) == t]
        for path in members:
            where = _container(path, members)
            if where is None or not isinstance(model.get_submodule(where), torch.nn.ModuleList):
                continue
            lists.setdefault(where, first[t])
            used.setdefault(where, set()).add(layers[path])
    for where, stack in lists.items():
        for i, block in enumerate(model.get_submodule(where)):
            if i not in used[where]:
                gaps.append(Gap(stack, i, block))
    return gaps

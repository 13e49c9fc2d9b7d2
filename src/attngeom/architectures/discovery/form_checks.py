"""What makes an attention's q·k more than the one bilinear form of its q and k projections.

A convolution over neighbouring tokens on q or k (Inkling's ``k_sconv``): q is then not a map of one
token's input. A second q/k pair whose scores are added to the first (LiLT's ``layout_query`` and
``layout_key`` over its layout stream): the scores are the sum of two forms over two inputs, and
discovery reads only one of them. Either is refused with what it is. (A pair over relative positions,
DeBERTa's ``pos_query_proj``/``pos_key_proj``, is a position term, left out as other position terms are.)
"""

from __future__ import annotations

import re

import torch

from ..base import ArchitectureError

TOKEN_MIXING = re.compile(r"^(q|k|query|key)_s?conv$")
"""A child of an attention convolving its q or k over neighbouring tokens (Inkling's ``k_sconv``)."""


def single_form(module: torch.nn.Module, q: str, k: str) -> None:
    """Raise where ``module``'s scores are not the one form of its ``q`` and ``k`` projections."""
    children = dict(module.named_children())
    mixed = [n for n in children if TOKEN_MIXING.search(n)]
    if mixed:
        raise ArchitectureError(
            f"{type(module).__name__}: q or k passes through a convolution over tokens (`{mixed[0]}`), "
            "so it is not a bilinear form of one token's input"
        )
    linear = {n for n, c in children.items() if isinstance(c, torch.nn.Linear)}
    second = sorted(
        n
        for n in linear
        if n.endswith(f"_{q}") and f"{n.removesuffix(q)}{k}" in linear and "pos" not in n.removesuffix(q)
    )
    if second:
        other = f"{second[0].removesuffix(q)}{k}"
        raise ArchitectureError(
            f"{type(module).__name__}: its scores add a second q·k form (`{second[0]}`·`{other}`, over "
            f"another input) to that of `{q}`·`{k}`; discovery reads one form, not their sum"
        )

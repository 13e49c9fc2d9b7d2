"""Where weights come from: named tensors, loaded one at a time and only when asked for.

Every source (a Hub id, a Hub GGUF file, a local directory or ``.gguf`` file, an in-memory module)
becomes a ``WeightSource``: the model's config, its tensor names and a loader. The modules import in one
direction: ``dequant`` ← ``base`` ← ``config`` (config.json) ← ``local``, ``gguf`` ← ``ranged`` (HTTP ranges) ←
``hub`` ← this one; the Hub and GGUF modules are imported only when a model needs them.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import InputError
from . import lens
from .base import WeightSource
from .local import from_directory, from_module

__all__ = ["WeightSource", "open_source"]


def open_source(
    model: str | os.PathLike | torch.nn.Module,
    *,
    revision: str | None = None,
    token: str | None = None,
    full_download: bool = False,
) -> WeightSource:
    """The weights source for a Hub id, a local directory, a ``.gguf`` file or an in-memory model.

    Hub files are read by HTTP range (only the q/k bytes); ``full_download`` downloads whole files instead.
    """
    model = lens.unwrap(model)  # an nnsight wrapper: the transformers model inside
    if lens.is_hooked_transformer(model):
        return lens.from_hooked_transformer(model)
    if isinstance(model, torch.nn.Module):
        return from_module(model)
    if not isinstance(model, (str, os.PathLike)):
        raise InputError(
            f"{model!r}: not a model; pass a Hub id, a local directory or .gguf file, a transformers model, "
            "a TransformerLens HookedTransformer or an nnsight wrapper"
        )
    text = os.fspath(model)
    if not text.strip():
        raise InputError("an empty model name; pass a Hub id, a local directory or a .gguf file")
    path = Path(text).expanduser()
    if path.is_dir():
        return from_directory(path)
    if path.exists() and not path.is_file():
        raise InputError(f"{text}: not a regular file; pass a model directory or a plain .gguf file")
    if path.is_file():
        if path.suffix == ".gguf":
            from .gguf import from_gguf

            return from_gguf(path)
        raise InputError(
            f"{text}: not a model directory or a .gguf file; pass the directory holding config.json"
        )
    from .hub import from_hub, gguf_from_hub

    if text.endswith(".gguf") and not text.startswith(("/", ".", "~")) and text.count("/") >= 2:
        return gguf_from_hub(text, revision=revision, token=token, full_download=full_download)
    if _looks_like_path(text):
        raise InputError(f"{text}: no such file or directory")
    return from_hub(text, revision=revision, token=token, full_download=full_download)


def _looks_like_path(text: str) -> bool:
    return (
        text.startswith(("/", ".", "~"))
        or text.endswith((".gguf", ".safetensors", ".bin", ".json"))
        or text.count("/") > 1
        or (os.sep != "/" and os.sep in text)
    )

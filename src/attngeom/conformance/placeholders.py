"""Placeholder tokens of a multimodal model's text: one per media embedding, where the model merges its
images or recordings into the language model's embeddings at those tokens, so that its whole forward pass
reaches every tower."""

from __future__ import annotations

import inspect
from copy import deepcopy

import torch

PLACEHOLDERS = (
    ("pixel_values", "get_image_features", ("image_token_id", "image_token_index")),
    ("input_features", "get_audio_features", ("audio_token_id", "audio_token_index")),
)
"""Media, the model's method that turns it into the language model's embeddings, and the token standing
for one of them in the text."""


def placeholders(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Token ids with one placeholder per media embedding, where the model merges media into its text
    so: the count is what the model's own ``get_*_features`` gives (on a copy without the capture's hooks)."""
    out: dict[str, torch.Tensor] = {}
    ids = inputs.get("input_ids")
    for media, getter, names in PLACEHOLDERS:
        token = next(
            (getattr(model.config, n) for n in names if isinstance(getattr(model.config, n, None), int)), None
        )
        if media not in inputs or ids is None or len(ids) != 1 or token is None or not hasattr(model, getter):
            continue
        count = _feature_count(model, getter, inputs)
        if count:
            out["input_ids"] = ids = torch.cat([ids, torch.full((1, count), token)], dim=1)
    return out


def token_types(config, ids: torch.Tensor) -> torch.Tensor:
    """0 for text, 1 for an image placeholder, 2 for a video one."""
    types = torch.zeros_like(ids)
    for kind, names in (
        (1, ("image_token_id", "image_token_index")),
        (2, ("video_token_id", "video_token_index")),
    ):
        token = next((getattr(config, n) for n in names if isinstance(getattr(config, n, None), int)), None)
        if token is not None:
            types[ids == token] = kind
    return types


def _feature_count(model: torch.nn.Module, getter: str, inputs: dict[str, torch.Tensor]) -> int | None:
    copy = deepcopy(model)
    for module in copy.modules():
        for hooks in (module._forward_hooks, module._forward_pre_hooks):
            hooks.clear()
    method = getattr(copy, getter)
    accepted = inspect.signature(method).parameters
    try:
        with torch.no_grad():
            output = method(**{k: v for k, v in inputs.items() if k in accepted and k != "input_ids"})
    except Exception:  # noqa: BLE001 — no count: the set goes without placeholders
        return None
    output = (
        getattr(output, "pooler_output", None)
        if not isinstance(output, (torch.Tensor, tuple, list))
        else output
    )
    parts = [output] if isinstance(output, torch.Tensor) else list(output or ())
    if not all(isinstance(p, torch.Tensor) and p.dim() >= 2 for p in parts):
        return None
    return sum(p.numel() // p.shape[-1] for p in parts)

"""Score a model: source → architecture map → factored math → records."""

from __future__ import annotations

import os

import pandas as pd
import torch
from tqdm.auto import tqdm

from .architectures import AttentionLayer, architecture_for
from .errors import InputError
from .records import to_frame
from .scores import DIRECTIONALITY_VARIANTS, GAMMA, score_layer
from .sources import WeightSource, open_source
from .version import __version__


def score(
    model: str | os.PathLike | torch.nn.Module,
    *,
    revision: str | None = None,
    token: str | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    variant: str = "excess",
    gamma: float = GAMMA,
    progress: bool = True,
    model_id: str | None = None,
    full_download: bool = False,
) -> pd.DataFrame:
    """Per-head and per-layer symmetry, directionality and norm of every attention layer of ``model``.

    ``model`` is a Hugging Face id, a local model directory, a ``.gguf`` file, or an in-memory
    transformers model. Only the q/k tensors are read. Returns one row per (stack, layer, head) and one
    per (stack, layer) with ``head`` null; see ``attngeom.records.SCHEMA``.
    """
    if variant not in DIRECTIONALITY_VARIANTS:
        raise InputError(
            f"unknown directionality variant {variant!r}; choose one of {DIRECTIONALITY_VARIANTS}"
        )
    source = open_source(model, revision=revision, token=token, full_download=full_download)
    return score_source(
        source, device=device, dtype=dtype, variant=variant, gamma=gamma, progress=progress, model_id=model_id
    )


def score_source(
    source: WeightSource,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    variant: str = "excess",
    gamma: float = GAMMA,
    progress: bool = True,
    model_id: str | None = None,
) -> pd.DataFrame:
    """Score an opened source (see ``score``)."""
    config = source.config
    try:
        architecture = architecture_for(config)
    except InputError as err:  # the source layer reads any model type; support is decided here
        raise InputError(f"{source.description}: {err}") from err
    common = {
        "model_id": model_id or source.model_id,
        "revision": source.revision,
        "model_type": config.model_type,
        "objective": architecture.objective_of(config),
        "n_params": source.n_params,
        "variant": variant,
        "attngeom_version": __version__,
    }
    rows: list[dict] = []
    layers = architecture.layers(config, source)
    bar = tqdm(
        layers,
        total=architecture.n_layers(config),
        desc=str(common["model_id"]),
        unit="layer",
        disable=not progress,
    )
    for layer in bar:
        layer_rows = _layer_rows(layer, device, dtype, variant, gamma, source.description)
        for row in layer_rows:
            row["modality"] = architecture.modality_of(layer.stack)
        rows.extend(layer_rows)
    if not rows:
        raise InputError(f"{source.description}: the model has no attention layers to score")
    for row in rows:
        row.update(common, file_hash=source.file_hash)
    return to_frame(rows)


def _layer_rows(
    layer: AttentionLayer, device, dtype: torch.dtype, variant: str, gamma: float, description: str
) -> list[dict]:
    w_q = layer.w_q.to(device=device, dtype=dtype)
    w_k = layer.w_k.to(device=device, dtype=dtype)
    if not (torch.isfinite(w_q).all() and torch.isfinite(w_k).all()):
        raise InputError(f"{description}: {layer.stack} layer {layer.layer} has NaN or infinite q/k weights")
    per_head, per_layer = score_layer(
        w_q,
        w_k,
        layer.n_heads,
        layer.n_kv_heads,
        layer.head_dim,
        gamma=gamma,
        variant=variant,
        cross=layer.cross,
    )
    shared = {
        "stack": layer.stack,
        "layer": layer.layer,
        "n_heads": layer.n_heads,
        "n_kv_heads": layer.n_kv_heads,
        "head_dim": layer.head_dim,
        "hidden_size": w_q.shape[0],
        "left_out": ",".join(layer.left_out),
        "form": layer.form,
    }
    group = layer.n_heads // layer.n_kv_heads
    direction, norm = (t.double().cpu().tolist() for t in (per_head.directionality, per_head.norm))
    # A cross-attention form maps between two spaces: symmetry is undefined there (null).
    symmetry = [None] * layer.n_heads if layer.cross else per_head.symmetry.double().cpu().tolist()
    rows = [
        {
            **shared,
            "head": h,
            "kv_head": h // group,
            "symmetry": symmetry[h],
            "directionality": direction[h],
            "norm": norm[h],
        }
        for h in range(layer.n_heads)
    ]
    rows.append(
        {
            **shared,
            "head": None,
            "kv_head": None,
            "symmetry": None if layer.cross else float(per_layer.symmetry),
            "directionality": float(per_layer.directionality),
            "norm": float(per_layer.norm),
        }
    )
    return rows

"""Score a model: source → architecture map → factored math → records.

Every factor is first copied into a fresh, contiguous tensor of the requested dtype on the requested
device, in the ``nn.Linear`` weight layout (W_qᵀ: heads as blocks of rows). The arithmetic then never
sees how a source happened to lay out, align or type its buffer, so identical weights give
bit-identical scores from every source. On a GPU each layer's q and k move to the device once, in the
checkpoint's own dtype, and the scores come back once, at the end: nothing waits on the device per head,
and while it computes one layer the CPU reads the next.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import torch

from .architectures import Architecture, AttentionLayer, UnscoredLayer, architecture_for
from .errors import InputError, machine_refusal
from .files import check_output
from .provenance import code_hash
from .records import to_frame, to_table, write_scores
from .scores import DIRECTIONALITY_VARIANTS, GAMMA, score_layer
from .sources import WeightSource, open_source
from .version import __version__

if TYPE_CHECKING:
    import pandas as pd

DTYPES = {"float32": torch.float32, "float64": torch.float64}
"""The precisions the math runs in."""

Spare = dict[tuple[int, ...], list[torch.Tensor]]
"""Factor copies of a scored layer, by shape, for the next layer's (see ``_canonical``)."""


@dataclass(frozen=True)
class Settings:
    """How to score, validated where it enters (API or CLI)."""

    device: torch.device
    dtype: torch.dtype
    variant: str = "excess"
    gamma: float = GAMMA

    @classmethod
    def checked(cls, device: str | torch.device, dtype: torch.dtype, variant: str, gamma: float) -> Settings:
        if variant not in DIRECTIONALITY_VARIANTS:
            raise InputError(
                f"unknown directionality variant {variant!r}; choose one of {', '.join(DIRECTIONALITY_VARIANTS)}"
            )
        if dtype not in DTYPES.values():
            raise InputError(f"dtype {dtype}: the math runs in torch.float32 or torch.float64")
        if (
            isinstance(gamma, bool)
            or not isinstance(gamma, int | float)
            or not math.isfinite(gamma)
            or gamma < 0
        ):
            raise InputError(f"gamma {gamma!r}: the threshold must be a finite number ≥ 0 (default {GAMMA})")
        return cls(_checked_device(device), dtype, variant, float(gamma))


def _checked_device(device: str | torch.device) -> torch.device:
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise InputError(f"device {device!r} is not a torch device; use cpu or cuda") from err
    if parsed.type == "cpu":
        return parsed
    if parsed.type != "cuda":
        raise InputError(f"device {device!r} is not supported; use cpu or cuda")
    if not torch.cuda.is_available():
        raise InputError(f"device {device!r}: no CUDA device is available; use cpu")
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise InputError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return parsed


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
    per (stack, layer) with ``head`` null; see ``attngeom.records.SCHEMA``. ``model_id`` names the model
    in the records (default: the hub id, or the file or folder name of a local model).
    """
    settings = Settings.checked(device, dtype, variant, gamma)
    with open_source(model, revision=revision, token=token, full_download=full_download) as source:
        return to_frame(score_source(source, settings, progress=progress, model_id=model_id))


def local_files(model: str) -> list[Path]:
    """The model's files to protect from an output, when ``model`` is a local path."""
    path = Path(model).expanduser()
    return [path] if path.exists() else []


def score_to_file(
    model: str,
    output: str | os.PathLike | Callable[[str], Path],
    settings: Settings,
    *,
    model_id: str | None = None,
    revision: str | None = None,
    full_download: bool = False,
    progress: bool = False,
) -> tuple[pa.Table, Path]:
    """Score ``model`` (a Hub id, a local folder or a ``.gguf`` file) into a Parquet file; returns the
    records and the file: what ``attngeom score`` and a pipeline's scoring job both run.

    ``output`` is the file, checked before anything is read (never one of the model's own files), or a
    function of the model's id that gives it (several models into one folder). Input that cannot be
    scored, and the machine's refusals (a disk, a permission), raise ``InputError`` and write nothing; any
    other exception is a defect of ours.
    """
    fixed = None if callable(output) else check_output(output, protect=local_files(model))
    try:
        with open_source(model, revision=revision, full_download=full_download) as source:
            model_id = model_id or source.model_id
            path = fixed or output(model_id)
            table = score_source(source, settings, progress=progress, model_id=model_id)
    except OSError as err:
        raise InputError(machine_refusal(err)) from err
    try:
        write_scores(table, path)
    except OSError as err:
        raise InputError(f"cannot write {path}: {err.strerror or err}; choose a writable output") from err
    return table, path


def score_source(
    source: WeightSource,
    settings: Settings | None = None,
    *,
    progress: bool = True,
    model_id: str | None = None,
    architecture: Architecture | None = None,
) -> pa.Table:
    """Score an opened source (see ``score``) as an Arrow table with the records' schema; ``architecture``:
    a map to use instead of the registry's (the conformance compares a table with discovery so)."""
    settings = settings or Settings.checked("cpu", torch.float64, "excess", GAMMA)
    config = source.config
    try:
        architecture = architecture or architecture_for(config)
    except InputError as err:  # the source layer reads any model type; support is decided here
        raise InputError(f"{source.description}: {err}") from err
    n_layers = architecture.n_layers(config)
    if n_layers > len(source.names):  # every layer has its own tensors: the count is wrong
        raise InputError(
            f"{source.description}: the config declares {n_layers} layers, but the checkpoint holds only "
            f"{len(source.names)} tensors; fix the config's layer count"
        )
    model_id = model_id or source.model_id
    pending: list[tuple[dict, dict[str, torch.Tensor]] | UnscoredLayer] = []
    layers = architecture.layers(config, source)
    if progress:
        from tqdm.auto import tqdm

        layers = tqdm(layers, total=n_layers, desc=str(model_id), unit="layer")
    spare: Spare = {}  # the last layer's factor copies, reused
    try:
        for layer in layers:
            scored = isinstance(layer, AttentionLayer)
            pending.append((_fields(layer), _layer_scores(layer, settings, spare)) if scored else layer)
    except InputError as err:  # a map's error names the layer: the model is named here, its kind kept
        if str(err).startswith(source.description):
            raise
        raise type(err)(f"{source.description}: {err}") from err
    if not any(isinstance(item, tuple) for item in pending):
        raise InputError(f"{source.description}: the model has no attention layers to score")
    common = {
        "model_id": model_id,
        "revision": source.revision,
        "file_hash": source.file_hash,
        "source_dtype": source.source_dtype,
        "model_type": config.model_type,
        "objective": architecture.objective_of(config),
        "n_params": source.n_params,
        "variant": settings.variant,
        "attngeom_version": __version__,
        "code_hash": code_hash("scoring"),
    }
    rows: list[dict] = []
    for item in pending:
        if isinstance(item, UnscoredLayer):
            modality = architecture.modality_of(item.stack)
            where = {"stack": item.stack, "layer": item.layer, "modality": modality}
            rows.append({**common, **where, "left_out": "", "not_scored": item.reason})
        else:
            fields, scores = item
            shared = {**common, **fields, "modality": architecture.modality_of(fields["stack"])}
            rows.extend(
                {**shared, **row} for row in _layer_rows(fields, scores, settings, source.description)
            )
    return to_table(rows)


def _fields(layer: AttentionLayer) -> dict:
    """The record fields of a layer, all that is kept of it once scored: holding its weights until the
    rows are written would hold every layer's (tens of GB for a 400B model)."""
    return {
        "stack": layer.stack,
        "layer": layer.layer,
        "n_heads": layer.n_heads,
        "n_kv_heads": layer.n_kv_heads,
        "head_dim": layer.head_dim,
        "hidden_size": layer.w_q.shape[0],
        "left_out": ",".join(layer.left_out),
        "form": layer.form,
    }


def _canonical(w: torch.Tensor, settings: Settings, spare: Spare) -> torch.Tensor:
    """Wᵀ of an x W factor as a contiguous tensor of its own (the ``nn.Linear`` layout), on the device.

    Filled by a copy: the values are the source's, and nothing else about its buffer (strides, offset,
    alignment, dtype) can change the order of the arithmetic that follows. The buffer is a previous
    layer's of the same shape where there is one (``spare``): a fresh one costs more in page faults
    than the copy itself (23 vs 3 ms for a 2048 × 2048 float64 factor).
    """
    w = w.detach().to(settings.device)  # in the source's dtype: the fewest bytes cross to a GPU
    shape = (w.shape[1], w.shape[0])
    buffers = spare.get(shape)
    fresh = buffers.pop() if buffers else torch.empty(shape, dtype=settings.dtype, device=settings.device)
    return fresh.copy_(w.mT)


def _layer_scores(layer: AttentionLayer, settings: Settings, spare: Spare) -> dict[str, torch.Tensor]:
    """The layer's scores, left on the device: (H + 1) values each, the last one the layer form. The
    factor copies go back to ``spare`` for the next layer (on a GPU, the stream orders their reuse)."""
    q, k = _canonical(layer.w_q, settings, spare), _canonical(layer.w_k, settings, spare)
    per_head, per_layer = score_layer(
        q.mT,
        k.mT,
        layer.n_heads,
        layer.n_kv_heads,
        layer.head_dim,
        gamma=settings.gamma,
        variant=settings.variant,
        cross=layer.cross,
    )
    extremes = torch.stack([*torch.aminmax(q), *torch.aminmax(k)])  # NaN or ±inf if a weight is
    for factor in (q, k):
        spare.setdefault(tuple(factor.shape), []).append(factor)
    return {
        "symmetry": None if layer.cross else torch.cat([per_head.symmetry, per_layer.symmetry[None]]),
        "directionality": torch.cat([per_head.directionality, per_layer.directionality[None]]),
        "norm": torch.cat([per_head.norm, per_layer.norm[None]]),
        "weights_finite": torch.isfinite(extremes).all(),
    }


def _layer_rows(
    fields: dict, scores: dict[str, torch.Tensor], settings: Settings, description: str
) -> list[dict]:
    """One row per head and one for the layer (``fields`` as ``_fields`` gives them); non-finite scores
    are an error naming the layer."""
    values = {name: None if t is None else t.cpu().tolist() for name, t in scores.items()}
    if not all(
        math.isfinite(v) for name in ("symmetry", "directionality", "norm") for v in values[name] or ()
    ):
        where = f"{description}: {fields['stack']} layer {fields['layer']}"
        if not values["weights_finite"]:
            raise InputError(f"{where} has NaN or infinite q/k weights")
        name = str(settings.dtype).removeprefix("torch.")
        advice = (
            "score in float64 (--dtype float64)" if settings.dtype != torch.float64 else "rescale the weights"
        )
        raise InputError(f"{where}: the scores overflow {name} (q/k weights too large); {advice}")
    n_heads = fields["n_heads"]
    group = n_heads // fields["n_kv_heads"]
    symmetry = values["symmetry"] or [None] * (n_heads + 1)  # undefined on a two-space form
    return [
        {
            "head": None if h == n_heads else h,
            "kv_head": None if h == n_heads else h // group,
            "symmetry": symmetry[h],
            "directionality": values["directionality"][h],
            "norm": values["norm"][h],
        }
        for h in range(n_heads + 1)
    ]

"""The pipeline's results as frames, for a notebook: ``load_results("results/")`` (``summarize`` is in ``summary``).

Reads what the pipeline wrote (``aggregate/scores.parquet``, ``aggregate/models.csv``,
``tables/summary.csv``, ``heatmaps/*.npz``, ``training/<run>/``) and nothing else; neither torch nor
transformers is imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..records import read_scores
from .summary import read_table

MODEL_FACTS = ["role", "status", "reason", "family", "modality", "display"]
"""Columns of ``aggregate/models.csv`` joined onto every score row (by model id)."""


@dataclass
class Results:
    """One pipeline run: per-head and per-layer score rows (with each model's role and status), the
    model table, the summary table, the heatmap panels of Figure 2, and the training runs' scores."""

    folder: Path
    heads: pd.DataFrame
    layers: pd.DataFrame
    models: pd.DataFrame
    summary: pd.DataFrame
    heatmaps: list[tuple[str, np.ndarray | None, str]] = field(default_factory=list)
    training: pd.DataFrame | None = None
    losses: pd.DataFrame | None = None


def _required(folder: Path, name: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise InputError(
            f"{folder}: no {name}; run the pipeline first (`snakemake --profile profiles/local all`)"
        )
    return path


def heatmap_panels(folder: Path) -> list[tuple[str, np.ndarray | None, str]]:
    """Figure 2's heatmap panels (title, matrix or None, note), encoder first, as the pipeline saved them."""
    panels = []
    for role in ("encoder", "decoder"):
        path = folder / "heatmaps" / f"{role}.npz"
        if path.is_file():
            with np.load(path, allow_pickle=False) as data:
                matrix, reason, title = data["matrix"], str(data["reason"]), str(data["title"])
            panels.append(
                (title, matrix if matrix.size else None, f"not available: {reason}" if reason else "")
            )
    return panels


def training_runs(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame] | tuple[None, None]:
    """(scores, losses) of the finished training runs under ``folder/training``, or (None, None)."""
    runs = sorted(
        p.parent for p in (folder / "training").glob("*/final") if (p.parent / "scores.parquet").is_file()
    )
    if not runs:
        return None, None
    from .training_figures import load_runs  # matplotlib and the training code: only when there are runs

    return load_runs(runs)


def load_results(folder: str | os.PathLike = "results") -> Results:
    """The results folder of a pipeline run (``results:`` of its config) as frames."""
    folder = Path(folder)
    scores = read_scores(_required(folder, "aggregate/scores.parquet"))
    models = read_table(_required(folder, "aggregate/models.csv"))
    summary = read_table(_required(folder, "tables/summary.csv"))
    facts = models.set_index("model")[
        [c for c in MODEL_FACTS if c in models.columns and c not in scores.columns]
    ]
    scores = scores.join(facts, on="model_id")
    training, losses = training_runs(folder)
    return Results(
        folder=folder,
        heads=scores[scores["head"].notna()].reset_index(drop=True),
        layers=scores[scores["head"].isna()].reset_index(drop=True),
        models=models,
        summary=summary,
        heatmaps=heatmap_panels(folder),
        training=training,
        losses=losses,
    )

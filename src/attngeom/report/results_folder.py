"""The pipeline's results as frames, for a notebook: ``load_results("results/")`` (``summarize`` is in ``summary``).

Reads what the pipeline wrote (``aggregate/scores.parquet``, ``aggregate/models.csv``,
``tables/summary.csv``, ``heatmaps/*.npz``, ``training/<run>/``) and nothing else; neither torch nor
transformers is imported. Each file is checked as it is read: a damaged one (empty, cut short, another
format, columns missing, a heatmap that is not a matrix) is one ``InputError`` naming it, and a model
listed twice in ``models.csv`` or a score row written twice is refused (joined, either would double the
rows of every table made from them).
"""

from __future__ import annotations

import contextlib
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..records import read_scores
from .summary import STATUSES, read_table

MODEL_FACTS = ["role", "status", "reason", "family", "modality", "display"]
"""Columns of ``aggregate/models.csv`` joined onto every score row (by model id)."""
ROW_KEY = ["model_id", "stack", "layer", "head"]
"""What names a score row: no two rows of a results folder share it."""
READ_ERRORS = (
    pa.ArrowException,
    OSError,
    ValueError,
    KeyError,
    TypeError,
    EOFError,
    MemoryError,
    zipfile.BadZipFile,
)
"""What pyarrow, pandas, numpy and zipfile raise for a damaged or foreign file (``EmptyDataError``,
``ParserError`` and ``UnicodeDecodeError`` are ``ValueError``s)."""
AGAIN = "run the pipeline again to rewrite it"


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


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Whatever reading ``path`` raises, one ``InputError`` naming it."""
    try:
        yield
    except READ_ERRORS as err:
        text = " ".join(str(err).split())[:200] or type(err).__name__
        raise InputError(f"{path}: damaged or not the pipeline's ({text}); {AGAIN}") from None


def _with_columns(frame: pd.DataFrame, path: Path, needed: list[str]) -> pd.DataFrame:
    if missing := [column for column in needed if column not in frame.columns]:
        raise InputError(f"{path}: no column {missing[0]!r} (it has {list(frame.columns)[:12]}); {AGAIN}")
    return frame


def _once(frame: pd.DataFrame, path: Path, key: list[str], what: str) -> pd.DataFrame:
    """``frame`` if no two rows share ``key``; else the first one repeated is named."""
    repeated = frame[frame.duplicated(key, keep=False)]
    if len(repeated):
        first = ", ".join(f"{k}={repeated.iloc[0][k]!r}" for k in key)
        raise InputError(f"{path}: {what} {first} is there twice; {AGAIN}")
    return frame


MAX_PANEL_CELLS = 1 << 24
"""A heatmap panel is layers × heads of one model: a matrix declaring more cells is not one (and would be
allocated before any other check)."""


def _panel_shape(path: Path) -> tuple[int, ...]:
    """The shape ``matrix.npy`` in an npz declares, read from its header alone."""
    with zipfile.ZipFile(path) as archive, archive.open("matrix.npy") as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, _ = np.lib.format.read_array_header_1_0(member)
        else:
            shape, _, _ = np.lib.format.read_array_header_2_0(member)
    return shape


def heatmap_panels(folder: Path) -> list[tuple[str, np.ndarray | None, str]]:
    """Figure 2's heatmap panels (title, matrix or None, note), encoder first, as the pipeline saved them."""
    panels = []
    for role in ("encoder", "decoder"):
        path = folder / "heatmaps" / f"{role}.npz"
        if path.is_file():
            with _reading(path):
                if (cells := int(np.prod(_panel_shape(path), dtype=object))) > MAX_PANEL_CELLS:
                    raise ValueError(f"matrix declares {cells} cells, not a heatmap panel")
            with _reading(path), np.load(path, allow_pickle=False) as data:
                matrix, reason, title = data["matrix"], data["reason"], data["title"]
                if (
                    matrix.ndim != 2
                    or not np.issubdtype(matrix.dtype, np.number)
                    or reason.ndim
                    or title.ndim
                ):
                    raise ValueError("matrix is no 2-d array of numbers, or reason or title no string")
                reason, title = str(reason), str(title)
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

    with _reading(folder / "training"):
        for run in runs:
            with _reading(run / "scores.parquet"):
                pq.read_metadata(run / "scores.parquet")
            with _reading(run / "loss.parquet"):
                pq.read_metadata(run / "loss.parquet")
        return load_runs(runs)


def load_results(folder: str | os.PathLike = "results") -> Results:
    """The results folder of a pipeline run (``results:`` of its config) as frames."""
    folder = Path(folder)
    names = ("aggregate/scores.parquet", "aggregate/models.csv", "tables/summary.csv")
    scores_path, models_path, summary_path = (_required(folder, name) for name in names)
    with _reading(scores_path):
        scores = read_scores(scores_path)
    scores = _once(_with_columns(scores, scores_path, ROW_KEY), scores_path, ROW_KEY, "the score row")
    with _reading(models_path):
        models = read_table(models_path)
    models = _once(_with_columns(models, models_path, ["model"]), models_path, ["model"], "the model")
    if "status" in models.columns and (unknown := sorted(set(models["status"]) - set(STATUSES))):
        raise InputError(f"{models_path}: status {unknown[0]!r} is not one of {', '.join(STATUSES)}; {AGAIN}")
    with _reading(summary_path):
        summary = read_table(summary_path)
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

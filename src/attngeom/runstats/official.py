"""The authors' published training evolution (config/reference/official_training_evolution.csv): its
medians over layers, ours beside them where a run matches in depth, objective and dataset, and, where
none does, the nearest published run, named and drawn as such rather than left out."""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..training.inits import REFERENCE

if TYPE_CHECKING:  # pandas is imported where a frame is built: the workflow's DAG imports this module
    import pandas as pd

Setting = tuple[int, str, str]
"""A run's (layers, objective, dataset)."""
LAYERS = r"\((\d+) layers\)"
"""How the published file names a run's depth, in its ``model`` column."""
METRICS = ("symmetry", "directionality")
NEAREST_DATASET = "jigsaw"
"""The authors' dataset drawn when none of theirs is ours: short documents, like the offline corpus."""


def official_medians(official: pd.DataFrame) -> pd.DataFrame:
    """The authors' per-layer evolution → median over layers per (layers, objective, dataset, step)."""
    frame = official.assign(layers=official["model"].str.extract(LAYERS)[0].astype(int))
    return frame.groupby(["layers", "objective", "dataset", "step"])[list(METRICS)].median().reset_index()


def ours_medians(scores: pd.DataFrame) -> pd.DataFrame:
    """Our random-init, unregularised runs → median over layers per (run, layers, objective, dataset, step)."""
    rows = scores[scores["head"].isna() & (scores["init"] == REFERENCE) & (scores["reg_weight"] == 0)]
    keys = ["run", "layers", "objective", "dataset", "step"]
    return rows.groupby(keys)[list(METRICS)].median().reset_index()


def compare_official(scores: pd.DataFrame, official: pd.DataFrame) -> pd.DataFrame:
    """Our medians next to the authors' at the same step, for runs whose depth, objective and dataset
    match one of theirs (empty when none does: ``official_note`` names what is nearest)."""
    keys = ["layers", "objective", "dataset", "step"]
    merged = ours_medians(scores).merge(official_medians(official), on=keys, suffixes=("", "_authors"))
    return merged[["run", *keys, "symmetry", "symmetry_authors", "directionality", "directionality_authors"]]


def published_settings(path: str | os.PathLike) -> set[Setting]:
    """The (layers, objective, dataset) of every run in the authors' published evolution file, read
    without pandas (the workflow's DAG reads it for a caption)."""
    with open(path, newline="") as file:
        return {
            (int(re.search(LAYERS, row["model"])[1]), row["objective"], row["dataset"])
            for row in csv.DictReader(file)
        }


def counterparts(ours: Iterable[Setting], theirs: Iterable[Setting]) -> list[dict]:
    """For each of ``ours`` (our random-init runs' settings), the authors' run drawn beside it: the same
    one if they published it, else the same objective at the nearest depth, on our dataset if they trained
    on it, else on ``NEAREST_DATASET``. Keys: ours_layers, ours_dataset, objective, layers and dataset
    (theirs), exact."""
    theirs = set(theirs)
    rows = []
    for layers, objective, dataset in dict.fromkeys(ours):
        depths = {n for n, their_objective, _ in theirs if their_objective == objective}
        if not depths:
            continue
        depth = min(depths, key=lambda n: (abs(n - layers), n))
        at_depth = {d for n, o, d in theirs if (n, o) == (depth, objective)}
        drawn = dataset if dataset in at_depth else NEAREST_DATASET
        rows.append(
            {
                "ours_layers": layers,
                "ours_dataset": dataset,
                "objective": objective,
                "layers": depth,
                "dataset": drawn,
                "exact": depth == layers and drawn == dataset,
            }
        )
    return rows


def _settings(frame: pd.DataFrame) -> list[Setting]:
    return list(frame[["layers", "objective", "dataset"]].itertuples(index=False, name=None))


def nearest_official(ours: pd.DataFrame, official: pd.DataFrame) -> pd.DataFrame:
    """``counterparts`` of the settings of ``ours`` (our random-init runs) among the authors' runs, as a
    frame."""
    import pandas as pd

    columns = ["ours_layers", "ours_dataset", "objective", "layers", "dataset", "exact"]
    rows = counterparts(_settings(ours), _settings(official_medians(official)))
    return pd.DataFrame(rows, columns=columns)


def counterpart_note(rows: list[dict]) -> str:
    """One sentence per row of ``counterparts`` without a published counterpart, naming what is drawn
    beside it instead; empty when every one has its counterpart."""
    return " ".join(
        f"The authors published no {r['ours_layers']}-layer {r['objective']} run on {r['ours_dataset']}; the "
        f"nearest, their {r['layers']}-layer {r['objective']} on {r['dataset']}, is drawn beside ours (not "
        "compared step by step)."
        for r in rows
        if not r["exact"]
    )


def official_note(ours: pd.DataFrame, official: pd.DataFrame) -> str:
    """``counterpart_note`` of our runs ``ours`` beside the authors' ``official``."""
    return counterpart_note(counterparts(_settings(ours), _settings(official_medians(official))))

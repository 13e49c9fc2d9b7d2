"""The authors' published training evolution (config/reference/official_training_evolution.csv): its
medians over layers, ours beside them where a run matches in depth, objective and dataset, and, where
none does, the nearest published run, named and drawn as such rather than left out."""

from __future__ import annotations

import pandas as pd

METRICS = ("symmetry", "directionality")
NEAREST_DATASET = "jigsaw"
"""The authors' dataset drawn when none of theirs is ours: short documents, like the offline corpus."""


def official_medians(official: pd.DataFrame) -> pd.DataFrame:
    """The authors' per-layer evolution → median over layers per (layers, objective, dataset, step)."""
    frame = official.assign(layers=official["model"].str.extract(r"\((\d+) layers\)")[0].astype(int))
    return frame.groupby(["layers", "objective", "dataset", "step"])[list(METRICS)].median().reset_index()


def ours_medians(scores: pd.DataFrame) -> pd.DataFrame:
    """Our random-init, unregularised runs → median over layers per (run, layers, objective, dataset, step)."""
    rows = scores[scores["head"].isna() & (scores["init"] == "random") & (scores["reg_weight"] == 0)]
    keys = ["run", "layers", "objective", "dataset", "step"]
    return rows.groupby(keys)[list(METRICS)].median().reset_index()


def compare_official(scores: pd.DataFrame, official: pd.DataFrame) -> pd.DataFrame:
    """Our medians next to the authors' at the same step, for runs whose depth, objective and dataset
    match one of theirs (empty when none does: ``official_note`` names what is nearest)."""
    keys = ["layers", "objective", "dataset", "step"]
    merged = ours_medians(scores).merge(official_medians(official), on=keys, suffixes=("", "_authors"))
    return merged[["run", *keys, "symmetry", "symmetry_authors", "directionality", "directionality_authors"]]


def nearest_official(ours: pd.DataFrame, official: pd.DataFrame) -> pd.DataFrame:
    """For each (layers, objective, dataset) of ``ours`` (our random-init runs), the authors' run drawn
    beside it: the same one if they published it, else the same objective at the nearest depth, on our
    dataset if they trained on it, else on ``NEAREST_DATASET``. Columns: ours_layers, ours_dataset,
    objective, layers and dataset (theirs), exact."""
    theirs = official_medians(official)[["layers", "objective", "dataset"]].drop_duplicates()
    ours = ours[["layers", "objective", "dataset"]].drop_duplicates()
    rows = []
    for mine in ours.itertuples(index=False):
        same = theirs[theirs["objective"] == mine.objective]
        if same.empty:
            continue
        depth = min(same["layers"], key=lambda n: (abs(n - mine.layers), n))
        at_depth = same[same["layers"] == depth]
        dataset = mine.dataset if mine.dataset in set(at_depth["dataset"]) else NEAREST_DATASET
        exact = depth == mine.layers and dataset == mine.dataset
        rows.append(
            {
                "ours_layers": mine.layers,
                "ours_dataset": mine.dataset,
                "objective": mine.objective,
                "layers": depth,
                "dataset": dataset,
                "exact": exact,
            }
        )
    columns = ["ours_layers", "ours_dataset", "objective", "layers", "dataset", "exact"]
    return pd.DataFrame(rows, columns=columns)


def official_note(ours: pd.DataFrame, official: pd.DataFrame) -> str:
    """One sentence per (layers, objective, dataset) of ``ours`` without a published counterpart, naming
    what is drawn beside it instead; empty when every one has its counterpart."""
    nearest = nearest_official(ours, official)
    sentences = [
        f"The authors published no {r.ours_layers}-layer {r.objective} run on {r.ours_dataset}; the nearest, "
        f"their {r.layers}-layer {r.objective} on {r.dataset}, is drawn beside ours (not compared step by step)."
        for r in nearest[~nearest["exact"]].itertuples(index=False)
    ]
    return " ".join(sentences)

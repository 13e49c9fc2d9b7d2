"""The paper's figures as matplotlib figures, from ``load_results`` (or the tables), for a notebook.

The same drawing code as the pipeline's figure rules (``score_figures``, ``training_figures``),
returning the ``Figure`` without writing a file: save it with ``fig.savefig(...)``.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from ..artifacts import ARTIFACT, Artifact
from ..errors import InputError
from . import score_figures, training_figures
from .results_folder import Results


def _summary(data: Results | pd.DataFrame) -> pd.DataFrame:
    return data.summary if isinstance(data, Results) else data


def _inits(data: Results | pd.DataFrame) -> dict[str, str]:
    """Trained model id → its initialisation, so the models trained here get their markers."""
    from ..pipeline.training_runs import trained_model_id

    if not isinstance(data, Results) or data.training is None:
        return {}
    runs = data.training.drop_duplicates("run")
    return {trained_model_id(run): init for run, init in zip(runs["run"], runs["init"], strict=True)}


def figure_2(data: Results | pd.DataFrame) -> Figure:
    """Figure 2: median symmetry and directionality vs parameters of the pretrained encoder- and decoder-only
    language models (``figure_2`` group), the controls beside them, and the heatmaps a ``Results`` holds."""
    panels = data.heatmaps if isinstance(data, Results) else []
    return score_figures.figure_2(_summary(data), panels, None, _inits(data))


def figure_s1(data: Results | pd.DataFrame) -> Figure:
    """Figure S1: vision and audio models (``figure_s1`` group)."""
    return _groups_figure(data, ARTIFACT["figure_s1"])


def figure_s2(data: Results | pd.DataFrame) -> Figure:
    """Figure S2: encoder vs decoder stacks of encoder-decoder models (``figure_s2`` group)."""
    return _groups_figure(data, ARTIFACT["figure_s2"])


def _groups_figure(data: Results | pd.DataFrame, figure: Artifact) -> Figure:
    return score_figures.figure_groups(
        _summary(data), figure.name, figure.hue, figure.title, None, _inits(data)
    )


def evolution(data: Results | pd.DataFrame, dataset: str | None = None, layers: int | None = None) -> Figure:
    """Figure 3 / S3 / S4: scores over training of the random-init runs of one dataset and depth (default:
    the only ones there are), encoder vs decoder; ``data`` a ``Results`` with training runs or their
    scores (``Results.training``)."""
    scores = data.training if isinstance(data, Results) else data
    if scores is None or scores.empty:
        raise InputError("no training runs in these results; add a `training:` block to the config and rerun")
    groups = scores[["dataset", "layers"]].drop_duplicates()
    if dataset is not None:
        groups = groups[groups["dataset"] == dataset]
    if layers is not None:
        groups = groups[groups["layers"] == layers]
    if len(groups) != 1:
        known = ", ".join(
            f"{d}/{n}" for d, n in scores[["dataset", "layers"]].drop_duplicates().itertuples(index=False)
        )
        raise InputError(f"name one dataset and depth of the training runs (dataset=, layers=): {known}")
    dataset, layers = groups.iloc[0]
    return training_figures.evolution_figure(scores, dataset, int(layers), None)

"""What this run can show: the sentences the HTML report's captions add to each table and figure.

Worked out from the config when the DAG is built (the caption templates in workflow/report/ read them
as rule params), so every caption says, besides what the item shows and what the paper shows, whether
a run of this size can show it at all.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..artifacts import ARTIFACT
from ..runstats.official import Setting, counterpart_note, counterparts
from ..runstats.plateau import GPU_ENCODER_EXITS, SMOKE_TEST_STEPS
from ..training.inits import REFERENCE
from .registry import Model
from .training_runs import TrainingRun

if TYPE_CHECKING:  # pandas only for the comparison's caption, in its job: the DAG imports this module
    import pandas as pd

PLATEAU_EXITS = GPU_ENCODER_EXITS
PLATEAU_STEPS = SMOKE_TEST_STEPS
SMOKE_TEST = "smoke test"
PAPER_MODELS = "the dozens of language models of the paper's Tables S2/S3"
SIDES = {"bidirectional": "encoder-only", "autoregressive": "decoder-only"}


def _count(counts: Counter, noun: str) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) + f" {noun}" if counts else ""


def models_scope(models: Iterable[Model], group: str) -> str:
    """Which models of the config are in ``group`` (a table or figure), by role and kind, and whether
    that is enough to show the paper's contrast between encoder-only and decoder-only models."""
    members = [m for m in models if group in m.groups]
    pretrained = Counter(SIDES.get(m.objective, m.objective) for m in members if m.role == "pretrained")
    controls = sum(m.role == "random" for m in members)
    trained = sum(m.role == "trained" for m in members)
    if not members:
        return f"This run has no model in {group}, so this item is empty."
    parts = [_count(pretrained, "pretrained model(s)") or "no pretrained model"]
    parts += [f"{controls} random-initialised control(s)"] if controls else []
    parts += [f"{trained} model(s) trained here"] if trained else []
    text = f"This run has {'; '.join(parts)} in it."
    smoke = sum(m.role == "trained" and SMOKE_TEST in m.display for m in members)
    if smoke:
        text += (
            f" {smoke} of the trained models are marked '{SMOKE_TEST}': runs shorter than "
            f"{SMOKE_TEST_STEPS:,} steps, before a BERT-mini encoder leaves the masked-LM plateau; their "
            "scores test the machinery and say nothing about the paper's claims."
        )
    if not pretrained:
        return text + " It cannot show what the paper shows here (config/paper.yaml has the paper's models)."
    if ARTIFACT[group].holds == "language":
        both = pretrained["encoder-only"] and pretrained["decoder-only"]
        if not both:
            text += " Without both a pretrained encoder-only and a decoder-only model it cannot show the contrast."
        elif min(pretrained["encoder-only"], pretrained["decoder-only"]) < 5:
            text += (
                " Whether the encoder/decoder contrast of these few models exceeds the spread of the random "
                "controls is said under Table S2 (computed from the scores); the trend over model sizes "
                f"needs {PAPER_MODELS} (config/paper.yaml has them all)."
            )
    return text


def _runs_by_length(runs: Iterable[TrainingRun]) -> str:
    shapes = Counter(
        (r.layers, r.dataset, int(r.settings.get("steps", 200_000)), r.objective)
        for r in runs
        if not r.regularised
    )
    lengths = sorted({(layers, dataset, steps) for layers, dataset, steps, _ in shapes})
    return "; ".join(f"{layers}-layer on {dataset}, {steps:,} steps" for layers, dataset, steps in lengths)


def seeds_per_setting(runs: Iterable[TrainingRun]) -> int:
    """The fewest seeds any (dataset, depth, objective, init) of the unregularised runs has."""
    seeds: dict[tuple, set] = {}
    for r in runs:
        if not r.regularised:
            key = (r.dataset, r.layers, r.objective, r.init)
            seeds.setdefault(key, set()).add(int(r.settings.get("seed", 0)))
    return min((len(s) for s in seeds.values()), default=0)


def training_scope(runs: dict[str, TrainingRun]) -> str:
    """How long and how many the runs are, and whether that can show the paper's training effects."""
    if not runs:
        return "This run trains no model."
    steps = min(int(r.settings.get("steps", 200_000)) for r in runs.values())
    seeds = seeds_per_setting(runs.values())
    text = f"This run trains {len(runs)} model(s): {_runs_by_length(runs.values())}; {seeds} seed(s) per setting."
    if steps < PLATEAU_STEPS:
        text += (
            f" Runs of {steps:,} steps are too short to show the effect: the BERT-mini encoders of the "
            f"committed GPU runs left the masked-LM plateau at steps {PLATEAU_EXITS[0]:,}–{PLATEAU_EXITS[1]:,} "
            "(read from their logs; this run's own are in Table 1), the paper trained 200,000. Read "
            "these as a test of the machinery, not as evidence."
        )
    elif seeds < 2:
        text += " With one seed per setting no interval can be computed, so no difference can be told from seed noise."
    else:
        text += (
            " Table 1 says when each run left the masked-LM plateau (the step its loss first reached one fixed "
            "loss, the same for every run it is compared with), and its tests whether the effect shows "
            "(the t-test's p-value and the smallest effect the seeds could detect; the exact sign-flip and "
            "Wilcoxon tests, which need 6 seeds to reach p < 0.05)."
        )
    return text


def official_scope(runs: dict[str, TrainingRun], published: set[Setting]) -> str:
    """Which of our random-init runs the authors published an evolution for (``published``: their runs'
    settings, ``runstats.official.published_settings``), and what is drawn if none."""
    ours = [
        (r.layers, r.objective, r.dataset) for r in runs.values() if r.init == REFERENCE and not r.regularised
    ]
    if not ours:
        return "This run has no unregularised random-init run to compare with the authors' evolution."
    note = counterpart_note(counterparts(ours, published))
    return note or "Every run here has a published counterpart of the same setting."


def nearest_published(models: pd.DataFrame, reference: pd.DataFrame) -> str:
    """For each scored pretrained model of the run that the published per-layer scores do not hold, the
    published model of the same modality and objective nearest in parameter count, with its published
    medians: a sentence that says what the comparison could have been, for orientation only."""
    import pandas as pd

    from ..tables.formats import parameters
    from .paper_config import model_entry

    published = pd.DataFrame(
        [
            {
                **model_entry(model_id, rows),
                "symmetry": rows["symmetry"].median(),
                "dir": rows["directionality"].median(),
            }
            for model_id, rows in reference.groupby("model_id", sort=False)
        ]
    )
    ours = models[
        (models["role"] == "pretrained") & (models["status"] == "ok") & ~models["model"].isin(published["id"])
    ]
    parts = []
    for model in ours.itertuples(index=False):
        same = published[
            (published["modality"] == model.modality) & (published["objective"] == model.objective)
        ]
        same = same[same["n_params"].notna()]
        if same.empty or pd.isna(model.n_params):
            continue
        gap = (same["n_params"].astype(float).map(math.log) - math.log(float(model.n_params))).abs()
        near = same.loc[gap.idxmin()]
        parts.append(
            f"{model.display} ({parameters(model.n_params)}): {near['id']} "
            f"({parameters(near['n_params'])}; published median symmetry {near['symmetry']:.2f}, "
            f"directionality {near['dir']:.2f})"
        )
    if not parts:
        return ""
    return (
        "Nearest published models of the same kind, for orientation (other weights, so not a check): "
        + "; ".join(parts)
        + "."
    )

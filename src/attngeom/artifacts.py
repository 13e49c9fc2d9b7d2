"""The tables and figures the workflow makes, each declared once: its name, where the report shows it, its
title, the rule that makes it, its caption and what draws it; for a table or figure of scored models, which
models the paper puts in it.

Every consumer reads this table, never a list of its own: the models' ``groups:`` (the workflow's groups,
the config schema's enums, checked by ``tests/test_artifacts.py``), the paper config's groups of each kind of
model (``pipeline.paper_config``), a zoo's default groups, the trained models' groups, the report's captions
of what a run can show (``pipeline.captions``), the rule scripts and notebook functions that draw them
(their titles), and the workflow's targets (``common.smk``'s ``artifact_targets``). Plain data (no pandas or
matplotlib): building the workflow's DAG imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Artifact:
    name: str
    """Its output's file stem; for a table or figure of scored models, also the ``groups:`` entry that puts
    a model in it."""
    title: str
    """Its title (a figure drawn once per model or per group of runs heads each with what it shows)."""
    category: Literal["Tables", "Figures", "Per-head view", "Training"]
    """Where the workflow's report lists it."""
    rule: str
    """The workflow rule that makes it (a rule may make several)."""
    caption: str
    """Its caption in the report: ``workflow/report/<caption>.rst``."""
    drawer: str
    """The function that writes or draws it (module of ``attngeom`` and name)."""
    holds: Literal["language", "vision and audio", "encoder-decoder"] | None = None
    """For a table or figure of scored models: the pretrained models the paper puts in it (language models
    with one stack, vision and audio models, encoder-decoder models). None: not chosen by models."""
    hue: str | None = None
    """What a scatter figure of model groups colours by (``score_figures.figure_groups``)."""


ARTIFACTS: tuple[Artifact, ...] = (
    Artifact(
        "summary",
        "Summary of every model",
        "Tables",
        "tables",
        "summary",
        "report.summary_page.summary_html",
    ),
    Artifact(
        "table_s2",
        "Table S2: symmetry score",
        "Tables",
        "tables",
        "table_s2",
        "report.tables_s2_s3.write",
        holds="language",
    ),
    Artifact(
        "table_s3",
        "Table S3: directionality score",
        "Tables",
        "tables",
        "table_s3",
        "report.tables_s2_s3.write",
        holds="language",
    ),
    Artifact(
        "reference_comparison",
        "This run vs the paper's published per-layer scores (medians over layers, largest layer difference)",
        "Tables",
        "reference_comparison",
        "reference_comparison",
        "report.reference_comparison.comparison_display",
    ),
    Artifact(
        "figure_2",
        "Figure 2: pretrained encoder- and decoder-only language models",
        "Figures",
        "figure_2",
        "figure_2",
        "report.score_figures.figure_2",
        holds="language",
    ),
    Artifact(
        "figure_s1",
        "Vision and audio models",
        "Figures",
        "figure_s1",
        "figure_s1",
        "report.score_figures.figure_groups",
        holds="vision and audio",
        hue="objective",
    ),
    Artifact(
        "figure_s2",
        "Encoder-decoder models: encoder vs decoder stack",
        "Figures",
        "figure_s2",
        "figure_s2",
        "report.score_figures.figure_groups",
        holds="encoder-decoder",
        hue="stack",
    ),
    Artifact(
        "heads",
        "Per-head scores by layer",
        "Per-head view",
        "figure_heads",
        "figure_heads",
        "report.score_figures.heads_figure",
    ),
    Artifact(
        "table_1",
        "Table 1: final loss and speed-up of each init over its reference, over seeds",
        "Training",
        "training_tables",
        "table_1",
        "runstats.table1_display.write_table1",
    ),
    Artifact(
        "claims",
        "The paper's training claims, measured here",
        "Training",
        "training_tables",
        "claims",
        "runstats.claims.write_claims",
    ),
    Artifact(
        "official_comparison",
        "Median symmetry / directionality over layers, ours vs. the authors' published evolution",
        "Training",
        "training_tables",
        "official_comparison",
        "tables.formats.write_table",
    ),
    Artifact(
        "evolution",
        "Figures 3 / S3 / S4: symmetry and directionality over training, encoder vs decoder",
        "Training",
        "evolution_figure",
        "evolution",
        "report.training_figures.evolution_figure",
    ),
    Artifact(
        "symmetric_init",
        "Figure S5: every init arm against random init",
        "Training",
        "symmetric_init_figure",
        "symmetric_init",
        "report.training_figures.symmetric_init_figure",
    ),
    Artifact(
        "official_figure",
        "Our evolution against the authors' published evolution",
        "Training",
        "official_figure",
        "official_comparison",
        "report.training_figures.official_figure",
    ),
)
"""Every table and figure, in the order the report lists them."""

ARTIFACT: dict[str, Artifact] = {artifact.name: artifact for artifact in ARTIFACTS}
MODEL_GROUPS: tuple[str, ...] = tuple(a.name for a in ARTIFACTS if a.holds)
"""The tables and figures of scored models: what a model's ``groups:`` may name."""
RULES: tuple[str, ...] = tuple(dict.fromkeys(a.rule for a in ARTIFACTS))
"""The rules that make them, once each, in order."""
TRAINING_RULES: tuple[str, ...] = tuple(dict.fromkeys(a.rule for a in ARTIFACTS if a.category == "Training"))
"""The rules of the training part (defined, and targets, only where the config has runs)."""


def groups_holding(*kinds: str, figures_only: bool = False) -> list[str]:
    """The model groups that hold these kinds of models (``Artifact.holds``), figures only if asked."""
    return [a.name for a in ARTIFACTS if a.holds in kinds and not (figures_only and a.category != "Figures")]

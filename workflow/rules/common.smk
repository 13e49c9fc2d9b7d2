# The registry and the helpers every rule uses. Nothing here reads weights or touches the network.
import re
from pathlib import Path

import pandas as pd

from attngeom.pipeline.captions import models_scope, official_scope, training_scope
from attngeom.pipeline.registry import build_registry, heatmaps, score_resources
from attngeom.pipeline.training_runs import (
    evolution_groups,
    symmetric_groups,
    training_models,
    training_runs,
)

R = config["results"]
SCORING = config["scoring"]
ENV = "../../envs/attngeom.yaml"
AGGREGATE_MEM_MB = 2048 + 16 * len(config["models"])  # every model's rows are read at once
REFERENCE = Path(workflow.basedir, "config", "reference")


TR = f"{R}/training"
TRAINING_RUNS = training_runs(config.get("training") or {}, TR)
for _run in TRAINING_RUNS.values():  # a grid value or seed is checked like a `runs:` override
    validate(_run.settings, "../schemas/training_run.schema.yaml")
EVOLUTION_GROUPS = evolution_groups(TRAINING_RUNS)
SYMMETRIC_GROUPS = symmetric_groups(TRAINING_RUNS)

# The models of the config, plus those the training rules produce.
MODELS = build_registry(list(config["models"]) + training_models(TRAINING_RUNS, TR), R)
HEATMAPS = heatmaps(config["figures"], MODELS)

# What this run can show, for the report's captions (workflow/report/*.rst read them as params.scope).
GROUPS = ("table_s2", "table_s3", "figure_2", "figure_s1", "figure_s2")
SCOPE = {group: models_scope(MODELS.values(), group) for group in GROUPS}
TRAINING_SCOPE = training_scope(TRAINING_RUNS)
OFFICIAL_SCOPE = official_scope(TRAINING_RUNS, pd.read_csv(REFERENCE / "official_training_evolution.csv"))


wildcard_constraints:
    slug="|".join(re.escape(s) for s in MODELS),


def model_of(wildcards):
    return MODELS[wildcards.slug]


def weights_input(model):
    """Local weights as an input (a change re-runs the job); hub models have none."""
    return [] if model.kind == "hub" else [model.location]


def resource(name):
    return lambda wildcards: getattr(score_resources(model_of(wildcards), SCORING), name)


def train_resource(name):
    """A scheduler resource of the train job of run ``wildcards.run``; None (unset) if it has none."""
    return lambda wildcards: TRAINING_RUNS[wildcards.run].resources().get(name)


def score_device(wildcards):
    return "cuda" if resource("gpu")(wildcards) else "cpu"


def run_finals(keep=lambda run: True):
    """The final-model folders of the runs ``keep`` selects (the inputs of the tables and figures)."""
    return expand(rules.train.output.final, run=[name for name, run in TRAINING_RUNS.items() if keep(run)])


def trained_finals():
    """The final-model folders of every training run (none without training): the figures read each
    run's config.yaml beside it."""
    return run_finals() if TRAINING_RUNS else []


def training_targets():
    """Everything the training part makes, for `rule all` (nothing without runs)."""
    if not TRAINING_RUNS:
        return []
    targets = run_finals() + rules.training_tables.output
    if EVOLUTION_GROUPS:
        datasets, layers = zip(*EVOLUTION_GROUPS)
        targets += expand(rules.evolution_figure.output, zip, dataset=datasets, layers=layers)
        for dataset, n, objective in SYMMETRIC_GROUPS:
            targets += expand(rules.symmetric_init_figure.output, dataset=dataset, layers=n, objective=objective)
        targets += rules.official_figure.output
    return targets

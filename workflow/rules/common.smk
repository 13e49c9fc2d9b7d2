# The registry and the helpers every rule uses. Nothing here reads a model or touches the network.
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow" / "common"))
from registry import build_registry, score_resources, slug  # noqa: E402
from training_runs import (  # noqa: E402
    evolution_groups,
    symmetric_groups,
    training_models,
    training_outputs,
    training_runs,
)

R = config["results"]
SCORING = config["scoring"]
ENV = "../../envs/attngeom.yaml"
AGGREGATE_MEM_MB = 2048 + 16 * len(config["models"])  # every model's rows are read at once
REFERENCE = Path(workflow.basedir, "config", "reference")


TR = f"{R}/training"
TRAINING_RUNS = training_runs(config.get("training") or {}, TR)
EVOLUTION_GROUPS = evolution_groups(TRAINING_RUNS)
SYMMETRIC_GROUPS = symmetric_groups(TRAINING_RUNS)

# The models of the config, plus those the training rules produce.
MODELS = build_registry(list(config["models"]) + training_models(TRAINING_RUNS, TR), R)
HEATMAPS = {
    role: ref
    for role, ref in config["figures"].get("heatmap", {}).items()
    if slug(ref["model"]) in MODELS
}


wildcard_constraints:
    slug="|".join(re.escape(s) for s in MODELS) or "(?!)",


def model_of(wildcards):
    return MODELS[wildcards.slug]


def score_input(wildcards):
    """Local weights as an input (a change re-runs the job); hub models have none."""
    model = model_of(wildcards)
    return [] if model.kind == "hub" else [model.location]


def registry_rows():
    """What the aggregate rule needs to know of each model, in config order."""
    return [
        {
            "model": m.id,
            "slug": m.slug,
            "display": m.display,
            "family": m.family,
            "modality": m.modality,
            "objective": m.objective,
            "role": m.role,
            "groups": list(m.groups),
            "n_params": m.n_params,
        }
        for m in MODELS.values()
    ]


def resource(name):
    return lambda wildcards: getattr(score_resources(model_of(wildcards), SCORING), name)


def score_device(wildcards):
    return "cuda" if resource("gpu")(wildcards) else "cpu"


def all_outputs():
    tables = ["summary.csv"] + [f"{t}.{ext}" for t in ("table_s2", "table_s3", "reference_comparison") for ext in ("csv", "md", "tex")]
    figures = [f"{f}.{ext}" for f in ("figure_2", "figure_s1", "figure_s2") for ext in ("pdf", "png")]
    return (
        [f"{R}/aggregate/scores.parquet", f"{R}/tables/reference_comparison_layers.csv"]
        + [f"{R}/tables/{t}" for t in tables]
        + [f"{R}/figures/{f}" for f in figures]
        + expand(f"{R}/figures/heads/{{slug}}.{{ext}}", slug=list(MODELS), ext=("pdf", "png"))
    )


def random_settings(wildcards):
    """AutoConfig settings of a random control as --set key=value arguments."""
    model = model_of(wildcards)
    settings = {k: v for k, v in model.random.items() if k != "model_type"}
    return [arg for k, v in settings.items() for arg in ("--set", f"{k}={json.dumps(v)}")]


def heatmap_model(wildcards):
    return MODELS[slug(HEATMAPS[wildcards.role]["model"])]


def heatmap_weights(wildcards):
    model = heatmap_model(wildcards)
    return [] if model.kind == "hub" else [model.location]

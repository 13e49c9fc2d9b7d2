# The config, found and checked, and the registry and the helpers every rule uses. Nothing here reads
# weights; the network only to pin a Hub model to the commit of its main branch the first time
# (attngeom.pipeline.hub_pins).
import json
import os
import re
import sys
from importlib.util import find_spec
from pathlib import Path

from snakemake.utils import validate

# The workflow's folder (workflow/, above this file's): the workflow's own files are found from it, whether
# Snakemake started from workflow/Snakefile or from another workflow that uses it as a module (a local
# checkout: the files are read when the DAG is built).
WORKFLOW_DIR = Path(workflow.current_basedir).parent

# Building the DAG needs only attngeom's light modules (no torch, pandas or pyarrow): where Snakemake runs
# without attngeom installed (the jobs in their conda environment), this checkout's own copy is used.
if find_spec("attngeom") is None:
    sys.path.insert(0, str(WORKFLOW_DIR.parent / "src"))

# Where the conda environment (--software-deployment-method conda) installs attngeom from: Snakemake runs
# envs/attngeom.post-deploy.sh in its working directory (--directory .test, another workflow's folder when
# this is a module), which is not this checkout; the script reads this variable instead.
os.environ.update(ATTNGEOM_CHECKOUT=str(WORKFLOW_DIR.parent))

from attngeom.pipeline.config_keys import misspelt_key

# Without --configfile: config/config.yaml of the working directory, as the Snakemake workflow catalog
# expects (`snakemake --directory .test` reads .test/config/config.yaml; from the repository's root, the
# embedded default), else this checkout's embedded default. Given --configfile, only that config, not
# merged into either. (As a module, the importing workflow's `config:` is used instead.)
if not workflow.overwrite_configfiles:
    HERE_CONFIG = Path("config", "config.yaml")

    configfile: HERE_CONFIG if HERE_CONFIG.is_file() else WORKFLOW_DIR.parent / "config" / "config.yaml"


# A misspelt key is one line naming it and the nearest valid key, before the schema's long report.
if problem := misspelt_key(config, WORKFLOW_DIR / "schemas" / "config.schema.yaml"):
    print(f"attngeom: error: {problem}", file=sys.stderr)
    sys.exit(2)


validate(config, "../schemas/config.schema.yaml")

from attngeom.files import slug, write_text
from attngeom.pipeline.batches import plan_batches
from attngeom.pipeline.captions import models_scope, official_scope, training_scope
from attngeom.pipeline.conda_env import checkout_env
from attngeom.pipeline.outcome import portable
from attngeom.pipeline.hub_pins import offline, pin_models, record_pins, remember_resolved
from attngeom.pipeline.registry import (
    build_registry,
    heatmaps,
    results_folder,
    score_resources,
    weights_input,
)
from attngeom.pipeline.training_runs import (
    evolution_groups,
    symmetric_groups,
    trained_model_id,
    trained_objective,
    training_models,
    training_runs,
)
from attngeom.pipeline.zoo import Zoo, with_zoo
from attngeom.provenance import code_hash, rule_hash
from attngeom.artifacts import ARTIFACT, MODEL_GROUPS, RULES, TRAINING_RULES
from attngeom.runstats.official import published_settings

R = results_folder(config["results"])
CONDA_COPIES = Path.cwd() / ".snakemake" / "attngeom" / "conda"  # the working directory (--directory)
SCORING = config["scoring"]
# The rules' conda environment (--software-deployment-method conda): envs/attngeom.yaml as a copy naming this
# checkout, so that each clone gets an environment of its own in a shared --conda-prefix
# (attngeom.pipeline.conda_env).
ENV = str(checkout_env(WORKFLOW_DIR.parent / "envs" / "attngeom.yaml", WORKFLOW_DIR.parent, CONDA_COPIES))
# This workflow's own files (WORKFLOW_DIR: workflow/Snakefile), not an importing workflow's.
REFERENCE = WORKFLOW_DIR.parent / "config" / "reference"
SCRIPTS = WORKFLOW_DIR.parent / "scripts"


TR = f"{R}/training"
TRAINING_RUNS = training_runs(config.get("training") or {}, TR)
# Every run, a grid value or seed checked like a `runs:` override: one call, the schema read once (a call
# per run read it 144 times for config/paper.yaml, 7 of a dry run's 9 s offline).
validate([run.settings for run in TRAINING_RUNS.values()], "../schemas/training_runs.schema.yaml")
EVOLUTION_GROUPS = evolution_groups(TRAINING_RUNS)
SYMMETRIC_GROUPS = symmetric_groups(TRAINING_RUNS)

# The models of the config, those the training rules produce, and the zoo's pinned models (a model the
# config lists too is the config's). Per-head figures of zoo models only when the zoo asks for them.
ZOO = Zoo.from_config(config["zoo"]) if "zoo" in config else None
ENTRIES, ZOO_IDS = with_zoo(list(config.get("models", [])) + training_models(TRAINING_RUNS, TR), ZOO)
MODELS = build_registry(ENTRIES, R)
# Each Hub model without a `revision:` is scored at the commit of the pin file (`pins:`), resolved and
# recorded there the first time (the main process, online); `--config update_pins=True` resolves them again.
# Commits resolved and not yet recorded (a dry run) wait in a cache in Snakemake's own folder, so they are
# asked of the Hub once.
PINS = Path(config["pins"])
PIN_CACHE = Path(".snakemake", "attngeom", "resolved_pins.yaml")
_pinning = pin_models(
    MODELS,
    PINS,
    resolve_now=workflow.is_main_process and not offline(),
    update=config["update_pins"],
    cache=PIN_CACHE,
)
MODELS = _pinning.models
if _pinning.resolved:
    remember_resolved(PIN_CACHE, _pinning.resolved)
if _pinning.unresolved and workflow.is_main_process:
    _first, _why = next(iter(_pinning.unresolved.items()))
    print(
        f"attngeom: warning: {len(_pinning.unresolved)} Hub models read main unpinned this run "
        f"({_first}: {_why}); they are pinned in {PINS} once resolved",
        file=sys.stderr,
    )


onstart:
    if _pinning.pinned:
        record_pins(PINS, _pinning.pinned)
        print(f"attngeom: pinned {len(_pinning.pinned)} Hub models in {PINS}", file=sys.stderr)


HEATMAPS = heatmaps(config["figures"], MODELS)
# Every model's rows are read at once: about 400 bytes a row in memory, 0.4 MB for a 7B model's 1,056
# rows, 2 MB for a 70B model's; 4 MB a model leaves room for the copies pandas makes.
AGGREGATE_MEM_MB = 2048 + 4 * len(MODELS)
HEADS_FIGURES = [s for s, model in MODELS.items() if model.id not in ZOO_IDS or ZOO.heads_figures]
# The models scored on a GPU, each by a job of its own (rule score_gpu, which a cluster profile sends to its
# GPU partition): a zoo batches only its CPU models (rule score_zoo, a batch's records in two files).
ON_GPU = {s for s, model in MODELS.items() if score_resources(model, SCORING).gpu}
_ZOO_CPU = [s for s in map(slug, ZOO_IDS) if s not in ON_GPU]
ZOO_BATCHES = {
    batch.name: batch
    for batch in (plan_batches([MODELS[s] for s in _ZOO_CPU], SCORING, ZOO.batch_size) if ZOO else [])
}
BATCH_OF = {s: name for name, batch in ZOO_BATCHES.items() for s in batch.slugs}
SOURCED = [s for s, model in MODELS.items() if model.kind in ("hub", "path") and s not in BATCH_OF]
"""The models whose weights no job of the workflow makes: rule model_source records where they come from."""

# What this run can show, for the report's captions (workflow/report/*.rst read them as params.scope), of
# each table and figure of scored models (attngeom.artifacts).
SCOPE = {group: models_scope(MODELS.values(), group) for group in MODEL_GROUPS}
TRAINING_SCOPE = training_scope(TRAINING_RUNS)
OFFICIAL_SCOPE = official_scope(
    TRAINING_RUNS, published_settings(REFERENCE / "official_training_evolution.csv")
)


wildcard_constraints:
    slug="|".join(re.escape(s) for s in MODELS),


# The scoring code of this checkout: the rules that draw the runs' evolution take it as a param, so a change
# to it reruns them (not the training) to name the runs whose recorded scores other code computed.
SCORING_CODE = code_hash("scoring")
# The wings of the package (attngeom.provenance.WINGS) each rule's script runs: what reruns its jobs.
SCRIPT_WINGS = {
    "score_model.py": ("scoring",),
    "score_batch.py": ("scoring",),
    "train_run.py": ("training",),
    "random_model.py": ("random controls",),
    "aggregate.py": ("report",),
    "tables.py": ("report",),
    "compare_reference.py": ("report",),
    "figure_heads.py": ("report",),
    "extract_wqk.py": ("scoring", "report"),  # reads weights through the architecture maps
    "figures.py": ("report", "training"),  # reads the training runs' folders
    "training_tables.py": ("report", "training"),
    "training_figures.py": ("report", "training"),
}


def code_of(script):
    """The `code` param of every rule: its script and the wings of the package it runs, by meaning
    (attngeom.provenance.rule_hash). workflow/profiles/default leaves Snakemake's `code` rerun trigger
    out, which compares a script's timestamp; so a changed statement or data file of a rule's wings reruns
    its jobs, a touched file or a change outside them does not."""
    return rule_hash(SCRIPTS / script, SCRIPT_WINGS[script])


def shown(name):
    """Where the report shows the table or figure ``name`` and its caption (attngeom.artifacts), as
    report()'s arguments in a rule file."""
    artifact = ARTIFACT[name]
    return {"category": artifact.category, "caption": f"../report/{artifact.caption}.rst"}


def artifact_targets():
    """Every table and figure of attngeom.artifacts, the targets of the workflow's `all`: the outputs
    of the rules that make them (the per-head view of each model it draws; the training part's, when there
    are runs)."""
    targets = []
    for maker in (name for name in RULES if name not in TRAINING_RULES):
        if maker == "figure_heads":
            targets += expand(rules.figure_heads.output, slug=HEADS_FIGURES)
        else:
            targets += getattr(rules, maker).output
    return targets + training_targets()


def group_slugs(group):
    """The models of a table or figure group."""
    return [s for s, model in MODELS.items() if group in model.groups]


def group_finals(group):
    """The final-model folders of the runs whose trained model is in ``group`` (their init marks them
    in the figure); none for a figure of pretrained models, so it never waits for training."""
    trained = {MODELS[s].id for s in group_slugs(group) if MODELS[s].role == "trained"}
    return run_finals(lambda run: trained_model_id(run.name) in trained) if trained else []


def score_files(slugs, kind):
    """The ``kind`` files ("scores" or "status") holding the records of the models ``slugs``: a model's own,
    or once each, those of the zoo batches that hold the others (rule score_zoo)."""
    own = [s for s in slugs if s not in BATCH_OF]
    batches = list(dict.fromkeys(BATCH_OF[s] for s in slugs if s in BATCH_OF))
    return expand(getattr(rules.score.output, kind), slug=own) + expand(
        getattr(rules.score_zoo.output, kind), batch=batches
    )


def zoo_batch(wildcards):
    return ZOO_BATCHES[wildcards.batch]


def batch_models(field):
    """A zoo batch's models' ``field`` (id, location or revision), in the batch's order."""
    return lambda wildcards: [getattr(MODELS[s], field) or "" for s in zoo_batch(wildcards).slugs]


def model_of(wildcards):
    return MODELS[wildcards.slug]


def heads_labels(wildcards):
    """The columns of the report's per-head view, one row per model: its name, where it comes from, how it
    attends (which sets its stacks: encoder, decoder, or both)."""
    model = model_of(wildcards)
    return {"model": model.display, "role": model.role, "objective": model.objective}


def record_source(source, path, log):
    """Rule model_source's record of where a model's weights are read from, and its log line."""
    write_text(path, json.dumps(source, indent=1) + "\n")
    Path(log).write_text(f"model_source: {source['model']} read from {source['location']}\n")


def score_input(wildcards):
    """What a model's scoring job reads first: the weights a rule builds (random_model, train), local
    weights, and the record of model_source for the models no rule builds."""
    source = expand(rules.model_source.output, slug=wildcards.slug) if wildcards.slug in SOURCED else []
    return weights_input(model_of(wildcards)) + source


def resource(name):
    return lambda wildcards: getattr(score_resources(model_of(wildcards), SCORING), name)


def train_resource(name):
    """A scheduler resource of the train job of run ``wildcards.run``; None (unset) if it has none."""
    return lambda wildcards: TRAINING_RUNS[wildcards.run].resources(SLOTS_PER_GPU, GPUS_HERE).get(name)


def score_device(wildcards):
    return "cuda" if resource("gpu")(wildcards) else "cpu"


def score_group(wildcards):
    """Scoring jobs on CPU form group "score": on a cluster, profiles/slurm submits them in batches
    (group-components); a GPU job (rule score_gpu) goes alone, since the GPUs of a group's parallel jobs
    add up. (A CPU job given a GPU by --set-resources score:gpu=N goes alone too.)"""
    return None if resource("gpu")(wildcards) else "score"


def slugs_pattern(slugs):
    """A wildcard constraint matching exactly ``slugs`` (nothing, if none)."""
    return "|".join(re.escape(s) for s in slugs) or "(?!)"


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
            targets += expand(
                rules.symmetric_init_figure.output, dataset=dataset, layers=n, objective=objective
            )
        targets += rules.official_figure.output
    return targets

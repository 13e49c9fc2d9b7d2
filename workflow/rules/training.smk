# Training (issue 5): one job per run, then Table 1, Figures 3/S3/S4/S5 and the comparison with the
# authors' published evolution. Every setting of a run is `training: defaults:` overridden by the run's
# own keys (see attngeom.training.config.TrainConfig; its defaults are the paper's hyper-parameters); a
# run may also set the scheduler resources gpus, threads, mem_mb and runtime (minutes). Runs come from
# `training: runs:` (a list of {name, overrides}) and/or `training: grid:` (setting → list of values, one
# run per combination, named by its values), e.g. the paper's grid:
#
#   training:
#     defaults: {tokenizer: bert-uncased, device: cuda, compile: true, gpus: 1, runtime: 2880, mem_mb: 64000}
#     grid:
#       dataset: [wikipedia, jigsaw, red_pajama]
#       n_layers: [4, 12]
#       objective: [encoder, decoder]
#       init: [random, symmetric]
#
#   results/training/<run>/{config.yaml, loss.parquet, scores.parquet, checkpoint/, final/}
#   results/training/tables/{table_1,official_comparison}.{csv,md}
#   results/training/figures/{evolution_*,symmetric_init_*,official_comparison}.{pdf,png}
#
# A killed job resumes from its checkpoint when re-run (checkpoint/ is not a declared output, so
# Snakemake never deletes it).
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from attngeom.training.config import RESOURCE_KEYS, make_config  # noqa: E402
from attngeom.training.speedup import dataset_label  # noqa: E402

TRAINING = config.get("training") or {}
TR = f"{config.get('results', 'results')}/training"
TRAINING_REFERENCE = TRAINING.get("reference_dir", "config/reference")
TRAINING_ENV = "../../envs/attngeom.yaml"


@dataclass(frozen=True)
class TrainingRun:
    name: str
    settings: dict
    gpus: int
    threads: int
    mem_mb: int
    runtime: int
    dataset: str
    layers: int
    objective: str
    init: str
    regularised: bool


def _grid_runs(grid):
    """`training: grid:` (setting → list of values) → one run per combination, named by its values."""
    keys = list(grid)
    if not keys:
        return
    for values in itertools.product(*(grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys)):
        label = "-".join(f"{v}L" if k == "n_layers" else str(v) for k, v in zip(keys, values))
        yield {"name": label, **dict(zip(keys, values))}


def _training_runs():
    """Runs by name, their settings validated now (a bad config fails before any job starts)."""
    defaults = dict(TRAINING.get("defaults") or {})
    runs = {}
    for entry in [*(TRAINING.get("runs") or []), *_grid_runs(TRAINING.get("grid") or {})]:
        name = entry.get("name")
        if not name or "/" in str(name) or name in runs:
            raise ValueError(f"config: training run name {name!r} is missing, has '/', or is used twice")
        merged = {**defaults, **{k: v for k, v in entry.items() if k != "name"}}
        merged.setdefault("cache_dir", f"{TR}/cache")
        settings = {k: v for k, v in merged.items() if k not in RESOURCE_KEYS}
        try:
            cfg = make_config(settings)
        except ValueError as err:
            raise ValueError(f"config: training run {name!r}: {err}") from None
        gpus = int(merged.get("gpus", 1 if cfg.device == "cuda" else 0))
        runs[name] = TrainingRun(
            name=name,
            settings=settings,
            gpus=gpus,
            threads=int(merged.get("threads", 8 if gpus else 2)),
            mem_mb=int(merged.get("mem_mb", 32000 if gpus else 4000)),
            runtime=int(merged.get("runtime", 24 * 60 if gpus else 60)),
            dataset=dataset_label(cfg.dataset),
            layers=cfg.n_layers,
            objective=cfg.objective,
            init=cfg.init,
            regularised=cfg.reg_weight != 0,
        )
    return runs


TRAINING_RUNS = _training_runs()
_PLAIN = [r for r in TRAINING_RUNS.values() if not r.regularised]
EVOLUTION_GROUPS = sorted({(r.dataset, r.layers) for r in _PLAIN if r.init == "random"})
SYMMETRIC_GROUPS = sorted(
    {(r.dataset, r.layers, r.objective) for r in _PLAIN if r.init == "symmetric"}
    & {(r.dataset, r.layers, r.objective) for r in _PLAIN if r.init == "random"}
)
TRAINING_FIGURES = (
    [f"{TR}/figures/evolution_{d}_{n}L" for d, n in EVOLUTION_GROUPS]
    + [f"{TR}/figures/symmetric_init_{d}_{n}L_{o}" for d, n, o in SYMMETRIC_GROUPS]
    + ([f"{TR}/figures/official_comparison"] if EVOLUTION_GROUPS else [])
)


def training_outputs():
    """Final artifacts of the training part, for the pipeline's `all` rule."""
    if not TRAINING_RUNS:
        return []
    tables = [f"{TR}/tables/{t}.{ext}" for t in ("table_1", "official_comparison") for ext in ("csv", "md", "tex")]
    finals = [f"{TR}/{name}/final" for name in TRAINING_RUNS]
    return finals + tables + [f"{stem}.{ext}" for stem in TRAINING_FIGURES for ext in ("pdf", "png")]


def training_models():
    """The trained models as registry entries, so the scoring rules score them like any other model."""
    return [
        {
            "id": f"trained/{run.name}",
            "display": run.name,
            "training_dir": f"{TR}/{run.name}/final",
            "objective": "bidirectional" if run.objective == "encoder" else "autoregressive",
            "family": "BERT",
            "role": "trained",
            "groups": [],
        }
        for run in TRAINING_RUNS.values()
    ]


def _run_of(wildcards):
    return TRAINING_RUNS[wildcards.run]


if TRAINING_RUNS:

    rule train:
        output:
            final=directory(f"{TR}/{{run}}/final"),
        log:
            f"{TR}/logs/train/{{run}}.log",
        wildcard_constraints:
            run="|".join(re.escape(name) for name in TRAINING_RUNS),
        params:
            settings=lambda wildcards: _run_of(wildcards).settings,
            gpus=lambda wildcards: _run_of(wildcards).gpus,
            out=lambda wildcards: f"{TR}/{wildcards.run}",
        threads: lambda wildcards: _run_of(wildcards).threads
        resources:
            mem_mb=lambda wildcards: _run_of(wildcards).mem_mb,
            runtime=lambda wildcards: _run_of(wildcards).runtime,
            gpu=lambda wildcards: _run_of(wildcards).gpus,
        conda:
            TRAINING_ENV
        script:
            "../../scripts/train_run.py"

    rule training_tables:
        input:
            finals=[f"{TR}/{name}/final" for name in TRAINING_RUNS],
            paper=f"{TRAINING_REFERENCE}/paper_table1_symmetric_init.csv",
            official=f"{TRAINING_REFERENCE}/official_training_evolution.csv",
        output:
            table_1=multiext(f"{TR}/tables/table_1", ".csv", ".md", ".tex"),
            official=multiext(f"{TR}/tables/official_comparison", ".csv", ".md", ".tex"),
        log:
            f"{TR}/logs/training_tables.log",
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        conda:
            TRAINING_ENV
        script:
            "../../scripts/training_tables.py"

if TRAINING_FIGURES:

    rule training_figures:
        input:
            finals=[f"{TR}/{name}/final" for name in TRAINING_RUNS],
            official=f"{TRAINING_REFERENCE}/official_training_evolution.csv",
        output:
            [f"{stem}.{ext}" for stem in TRAINING_FIGURES for ext in ("pdf", "png")],
        log:
            f"{TR}/logs/training_figures.log",
        params:
            evolution=[(d, n, f"{TR}/figures/evolution_{d}_{n}L") for d, n in EVOLUTION_GROUPS],
            symmetric=[(d, n, o, f"{TR}/figures/symmetric_init_{d}_{n}L_{o}") for d, n, o in SYMMETRIC_GROUPS],
            official=f"{TR}/figures/official_comparison",
        threads: 1
        resources:
            mem_mb=4000,
            runtime=20,
        conda:
            TRAINING_ENV
        script:
            "../../scripts/training_figures.py"

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
# The runs and what they produce are computed in workflow/common/training_runs.py (via common.smk).
TRAINING_ENV = "../../envs/attngeom.yaml"


if TRAINING_RUNS:

    rule train:
        output:
            final=directory(f"{TR}/{{run}}/final"),
        log:
            f"{TR}/logs/train/{{run}}.log",
        wildcard_constraints:
            run="|".join(re.escape(name) for name in TRAINING_RUNS),
        params:
            settings=lambda wildcards: TRAINING_RUNS[wildcards.run].settings,
            gpus=lambda wildcards: TRAINING_RUNS[wildcards.run].gpus,
            out=lambda wildcards: f"{TR}/{wildcards.run}",
        threads: lambda wildcards: TRAINING_RUNS[wildcards.run].threads
        resources:
            mem_mb=lambda wildcards: TRAINING_RUNS[wildcards.run].mem_mb,
            runtime=lambda wildcards: TRAINING_RUNS[wildcards.run].runtime,
            gpu=lambda wildcards: TRAINING_RUNS[wildcards.run].gpus,
        conda:
            TRAINING_ENV
        script:
            "../../scripts/train_run.py"

    rule training_tables:
        input:
            finals=[f"{TR}/{name}/final" for name in TRAINING_RUNS],
            paper=REFERENCE / "paper_table1_symmetric_init.csv",
            official=REFERENCE / "official_training_evolution.csv",
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

if EVOLUTION_GROUPS:

    rule training_figures:
        input:
            finals=[f"{TR}/{name}/final" for name in TRAINING_RUNS],
            official=REFERENCE / "official_training_evolution.csv",
        output:
            evolution=[f"{TR}/figures/evolution_{d}_{n}L.{e}" for d, n in EVOLUTION_GROUPS for e in ("pdf", "png")],
            symmetric=[
                f"{TR}/figures/symmetric_init_{d}_{n}L_{o}.{e}" for d, n, o in SYMMETRIC_GROUPS for e in ("pdf", "png")
            ],
            official=multiext(f"{TR}/figures/official_comparison", ".pdf", ".png"),
        log:
            f"{TR}/logs/training_figures.log",
        params:
            evolution=[(d, n, f"{TR}/figures/evolution_{d}_{n}L") for d, n in EVOLUTION_GROUPS],
            symmetric=[(d, n, o, f"{TR}/figures/symmetric_init_{d}_{n}L_{o}") for d, n, o in SYMMETRIC_GROUPS],
            official=lambda wildcards, output: output.official[0].removesuffix(".pdf"),
        threads: 1
        resources:
            mem_mb=4000,
            runtime=20,
        conda:
            TRAINING_ENV
        script:
            "../../scripts/training_figures.py"

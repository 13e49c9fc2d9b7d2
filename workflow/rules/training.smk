# Training: one job per run, then Table 1, Figures 3/S3/S4/S5 and the comparison with the authors'
# published evolution. Every setting of a run is `training: defaults:` overridden by the run's own keys
# (attngeom.training.config.TrainConfig; its defaults are the paper's hyper-parameters); a run may also
# set the scheduler resources gpus, threads and mem_mb (per node), runtime (minutes) and nodes (several:
# DDP across SLURM nodes, profiles/slurm/README.md). Locally each job gets GPUs of its own
# (workflow/rules/gpus.smk); a one-GPU run with `runs_per_gpu: K` shares its GPU with up to K-1 others
# (locally: slots of a GPU; under SLURM: K jobs in one sbatch job with one GPU, group gpu_share_K), with
# `mps: true` under an NVIDIA MPS daemon that the jobs start and stop (attngeom.pipeline.mps).
# Runs come from `training: runs:` (a list of {name, overrides}) and/or `training: grid:` (setting → list
# of values, one run per combination, named by its values); `training: seeds:` repeats every run once per
# seed (<name>-s<seed>). The paper's grid (config/paper.yaml holds it with the paper's optimisation and
# `batch_documents: 256`; `attngeom paper-config` writes it):
#
#   training:
#     defaults: {tokenizer: bert-uncased, device: cuda, compile: true, gpus: 1, runtime: 2880, mem_mb: 64000}
#     seeds: 3
#     grid:
#       dataset: [wikipedia, jigsaw, red_pajama]
#       n_layers: [4, 12]
#       objective: [encoder, decoder]
#       init: [random, symmetric]
#
#   results/training/<run>/{config.yaml, loss.parquet, scores.parquet, checkpoint/, final/}
#   results/training/tables/{table_1,claims,official_comparison}.{csv,md,tex,html}   (Table 1 over seeds, with the null)
#   results/training/figures/{evolution_*,symmetric_init_*,official_comparison}.{pdf,png}
#
# A killed job resumes from its checkpoint when re-run (checkpoint/ is not a declared output, so
# Snakemake never deletes it); a run whose settings or training code changed is trained again from scratch.
# A change to the scoring wing rescores the final models (rule score) and trains nothing (but for the math the
# regulariser trains with, in the training wing too): the tables and
# figures of the evolution name the runs whose recorded scores older code computed, and
# `snakemake --profile profiles/local all --forcerun train` trains those again (docs/pipeline.md, "Reruns follow the code").


if TRAINING_RUNS:

    rule train:
        output:
            final=directory(f"{TR}/{{run}}/final"),
        log:
            f"{TR}/logs/train/{{run}}.log",
        benchmark:
            f"{TR}/benchmarks/train/{{run}}.tsv"
        wildcard_constraints:
            run=slugs_pattern(TRAINING_RUNS),
        group:
            train_group
        conda:
            ENV
        threads: lambda wildcards: TRAINING_RUNS[wildcards.run].threads
        resources:
            mem_mb=train_resource("mem_mb"),
            runtime=train_resource("runtime"),
            gpu=train_resource("gpu"),
            # a run that shares its GPU, or any train job while some run does (locally)
            gpu_slots=train_resource("gpu_slots"),
            # a run on several SLURM nodes (TrainingRun.resources); unset otherwise
            nodes=train_resource("nodes"),
            tasks=train_resource("tasks"),
            tasks_per_gpu=train_resource("tasks_per_gpu"),
            mpi=train_resource("mpi"),
            gres=train_resource("gres"),
        params:
            settings=lambda wildcards: TRAINING_RUNS[wildcards.run].settings,
            gpus=lambda wildcards: TRAINING_RUNS[wildcards.run].gpus,
            # a shared run under NVIDIA MPS (attngeom.pipeline.mps), started and stopped by the jobs
            mps=lambda wildcards: TRAINING_RUNS[wildcards.run].mps,
            shared=lambda wildcards: TRAINING_RUNS[wildcards.run].runs_per_gpu > 1,
            out=lambda wildcards: f"{TR}/{wildcards.run}",
            code=code_of("train_run.py"),
        script:
            "../../scripts/train_run.py"

    rule training_tables:
        input:
            finals=run_finals(),
            paper=REFERENCE / "paper_table1_symmetric_init.csv",
            official=REFERENCE / "official_training_evolution.csv",
            authors=REFERENCE / "authors-logs" / "symmetric-initialization-loss.csv",
        output:
            table_1=report(
                multiext(f"{TR}/tables/table_1", ".csv", ".md", ".tex", ".html"),
                **shown("table_1"),
            ),
            claims=report(
                multiext(f"{TR}/tables/claims", ".csv", ".md", ".tex", ".html"),
                **shown("claims"),
            ),
            official=report(
                multiext(f"{TR}/tables/official_comparison", ".csv", ".md", ".tex", ".html"),
                **shown("official_comparison"),
            ),
        log:
            f"{TR}/logs/training_tables.log",
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            scope=TRAINING_SCOPE,
            official_scope=OFFICIAL_SCOPE,
            scoring_code=SCORING_CODE,
            code=code_of("training_tables.py"),
        script:
            "../../scripts/training_tables.py"


if EVOLUTION_GROUPS:

    rule evolution_figure:
        input:
            finals=lambda wildcards: run_finals(
                lambda run: (run.dataset, str(run.layers)) == (wildcards.dataset, wildcards.layers)
            ),
        output:
            pdf=f"{TR}/figures/evolution_{{dataset}}_{{layers}}L.pdf",
            png=report(
                f"{TR}/figures/evolution_{{dataset}}_{{layers}}L.png",
                **shown("evolution"),
            ),
        log:
            f"{TR}/logs/evolution_figure/{{dataset}}_{{layers}}L.log",
        wildcard_constraints:
            dataset=slugs_pattern(d for d, _ in EVOLUTION_GROUPS),
            layers=r"\d+",
            objective=slugs_pattern(sorted({objective for _, _, objective in SYMMETRIC_GROUPS})),
        conda:
            ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=20,
        params:
            scope=TRAINING_SCOPE,
            official_scope=OFFICIAL_SCOPE,
            scoring_code=SCORING_CODE,
            code=code_of("training_figures.py"),
        script:
            "../../scripts/training_figures.py"

    use rule evolution_figure as symmetric_init_figure with:
        input:
            finals=lambda wildcards: run_finals(
                lambda run: (run.dataset, str(run.layers), trained_objective(run))
                == (wildcards.dataset, wildcards.layers, wildcards.objective)
            ),
            authors=REFERENCE / "authors-logs" / "symmetric-initialization-loss.csv",
        output:
            pdf=f"{TR}/figures/symmetric_init_{{dataset}}_{{layers}}L_{{objective}}.pdf",
            png=report(
                f"{TR}/figures/symmetric_init_{{dataset}}_{{layers}}L_{{objective}}.png",
                **shown("symmetric_init"),
            ),
        log:
            f"{TR}/logs/symmetric_init_figure/{{dataset}}_{{layers}}L_{{objective}}.log",

    use rule evolution_figure as official_figure with:
        input:
            finals=run_finals(),
            official=REFERENCE / "official_training_evolution.csv",
        output:
            pdf=f"{TR}/figures/official_comparison.pdf",
            png=report(
                f"{TR}/figures/official_comparison.png",
                **shown("official_figure"),
            ),
        log:
            f"{TR}/logs/official_figure.log",

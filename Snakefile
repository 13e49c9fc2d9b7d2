# attngeom: score every model's W_qk geometry, then the paper's tables and figures, and train.
#   snakemake --profile profiles/local all                                  (embedded offline default)
#   snakemake --profile profiles/slurm all --configfile config/paper.yaml   (the full paper, on SLURM)
# Targets go before --configfile, which takes every word after it as a config file.
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


# The embedded default only when no --configfile is given, so another config replaces it instead of
# being merged into it.
if not workflow.overwrite_configfiles:

    configfile: Path(workflow.basedir, "config", "config.yaml")


validate(config, "workflow/schemas/config.schema.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/gpus.smk"
include: "workflow/rules/common.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/scoring.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"


rule all:
    input:
        rules.aggregate.input,  # every model's scores and status: one deleted is made again
        rules.aggregate.output,
        rules.tables.output,
        rules.reference_comparison.output,
        rules.figure_2.output,
        rules.figure_s1.output,
        rules.figure_s2.output,
        expand(rules.figure_heads.output, slug=HEADS_FIGURES),
        training_targets(),
    default_target: True

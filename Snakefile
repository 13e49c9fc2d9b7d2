# attngeom: score every model's W_qk geometry, then the paper's Tables S2/S3 and Figures 2, S1, S2.
#   snakemake --profile profiles/local all                         (embedded offline default)
#   snakemake --profile profiles/slurm --configfile config/paper.yaml all
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


# The embedded default only when no --configfile is given, so another config replaces it instead of
# being merged into it.
if not workflow.overwrite_configfiles:

    configfile: Path(workflow.basedir, "config", "config.yaml")


validate(config, "workflow/schemas/config.schema.yaml")



report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/scoring.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"


rule all:
    input:
        all_outputs(),
        training_outputs(TRAINING_RUNS, TR),
    default_target: True

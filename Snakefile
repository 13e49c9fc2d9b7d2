# The entry point from the repository's root (the project's card lists it): `snakemake --profile profiles/local
# all`, `snakemake --profile profiles/slurm all --configfile config/paper.yaml`. The workflow itself is
# workflow/Snakefile, the Snakemake workflow catalog's layout; another workflow uses that file as a module.


include: "workflow/Snakefile"


# Snakemake restores the default target after an include, so the included `rule all` (default_target: True)
# is named again here: `snakemake` and `snakemake --report` with no target mean `all`, as they do there.
workflow.default_target = "all"

# The entry point from the repository's root (the project's card lists it): `snakemake --profile profiles/local
# all`, `snakemake --profile profiles/slurm all --configfile config/paper.yaml`. The workflow itself is
# workflow/Snakefile, the Snakemake workflow catalog's layout; another workflow uses that file as a module.


include: "workflow/Snakefile"

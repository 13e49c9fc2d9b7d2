"""What the Snakemake workflow decides before any job runs: the models of a config, their resources, the
training runs, and the random controls; plain Python, tested without Snakemake.

``workflow/rules/common.smk`` imports these modules; every rule script is a thin reader of
``snakemake.input``/``output``/``params`` that calls the package.
"""

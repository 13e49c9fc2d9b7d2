"""Snakemake script: Figures 3 / S3 / S4 (evolution per dataset and depth), S5 (random vs symmetric init)
and the comparison with the authors' published evolution."""

from pathlib import Path

import pandas as pd

from attngeom.training import figures


def main(snakemake) -> None:
    runs = [Path(final).parent for final in snakemake.input.finals]
    scores, losses = figures.load_runs(runs)
    for dataset, layers, stem in snakemake.params.evolution:
        figures.evolution_figure(scores, dataset, layers, Path(stem))
    for dataset, layers, objective, stem in snakemake.params.symmetric:
        figures.symmetric_init_figure(scores, losses, dataset, layers, objective, Path(stem))
    if snakemake.params.evolution:
        figures.official_figure(
            scores, pd.read_csv(snakemake.input.official), Path(snakemake.params.official)
        )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake

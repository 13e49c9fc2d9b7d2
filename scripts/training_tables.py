"""Snakemake script: Table 1 (final loss, symmetric-init speed-up, the paper's numbers beside ours) and
our symmetry/directionality medians next to the authors' published evolution where a run matches."""

from pathlib import Path

import pandas as pd

from attngeom import tables
from attngeom.training.figures import compare_official, load_runs
from attngeom.training.speedup import table1


def main(snakemake) -> None:
    runs = [Path(final).parent for final in snakemake.input.finals]
    table = table1(runs, pd.read_csv(snakemake.input.paper))
    shown = table.round(3).astype(object).where(table.notna(), "")
    title = "Table 1: final loss (smoothed) and speed-up (%) of symmetric over random initialisation"
    tables.write_table(shown, Path(snakemake.output.table_1[0]).with_suffix(""), title, csv=table)
    scores, _ = load_runs(runs)
    comparison = compare_official(scores, pd.read_csv(snakemake.input.official))
    title = (
        "Median symmetry / directionality over layers, ours vs. the authors' published evolution (runs of the "
        "same depth, objective and dataset; empty when none matches)"
    )
    stem = Path(snakemake.output.official[0]).with_suffix("")
    tables.write_table(comparison.round(3), stem, title, csv=comparison)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake

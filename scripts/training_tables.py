"""Rule training_tables: Table 1 (final loss, symmetric-init speed-up, the paper's numbers beside ours)
and our symmetry/directionality medians next to the authors' published evolution where a run matches."""

from pathlib import Path

import pandas as pd

from attngeom import tables
from attngeom.training.figures import compare_official, load_runs
from attngeom.training.speedup import table1

runs = [Path(final).parent for final in snakemake.input.finals]
table = table1(runs, pd.read_csv(snakemake.input.paper))
tables.write_table(
    table.round(3).astype(object).where(table.notna(), ""),
    Path(snakemake.output.table_1[0]).with_suffix(""),
    "Table 1: final loss (smoothed) and speed-up (%) of symmetric over random initialisation",
    csv=table,
)
scores, _ = load_runs(runs)
comparison = compare_official(scores, pd.read_csv(snakemake.input.official))
tables.write_table(
    comparison.round(3),
    Path(snakemake.output.official[0]).with_suffix(""),
    "Median symmetry / directionality over layers, ours vs. the authors' published evolution",
    csv=comparison,
    empty=(
        "No run here has the depth, objective and dataset of a run in the authors' published evolution "
        "(config/reference/official_training_evolution.csv), so there is nothing to compare."
    ),
)
